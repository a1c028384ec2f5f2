"""`scripts/bench v2-query`: `/query_v2` latency through the real service, and 20 queries at once.

    scripts/bench v2-query                          # allow-lists of 100 and 1,000 files, 10 chunks each
    scripts/bench v2-query --files 100,1000 --repeat 60 --concurrency 20 --json out.json
    scripts/bench v2-query --base /tmp/base        # the same against another checkout's service first

It starts an embedded PostgreSQL in a temporary folder, stores one active V2 run of an Agent's
namespace through `insert_document` (`--per-file` chunks of `--terms` words of real technical English
per file, every fourth chunk a table row "K <n>"; random vectors of the local model's dimension) and
`--foreign` files of another owner, builds the HNSW index, then starts the service (`python -m app`,
EMBEDDINGS_PROVIDER=local, the default pool of DB_POOL_MAX_SIZE=10) and asks `/query_v2` through a
lean HTTP client, as the Agent's caller, with the first N files of the run as the allow-list.

Every question is asked once before timing (the service caches query embeddings, so the embedding
is left out of the figures). Per allow-list size: p50 / p95 of the client's time for `--repeat`
sequential requests, with the server's own stages from Server-Timing; at the largest size once more
with one listed file that the run does not hold (the service then looks for stored files the run
lacks). Then `--concurrency` requests at once, `--rounds` times, at the largest size: every one
must answer 200; per request, the time it waited for pool connections (Server-Timing `pool`)
against its own run time (`total` - `pool`). Nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from app.clients.embeddings import model_identity
from app.config import load_settings
from app.runtime.postgres import EmbeddedPostgres
from app.store.db import bootstrap
from app.store.v2 import documents as document_store
from app.store.v2 import runs as run_store
from app.store.v2 import vectors as vector_store
from app.store.vector_index import build_index, index_spec
from benchmarks.http import LeanHTTP
from benchmarks.service import ServiceProcess, make_token
from benchmarks.v2_channels import comment_words, document_chunks

AGENT = "agent_v2querybench"
OTHER = "agent_v2queryother"
USER = "v2-query-bench-user"
DIMS = 384  # the local model's (all-MiniLM-L6-v2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="scripts/bench v2-query", description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="100,1000", help="allow-list sizes (default 100,1000)")
    parser.add_argument("--per-file", type=int, default=10, help="chunks per file (%(default)s)")
    parser.add_argument("--terms", type=int, default=120, help="words per chunk (%(default)s)")
    parser.add_argument("--foreign", type=int, default=200, help="files of another owner (%(default)s)")
    parser.add_argument("--repeat", type=int, default=60, help="timed requests per size (%(default)s)")
    parser.add_argument("--concurrency", type=int, default=20, help="requests at once (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent rounds (%(default)s)")
    parser.add_argument(
        "--base",
        type=Path,
        help="also measure the service of this checkout (e.g. `git archive <commit> app | tar -x -C DIR`), "
        "first; it applies its own SQL code, and this checkout's is applied again after it",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    options.sizes = sorted({int(x) for x in options.files.split(",") if x.strip()})
    return options


async def load(
    conn: asyncpg.Connection, info: Any, owner: str, files: int, model: str, options: argparse.Namespace
) -> tuple[int, list[str]]:
    """An active run of `owner` with `files` files; its id and file ids."""
    words = comment_words()
    rng = np.random.default_rng(zlib.crc32(owner.encode()))
    file_ids = [f"{owner}-file-{i}" for i in range(files)]
    run = await run_store.create_run(
        conn, info.collection_id, namespace=owner, index_version="v2", extractor_version="bench",
        embedding_model=model, embedding_dim=DIMS, file_ids=file_ids,
    )  # fmt: skip
    start = int(rng.integers(0, len(words)))
    for i, file_id in enumerate(file_ids):
        rows = document_chunks(
            rng, words, start + i * options.per_file * options.terms, chunks=options.per_file,
            terms=options.terms, dims=DIMS,
        )  # fmt: skip
        document = document_store.DocumentRow(
            file_id, owner, uuid.uuid4().hex * 2, "bench", model, "original", f"doc-{i}.pdf",
            f"Document {i}", document_number=f"AB-{i}",
        )  # fmt: skip
        async with conn.transaction():
            document_id = await document_store.insert_document(conn, info.collection_id, document, rows)
            await run_store.link_file(
                conn, run.run_id, file_id, document_id=document_id, source="original", linked=False,
                chunks=len(rows), fingerprints=(),
            )  # fmt: skip
    await run_store.activate_run(conn, info.collection_id, run.run_id)
    return run.run_id, file_ids


async def questions(conn: asyncpg.Connection, run_id: int) -> list[str]:
    """Questions of the corpus's own words: row labels, mid-frequency words, common words."""
    rows = await conn.fetch(
        "SELECT t.term, count(*) AS df FROM ragoverlay_v2_postings t "
        "JOIN ragoverlay_v2_run_files rf ON rf.document_id = t.document_id AND rf.run_id = $1 "
        "WHERE length(t.term) >= 5 AND t.term ~ '^[a-z]+$' GROUP BY t.term ORDER BY 2 DESC, 1 LIMIT 400",
        run_id,
    )
    words = [r["term"] for r in rows]
    common, mid = words[:20], words[100:400]
    out = [f"What is the weight of the K {n}?" for n in (17, 123, 250, 499)]
    out += [f"How does the {mid[i]} {mid[i + 1]} work?" for i in range(0, 40, 5)]
    out += [f"{common[i]} {mid[i * 7]} {mid[i * 11 + 3]}" for i in range(4)]
    out += ["AB-7 document number", "Document 42"]
    return out


def stages(header: str) -> dict[str, float]:
    """Server-Timing's stages: name -> ms."""
    out: dict[str, float] = {}
    for part in header.split(","):
        name, _, rest = part.strip().partition(";dur=")
        if rest:
            out[name] = float(rest)
    return out


def summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 / max of values (ms)."""
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
    }


class Asker:
    """`POST /query_v2` as the Agent's caller, over one lean client."""

    def __init__(self, port: int, token: str) -> None:
        self.http = LeanHTTP("127.0.0.1", port)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def ask(self, question: str, files: list[str]) -> tuple[float, dict[str, float]]:
        """Client ms and the server's stages of one answer (RuntimeError unless 200)."""
        body = json.dumps({"query": question, "file_ids": files, "entity_id": AGENT}).encode()
        started = time.perf_counter()
        reply = await self.http.request("POST", "/query_v2", body, self.headers)
        elapsed = (time.perf_counter() - started) * 1000
        if reply.status != 200:
            raise RuntimeError(f"/query_v2 answered {reply.status}: {reply.content[:300]!r}")
        return elapsed, stages(reply.headers.get("server-timing", ""))


async def sequential(asker: Asker, asked: list[str], files: list[str], repeat: int) -> dict[str, Any]:
    """`repeat` requests one after another: client p50/p95 and the server's stages' p50."""
    for question in asked:  # warm: embeddings cached, plans prepared
        await asker.ask(question, files)
    client: list[float] = []
    server: dict[str, list[float]] = {}
    for i in range(repeat):
        ms, timing = await asker.ask(asked[i % len(asked)], files)
        client.append(ms)
        for name, value in timing.items():
            server.setdefault(name, []).append(value)
    return {
        "client_ms": summary(client),
        "server_p50_ms": {name: round(statistics.median(v), 2) for name, v in server.items()},
        "server_total_ms": summary(server.get("total", [0.0])),
    }


async def concurrent(asker: Asker, asked: list[str], files: list[str], n: int, rounds: int) -> dict[str, Any]:
    """`n` requests at once, `rounds` times: all must answer; pool wait against each one's run time."""
    waits: list[float] = []
    runs: list[float] = []
    client: list[float] = []
    for r in range(rounds):
        answers = await asyncio.gather(*(asker.ask(asked[(r * n + i) % len(asked)], files) for i in range(n)))
        for ms, timing in answers:
            client.append(ms)
            waits.append(timing.get("pool", 0.0))
            runs.append(timing.get("total", 0.0) - timing.get("pool", 0.0))
    worst = max(range(len(waits)), key=lambda i: waits[i])
    return {
        "requests": len(client),
        "all_answered": True,  # any other status raised
        "client_ms": summary(client),
        "pool_wait_ms": summary(waits),
        "run_ms": summary(runs),
        "max_pool_wait_vs_its_run_ms": [round(waits[worst], 2), round(runs[worst], 2)],
        "requests_waiting_longer_than_they_ran": sum(w > r for w, r in zip(waits, runs, strict=True)),
    }


async def prepare(
    dsn: str, options: argparse.Namespace, collection: str
) -> tuple[list[str], list[str], float]:
    """The stored corpus and its HNSW index: the Agent's files, the questions, seconds taken."""
    started = time.perf_counter()
    settings = load_settings(
        database_url=dsn, collection_name=collection, embeddings_provider="local", _env_file=None
    )
    model = model_identity(settings)
    info = await bootstrap(dsn, collection)
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    try:
        run_id, files = await load(conn, info, AGENT, max(options.sizes), model, options)
        await load(conn, info, OTHER, options.foreign, model, options)
        await conn.execute("ANALYZE")
        spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
        assert spec is not None
        await build_index(conn, spec, m=16, ef_construction=64, memory="256MB")
        asked = await questions(conn, run_id)
    finally:
        await conn.close()
    return files, asked, time.perf_counter() - started


async def served(
    dsn: str,
    root: Path,
    options: argparse.Namespace,
    collection: str,
    files: list[str],
    asked: list[str],
    checkout: Path | None,
) -> dict[str, Any]:
    """Start the service (of `checkout`, else this one), measure, stop; its figures."""
    secret = secrets.token_hex(32)
    settings = {"COLLECTION_NAME": collection, "RAG_V2_NAMESPACE_IDS": f"{AGENT},{OTHER}"}
    if checkout is not None:
        settings["PYTHONPATH"] = str(checkout.resolve())  # noqa: ASYNC240 (once, at start-up)
    name = "base" if checkout is not None else "this"
    service = ServiceProcess(dsn, secret, root / f"data-{name}", root / f"service-{name}.log", settings)
    figures: dict[str, Any] = {"service_start_s": round(await service.start(within_s=300), 1)}
    asker = Asker(service.port, make_token(secret, USER))
    try:
        for size in options.sizes:
            figures[f"sequential_{size}_files"] = await sequential(asker, asked, files[:size], options.repeat)
        # one listed file the run does not hold: the service looks up the stored files it lacks
        largest = max(options.sizes)
        figures[f"sequential_{largest}_files_one_not_indexed"] = await sequential(
            asker, asked, [*files[: largest - 1], "not-indexed-file"], options.repeat
        )
        figures[f"concurrent_{options.concurrency}_at_{max(options.sizes)}_files"] = await concurrent(
            asker, asked, files[: max(options.sizes)], options.concurrency, options.rounds
        )
    finally:
        await asker.http.aclose()
        await service.stop()
    return figures


async def measure(dsn: str, root: Path, options: argparse.Namespace) -> dict[str, Any]:
    """Load, then measure the service(s); the figures."""
    collection = f"v2query_{uuid.uuid4().hex[:8]}"
    files, asked, load_s = await prepare(dsn, options, collection)
    figures: dict[str, Any] = {
        "files": {"agent": len(files), "foreign": options.foreign, "chunks_per_file": options.per_file},
        "questions": len(asked),
        "load_and_index_s": round(load_s, 1),
    }
    if options.base is not None:
        figures["base"] = await served(dsn, root, options, collection, files, asked, options.base)
    figures["this"] = await served(dsn, root, options, collection, files, asked, None)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it as JSON."""
    options = parse(argv)
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-v2query-"))
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "postgres")
    try:
        figures = asyncio.run(measure(server.start().dsn, root, options))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
