"""`python -m benchmarks.mcp`: `rag_search` latency over MCP beside the HTTP routes, in one run.

One app (uvicorn, on a throwaway embedded PostgreSQL, the offline model) holds one namespace. Files
are stored until each size is reached (through the store by default, with the app's own model and
the rows an upload writes; `--upload` sends them through `/embed` instead, slow on a busy machine)
and, with v2, the namespace's V2 backfill is queued and awaited; then the same questions are asked,
interleaved, through:

    HTTP  POST /query_multiple (V1)      MCP  rag_search mode=v1
    HTTP  POST /query_v2 (V2)            MCP  rag_search mode=v2

with the same file ids, over one reused HTTP connection pool and one MCP session (the SDK's
client). Prints p50/p95 in milliseconds per size and path. A short run: `--sizes 100 --queries 20`.

Loading is the slow part (indexing 1,000 files for V2 through the queue took minutes): `--keep DIR`
keeps the database and the files' ids in DIR, and a later run with the same `--keep DIR` (same
seed and modes) measures at once on what is there, loading and indexing only what a larger size
adds. Each size's allow-list is the first N files loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.clients.embeddings import model_identity
from app.config import load_settings
from app.ingest.chunking import md5_digest
from app.main import create_app
from app.runtime.postgres import EmbeddedPostgres
from app.store.chunks import FileRecord, NewChunk, replace_file
from benchmarks.service import free_port, make_token
from benchmarks.stats import summarize

CORPUS_MARKER = "corpus.json"
SECRET = "benchmark-secret-0123456789-0123456789-0123456789"  # noqa: S105 (a local benchmark's own)
USER = "bench-user"
ADMIN = "bench-admin"
WORDS = (
    "pump valve seal bearing motor gearbox filter pressure flow rate service interval hours torque "
    "voltage current sensor alarm threshold coolant lubricant inspection manual warranty safety "
    "temperature rated stainless steel bronze gasket flange coupling impeller housing shaft"
).split()
QUESTIONS = [
    "How often must the pump be serviced?",
    "What pressure is the valve rated for?",
    "Which lubricant does the gearbox need?",
    "What is the alarm threshold of the temperature sensor?",
    "Which gasket fits the flange coupling?",
]


def document(rng: random.Random, index: int) -> bytes:
    """A small manual-like text: a few sentences of the vocabulary and a model number of its own."""
    sentences = []
    for _ in range(rng.randint(4, 10)):
        words = rng.sample(WORDS, 8)
        sentences.append(f"The {words[0]} {words[1]} of model P-{index} needs {' '.join(words[2:])}.")
    return " ".join(sentences).encode()


async def upload_until(http: httpx.AsyncClient, have: list[str], size: int, rng: random.Random) -> None:
    """Upload files until `have` holds `size` (eight at a time)."""
    headers = {"Authorization": f"Bearer {make_token(SECRET, USER)}"}
    semaphore = asyncio.Semaphore(8)

    async def one(index: int) -> None:
        file_id = f"bench-{uuid.uuid4().hex[:12]}"
        async with semaphore:
            r = await http.post(
                "/embed",
                data={"file_id": file_id},
                files={"file": (f"manual-{index}.txt", document(rng, index), "text/plain")},
                headers=headers,
            )
        r.raise_for_status()
        have.append(file_id)

    await asyncio.gather(*(one(i) for i in range(len(have), size)))


async def store_until(app: Any, have: list[str], size: int, rng: random.Random) -> None:
    """V1 only: store files straight through the store (no parse worker), embedded by the app's model.

    On a busy machine the per-upload parse process dominates loading; the rows and catalogue entries
    written here are those an upload writes, so the searches measured are the same.
    """
    res = app.state.services
    start = len(have)
    texts = [document(rng, i).decode() for i in range(start, size)]
    vectors = []
    for i in range(0, len(texts), 64):
        vectors.extend(await res.embedder.embed_documents(texts[i : i + 64]))
    for offset, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        index = start + offset
        file_id = f"bench-{uuid.uuid4().hex[:12]}"
        name = f"manual-{index}.txt"
        meta = {"file_id": file_id, "user_id": USER, "digest": md5_digest(text), "source": name}
        record = FileRecord(
            file_id,
            USER,
            USER,
            name,
            "text/plain",
            len(text),
            None,
            None,
            1,
            model_identity(res.settings),
            len(vector),
        )
        async with res.pool.acquire() as conn, conn.transaction():
            await replace_file(conn, res.info, record, [NewChunk(uuid.uuid4(), vector, text, meta)])
        await res.maintenance.state.file_stored(record)
        have.append(file_id)


async def wait_v2(http: httpx.AsyncClient, files: int, timeout_s: float) -> None:
    """Until the namespace's active V2 run holds `files` files and nothing is left to stage."""
    headers = {"Authorization": f"Bearer {make_token(SECRET, ADMIN)}"}
    deadline = time.monotonic() + timeout_s
    while True:
        body = (await http.get("/v2/status", headers=headers)).json()
        active = [r for r in body["active_runs"] if r["namespace"] == USER]
        if active and active[0]["files"] >= files and not body.get("running_runs"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"V2 did not index {files} files in {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


async def timed(samples: list[float], call: Callable[[], Awaitable[None]]) -> None:
    """Run `call` once and record its wall time in milliseconds."""
    t0 = time.perf_counter()
    await call()
    samples.append((time.perf_counter() - t0) * 1000)


async def measure(
    url: str, http: httpx.AsyncClient, ids: list[str], queries: int, modes: set[str]
) -> dict[str, dict[str, float]]:
    """The paths of `modes`, the same questions interleaved, `queries` timed calls each (after a warm-up)."""
    token = make_token(SECRET, USER)
    headers = {"Authorization": f"Bearer {token}"}
    v2_ids = ids[:1000]
    samples: dict[str, list[float]] = {"http_v1": [], "mcp_v1": [], "http_v2": [], "mcp_v2": []}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as mcp_http:
        async with Client(
            streamable_http_client(f"{url}/mcp", http_client=mcp_http), mode="legacy"
        ) as client:

            async def http_v1(q: str) -> None:
                body = {"query": q, "file_ids": v2_ids, "k": 5}
                r = await http.post("/query_multiple", json=body, headers=headers)
                assert r.status_code in (200, 404), r.text

            async def mcp_v1(q: str) -> None:
                args = {"query": q, "file_ids": v2_ids, "k": 5, "mode": "v1"}
                result = await client.call_tool("rag_search", args)
                assert not result.is_error, result.content

            async def http_v2(q: str) -> None:
                r = await http.post(
                    "/query_v2", json={"query": q, "file_ids": v2_ids, "k": 8}, headers=headers
                )
                assert r.status_code == 200, r.text

            async def mcp_v2(q: str) -> None:
                args = {"query": q, "file_ids": v2_ids, "k": 8, "mode": "v2"}
                result = await client.call_tool("rag_search", args)
                assert not result.is_error, result.content

            every = {"http_v1": http_v1, "mcp_v1": mcp_v1, "http_v2": http_v2, "mcp_v2": mcp_v2}
            paths = {name: fn for name, fn in every.items() if name[-2:] in modes}
            for question in QUESTIONS:  # warm-up: the model, the plans, the caches
                for fn in paths.values():
                    await fn(question)
            for i in range(queries):
                question = QUESTIONS[i % len(QUESTIONS)]
                for name, fn in paths.items():
                    await timed(samples[name], lambda fn=fn, q=question: fn(q))  # type: ignore[misc]
    return {name: summarize(samples[name]) for name in paths}


async def reindex(http: httpx.AsyncClient) -> None:
    """Queue the namespace's V2 backfill (admin)."""
    headers = {"Authorization": f"Bearer {make_token(SECRET, ADMIN)}"}
    r = await http.post("/admin/reindex", params={"namespace": USER}, headers=headers)
    r.raise_for_status()


SEED = 7


def cached_corpus(keep: Path, modes: set[str]) -> tuple[Path, dict[str, Any]]:
    """The `--keep` folder, and what an earlier run left there: the files' ids, how many V2 indexed.

    A folder loaded with other modes or another seed starts again from nothing.
    """
    root = keep.resolve()
    root.mkdir(parents=True, exist_ok=True)
    marker = root / CORPUS_MARKER
    want = {"seed": SEED, "modes": sorted(modes)}
    if marker.exists():
        found: dict[str, Any] = json.loads(marker.read_text())
        if {k: found.get(k) for k in want} == want:
            return root, found
        print(f"{root} holds another corpus ({marker}): loading again", flush=True)
    for name in ("postgres", "data", CORPUS_MARKER):
        path = root / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return root, {**want, "ids": [], "v2_files": 0}


async def run(
    sizes: list[int],
    queries: int,
    timeout_s: float,
    modes: set[str],
    *,
    upload: bool = False,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Start the database and the app, then measure at each size (`keep`: reuse and keep the corpus)."""
    if keep is not None:
        root, corpus = cached_corpus(keep, modes)
    else:
        root = Path(tempfile.mkdtemp(prefix="ragoverlay-bench-mcp-"))
        corpus = {"ids": [], "v2_files": 0}
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "postgres")
    info = await asyncio.to_thread(server.start)
    report: dict[str, Any] = {"sizes": {}}
    try:
        settings = load_settings(
            _env_file=None,
            database_url=info.dsn,
            data_dir=root / "data",
            jwt_secret=SECRET,
            embeddings_provider="local",
            # without v2 the namespace is not V2-enabled: uploads queue no V2 staging (a faster load)
            v2_namespace_ids=[USER] if "v2" in modes else [],
            admin_user_ids=[ADMIN],
            mcp_session_create_rate_per_minute=0,
        )
        app = create_app(settings)
        port = free_port()
        uv = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
        )
        serving = asyncio.create_task(uv.serve())
        while not uv.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        rng = random.Random(SEED)
        ids: list[str] = list(corpus["ids"])
        for _ in ids:  # the documents already stored: the generator continues after them
            document(rng, 0)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:
                for size in sizes:
                    t0 = time.perf_counter()
                    if len(ids) < size:
                        if upload:
                            await upload_until(http, ids, size, rng)
                        else:
                            await store_until(app, ids, size, rng)
                    if "v2" in modes and int(corpus["v2_files"]) < size:
                        if not upload:  # stored files queue nothing: the V2 backfill builds from V1 chunks
                            await reindex(http)
                        await wait_v2(http, size, timeout_s)
                        corpus["v2_files"] = size
                    loaded = time.perf_counter() - t0
                    if keep is not None:
                        (root / CORPUS_MARKER).write_text(json.dumps({**corpus, "ids": ids}))
                    figures = await measure(url, http, ids, queries, modes)
                    report["sizes"][str(size)] = {"load_s": round(loaded, 1), **figures}
                    print(render(size, loaded, figures), flush=True)
        finally:
            uv.should_exit = True
            await serving
    finally:
        await asyncio.to_thread(server.stop)
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return report


def render(size: int, loaded: float, figures: dict[str, dict[str, float]]) -> str:
    """One markdown table for one size."""
    lines = [
        f"\n{size} files (loaded in {loaded:.0f} s), ms:",
        "| path | n | p50 | p95 |",
        "| --- | --- | --- | --- |",
    ]
    for name, stats in figures.items():
        lines.append(f"| {name} | {stats.get('n', 0)} | {stats.get('p50', '-')} | {stats.get('p95', '-')} |")
    return "\n".join(lines)


def main() -> None:
    """Parse the command line, run, print the JSON summary."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="file counts to measure at (%(default)s)")
    parser.add_argument("--queries", type=int, default=40, help="timed calls per path and size (%(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for V2 indexing")
    parser.add_argument(
        "--modes", default="v1,v2", help="v1, v2 or both (%(default)s); v1 alone loads faster"
    )
    parser.add_argument(
        "--upload",
        action="store_true",
        help="load through POST /embed (the parse worker) instead of the store",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the database and corpus in DIR, and reuse what an earlier run left there",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    modes = {m.strip() for m in args.modes.split(",") if m.strip() in ("v1", "v2")}
    report = asyncio.run(run(sizes, args.queries, args.timeout, modes, upload=args.upload, keep=args.keep))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
