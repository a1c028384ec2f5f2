"""`scripts/bench v2-query`: `/query_v2` beside V1's `/query_multiple` through one service, and 20 at once.

    scripts/bench v2-query                          # allow-lists of 100 and 1,000 files, 10 chunks each
    scripts/bench v2-query --files 100,1000 --repeat 60 --concurrency 20 --json out.json
    scripts/bench v2-query --base /tmp/base        # the same against another checkout's service first
    scripts/bench v2-query --base . --base-env DB_POOL_MAX_SIZE=20 --env DB_POOL_MAX_SIZE=30

It starts an embedded PostgreSQL in a temporary folder and stores one active V2 run of an Agent's
namespace through `insert_document` (`--per-file` chunks of `--terms` words of real technical English
per file, every fourth chunk a table row "K <n>"; random vectors of the local model's dimension) and
`--foreign` files of another owner. The same chunks (ids, texts, vectors, file ids, owners) are
stored again as rag_api rows in `langchain_pg_embedding`, V1's table, through the main benchmark's
COPY (benchmarks/database.py). It builds both HNSW indexes with the service's default parameters,
then starts the service (`python -m app`, EMBEDDINGS_PROVIDER=local, its default pool) and asks, as
the Agent's caller (`entity_id`) with the first N files of the run as the allow-list, the same
questions with the same `--k` of `/query_v2` and of `/query_multiple`, through a lean HTTP client.

Every question is asked once on each route before timing (the service caches query embeddings, so
the embedding is left out of the figures). Per allow-list size and route: p50 / p95 of the client's
time for `--repeat` sequential requests, with the server's own stages from Server-Timing; at the
largest size V2 once more with one listed file that the run does not hold (the service then looks
for stored files the run lacks). Then `--concurrency` requests at once, `--rounds` times, at the
largest size: all V2, all V1, and half of each, after one round not kept (the pool opens the
connections it lacks). Every one must answer 200; per request, the time it
waited for a pool connection (Server-Timing `pool`) against its own run time (`total` - `pool`).
Prints a markdown table and the JSON figures. Nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import shutil
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from app.clients.embeddings import model_identity
from app.config import Settings, load_settings
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.runtime.postgres import EmbeddedPostgres
from app.store.db import bootstrap
from app.store.vector_index import build_index, index_spec
from benchmarks import database as db
from benchmarks.corpus import ChunkRow
from benchmarks.http import LeanHTTP
from benchmarks.options import parse_env_pairs
from benchmarks.service import ServiceProcess, make_token
from benchmarks.stats import parse_server_timing
from benchmarks.v2_channels import comment_words, document_chunks
from benchmarks.v2_query_report import markdown, summary

AGENT = "agent_v2querybench"
OTHER = "agent_v2queryother"
USER = "v2-query-bench-user"
DIMS = 384  # the local model's (all-MiniLM-L6-v2)
ROUTES = {"v1": "/query_multiple", "v2": "/query_v2"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="scripts/bench v2-query", description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="100,1000", help="allow-list sizes (default 100,1000)")
    parser.add_argument("--per-file", type=int, default=10, help="chunks per file (%(default)s)")
    parser.add_argument("--terms", type=int, default=120, help="words per chunk (%(default)s)")
    parser.add_argument("--foreign", type=int, default=200, help="files of another owner (%(default)s)")
    parser.add_argument("--k", type=int, default=8, help="k of both routes (%(default)s, V2's default)")
    parser.add_argument("--repeat", type=int, default=60, help="timed requests per row (%(default)s)")
    parser.add_argument("--concurrency", type=int, default=20, help="requests at once (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent rounds (%(default)s)")
    parser.add_argument(
        "--base",
        type=Path,
        help="also measure the service of this checkout (e.g. `git archive <commit> app | tar -x -C DIR`, "
        "or `.` with --base-env), first; it applies its own SQL code, and this checkout's is applied "
        "again after it",
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a setting of this service"
    )
    parser.add_argument(
        "--base-env", action="append", default=[], metavar="KEY=VALUE", help="a setting of the base"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    options.sizes = sorted({int(x) for x in options.files.split(",") if x.strip()})
    options.env = parse_env_pairs(options.env)
    options.base_env = parse_env_pairs(options.base_env)
    return options


def rag_api_rows(owner: str, index: int, file_id: str, rows: list[document_store.ChunkRow]) -> list[ChunkRow]:
    """The same chunks as rag_api v0.9 rows: chunk ids, texts, vectors, file id and owner kept."""
    source = f"/app/uploads/{owner}/{file_id}-doc-{index}.pdf"
    out = []
    for row in rows:
        chunk = row.chunk
        digest = hashlib.md5(chunk.content.encode()).hexdigest()  # noqa: S324 (rag_api's digest)
        page = (chunk.place.page or 1) - 1  # rag_api stores 0-based pages
        assert row.embedding is not None  # the benchmark's chunks all have vectors
        meta = {"source": source, "page": page, "file_id": file_id, "user_id": owner, "digest": digest}
        out.append(ChunkRow(uuid.UUID(chunk.id), row.embedding, chunk.content, json.dumps(meta), file_id))
    return out


async def load(
    conn: asyncpg.Connection, info: Any, owner: str, files: int, model: str, options: argparse.Namespace
) -> tuple[int, list[str], list[ChunkRow]]:
    """An active run of `owner` with `files` files; its id, file ids and the same chunks as V1 rows."""
    words = comment_words()
    rng = np.random.default_rng(zlib.crc32(owner.encode()))
    file_ids = [f"{owner}-file-{i}" for i in range(files)]
    run = await run_store.create_run(
        conn, info.collection_id, namespace=owner, index_version="v2", extractor_version="bench",
        embedding_model=model, embedding_dim=DIMS, file_ids=file_ids,
    )  # fmt: skip
    start = int(rng.integers(0, len(words)))
    v1_rows: list[ChunkRow] = []
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
        v1_rows.extend(rag_api_rows(owner, i, file_id, rows))
    await run_store.activate_run(conn, info.collection_id, run.run_id)
    return run.run_id, file_ids, v1_rows


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


class Asker:
    """`POST /query_v2` or `/query_multiple` as the Agent's caller, over one lean client."""

    def __init__(self, port: int, token: str, k: int) -> None:
        self.http = LeanHTTP("127.0.0.1", port)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.k = k

    async def ask(self, route: str, question: str, files: list[str]) -> tuple[float, dict[str, Any]]:
        """Client ms, the server's stages and the result count of one answer (RuntimeError unless 200)."""
        # the same body for both routes: V1 reads {query, file_ids, k, entity_id}, V2 the same
        body = json.dumps({"query": question, "file_ids": files, "k": self.k, "entity_id": AGENT}).encode()
        started = time.perf_counter()
        reply = await self.http.request("POST", ROUTES[route], body, self.headers)
        elapsed = (time.perf_counter() - started) * 1000
        if reply.status != 200:
            raise RuntimeError(f"{ROUTES[route]} answered {reply.status}: {reply.content[:300]!r}")
        timing: dict[str, Any] = parse_server_timing(reply.headers.get("server-timing"))
        answer = json.loads(reply.content)  # V1: a list of [document, distance]; V2: {"results": [...]}
        timing["results"] = float(len(answer if isinstance(answer, list) else answer["results"]))
        return elapsed, timing


async def sequential(
    asker: Asker, route: str, asked: list[str], files: list[str], repeat: int
) -> dict[str, Any]:
    """`repeat` requests one after another: client p50/p95 and the server's stages' p50."""
    for question in asked:  # warm: embeddings cached, plans prepared
        await asker.ask(route, question, files)
    client: list[float] = []
    server: dict[str, list[float]] = {}
    paths: dict[str, int] = {}
    for i in range(repeat):
        ms, timing = await asker.ask(route, asked[i % len(asked)], files)
        client.append(ms)
        for name, value in timing.items():
            if isinstance(value, float):
                server.setdefault(name, []).append(value)
            else:
                paths[f"{name}={value}"] = paths.get(f"{name}={value}", 0) + 1
    out: dict[str, Any] = {
        "client_ms": summary(client),
        "server_p50_ms": {name: summary(v)["p50"] for name, v in server.items()},
        "server_total_ms": summary(server.get("total", [0.0])),
    }
    if paths:
        out["paths"] = paths  # V1's search path (Server-Timing db desc): exact or index
    return out


async def concurrent(
    asker: Asker, routes: list[str], asked: list[str], files: list[str], rounds: int
) -> dict[str, Any]:
    """`len(routes)` requests at once (request i on routes[i]), `rounds` times; figures per route."""
    per: dict[str, dict[str, list[float]]] = {r: {"client": [], "wait": [], "run": []} for r in set(routes)}
    stages: dict[str, dict[str, list[float]]] = {r: {} for r in set(routes)}
    n = len(routes)
    # one round first, not kept: the pool opens the connections it lacks (DB_POOL_MIN_SIZE is 1)
    await asyncio.gather(*(asker.ask(route, asked[i % len(asked)], files) for i, route in enumerate(routes)))
    for r in range(rounds):
        answers = await asyncio.gather(
            *(asker.ask(route, asked[(r * n + i) % len(asked)], files) for i, route in enumerate(routes))
        )
        for route, (ms, timing) in zip(routes, answers, strict=True):
            wait, total = float(timing.get("pool", 0.0)), float(timing.get("total", 0.0))
            per[route]["client"].append(ms)
            per[route]["wait"].append(wait)
            per[route]["run"].append(total - wait)
            for name, value in timing.items():
                if isinstance(value, float):
                    stages[route].setdefault(name, []).append(value)
    out: dict[str, Any] = {}
    for route, f in sorted(per.items()):
        if "pool" not in stages[route]:  # a service that does not report its connection wait
            out[route] = {
                "requests": len(f["client"]),
                "all_answered": True,
                "client_ms": summary(f["client"]),
            }
            continue
        waits, runs = f["wait"], f["run"]
        worst = max(range(len(waits)), key=lambda i: waits[i])
        out[route] = {
            "requests": len(waits),
            "all_answered": True,  # any other status raised
            "client_ms": summary(f["client"]),
            "pool_wait_ms": summary(waits),
            "run_ms": summary(runs),
            "max_pool_wait_vs_its_run_ms": [round(waits[worst], 2), round(runs[worst], 2)],
            "requests_waiting_longer_than_they_ran": sum(w > x for w, x in zip(waits, runs, strict=True)),
            "server_p50_ms": {name: summary(v)["p50"] for name, v in stages[route].items()},
        }
    return out


async def prepare(
    dsn: str, options: argparse.Namespace, collection: str
) -> tuple[list[str], list[str], float]:
    """The stored corpus (V2 run and rag_api rows) and both HNSW indexes: files, questions, seconds."""
    started = time.perf_counter()
    settings = load_settings(
        database_url=dsn, collection_name=collection, embeddings_provider="local", _env_file=None
    )
    model = model_identity(settings)
    info = await bootstrap(dsn, collection)
    conn = await db.connect(dsn)
    try:
        run_id, files, rows = await load(conn, info, AGENT, max(options.sizes), model, options)
        rows += (await load(conn, info, OTHER, options.foreign, model, options))[2]
        ranges = [(i, min(i + 2000, len(rows))) for i in range(0, len(rows), 2000)]
        await db.load_rows(
            dsn, info.collection_id, ranges, lambda a, b: rows[a:b], parallel=1, report=lambda _: None
        )
        await conn.execute("VACUUM (ANALYZE) langchain_pg_embedding")
        await conn.execute("VACUUM (ANALYZE) ragoverlay_vectors")
        await conn.execute("ANALYZE")
        await build_indexes(conn, settings)
        asked = await questions(conn, run_id)
    finally:
        await conn.close()
    return files, asked, time.perf_counter() - started


async def build_indexes(conn: asyncpg.Connection, settings: Settings) -> None:
    """V1's and V2's HNSW indexes of the dimension, with the service's default parameters."""
    for family in (None, vector_store.V2_CHUNK_INDEX):
        spec = index_spec(DIMS) if family is None else index_spec(DIMS, family)
        assert spec is not None
        await build_index(
            conn, spec, m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction,
            memory=settings.hnsw_build_memory,
        )  # fmt: skip


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
    from benchmarks.service_state import wait_for_copy

    secret = secrets.token_hex(32)
    settings = {"COLLECTION_NAME": collection, "RAG_V2_NAMESPACE_IDS": f"{AGENT},{OTHER}"}
    settings.update(options.env if checkout is None else options.base_env)
    if checkout is not None:
        settings["PYTHONPATH"] = str(checkout.resolve())  # noqa: ASYNC240 (once, at start-up)
    name = "base" if checkout is not None else "this"
    service = ServiceProcess(dsn, secret, root / f"data-{name}", root / f"service-{name}.log", settings)
    figures: dict[str, Any] = {"service_start_s": round(await service.start(within_s=300), 1)}
    figures["settings"] = {k: v for k, v in settings.items() if k != "PYTHONPATH"}
    asker = Asker(service.port, make_token(secret, USER), options.k)
    conn = await db.connect(dsn)
    try:
        # V1 reads the service's vector copy; its backfill (of nothing new) runs at start-up
        figures["vector_copy"] = (await wait_for_copy(conn, service, 120.0))["summary"]
        largest = max(options.sizes)
        for size in options.sizes:
            for route in ROUTES:
                figures[f"{route}_sequential_{size}_files"] = await sequential(
                    asker, route, asked, files[:size], options.repeat
                )
        # one listed file the run does not hold: the service looks up the stored files it lacks
        figures[f"v2_sequential_{largest}_files_one_not_indexed"] = await sequential(
            asker, "v2", asked, [*files[: largest - 1], "not-indexed-file"], options.repeat
        )
        n = options.concurrency
        for label, routes in (("v2", ["v2"] * n), ("v1", ["v1"] * n), ("mixed", ["v1", "v2"] * (n // 2))):
            figures[f"concurrent_{label}_{len(routes)}_at_{largest}_files"] = await concurrent(
                asker, routes, asked, files[:largest], options.rounds
            )
    finally:
        await conn.close()
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
        "k": options.k,
        "load_and_index_s": round(load_s, 1),
    }
    if options.base is not None:
        figures["base"] = await served(dsn, root, options, collection, files, asked, options.base)
    figures["this"] = await served(dsn, root, options, collection, files, asked, None)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; print it as a markdown table and as JSON."""
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
    print()
    print(markdown(figures))
    if options.json:
        options.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
