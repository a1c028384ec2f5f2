"""`python -m benchmarks.v2_index`: what building the V2 index costs and what it holds.

Run from the repository root with the test dependencies installed (`scripts/test` makes `.venv`):

    .venv/bin/python -m benchmarks.v2_index              # a 100-page PDF and the mixed test corpus
    .venv/bin/python -m benchmarks.v2_index --pages 20   # a shorter PDF
    .venv/bin/python -m benchmarks.v2_index --json out.json

It starts an embedded PostgreSQL in a temporary folder, stores the files as `/embed` does (V1
chunks, originals in a local blob folder), then backfills one V2 run per namespace with the default
local model, through the job queue as the service does (a worker of the V2 kinds, INDEXER_CONCURRENCY
slots), and reports: index time per 100 pages, chunk / table-row / entity counts of the mixed
corpus (six formats plus a file known only from V1 rows), the share of indexed text that reaches
the model (counted with the model's own tokenizer, V2 and, for comparison, V1's chunks) and how much
boilerplate was kept out. Nothing here asserts a speed; docs/v2.md quotes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from app.clients.blobs import build_blob_store
from app.clients.embeddings import build_embedder
from app.clients.embeddings.local import local_model_counter
from app.config import Settings, load_settings
from app.config_sections import BlobSettings, JobSettings
from app.evidence.index.backfill import start_backfill_run
from app.evidence.index.context import V2Context
from app.evidence.index.lifecycle import RunStatus, describe_run
from app.evidence.jobs import v2_worker
from app.evidence.store import reads as read_store
from app.ingest.limits import ParseLimits
from app.ingest.pipeline import IngestService, SourceFile
from app.ingest.worker import parse_in_worker
from app.jobs.setup import retry_policy
from app.runtime.postgres import EmbeddedPostgres
from app.store import chunks as v1_store
from app.store.db import SupervisedPool, bootstrap, create_pool
from app.store.scope import Scope
from tests.fixtures import v2_corpus

MIXED = {
    "manual.pdf": v2_corpus.manual_pdf,
    "settings.html": v2_corpus.settings_html,
    "guide.docx": v2_corpus.guide_docx,
    "prices.xlsx": v2_corpus.prices_xlsx,
    "ratings.md": v2_corpus.ratings_md,
    "notes.txt": v2_corpus.notes_txt,
}


def source_of(path: Path) -> SourceFile:
    """A file on disk as an upload."""
    data = path.read_bytes()
    return SourceFile(path, path.name, None, len(data), hashlib.sha256(data).hexdigest())


async def v1_only(ingest: IngestService, folder: Path, owner: str) -> str:
    """A file known only from its V1 rows: stored, then its catalogue row loses the original."""
    path = v2_corpus.long_pdf(folder / "legacy.pdf", 3)
    file_id = "legacy"
    await ingest.ingest(source_of(path), file_id=file_id, owner=owner, uploader=owner)
    async with ingest.pool.acquire() as conn:
        await conn.execute("UPDATE ragoverlay_files SET blob_key = NULL WHERE file_id = $1", file_id)
    return file_id


def share(tokens: list[int], window: int) -> float:
    """Share of all tokens that fit their input window (what a model that truncates reads)."""
    total = sum(tokens)
    return 1.0 if total == 0 else sum(min(t, window) for t in tokens) / total


async def measure(options: argparse.Namespace) -> dict[str, Any]:
    """Build the corpus, backfill it, and gather the figures."""
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-v2bench-"))
    await asyncio.to_thread(root.chmod, 0o755)  # the embedded server may run as another user (as root)
    server = EmbeddedPostgres(root / "postgres")
    try:
        info = await asyncio.to_thread(server.start)
        settings: Settings = load_settings(
            _env_file=None,
            database_url=info.dsn,
            data_dir=root / "data",
            embeddings_provider="local",
            collection_name="v2bench",
        )
        return await _measure(settings, root, options.pages)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _measure(settings: Settings, root: Path, pages: int) -> dict[str, Any]:
    """Store the files, backfill each namespace through the job queue, time it; read back what it holds."""
    dsn = settings.external_dsn()
    info = await bootstrap(dsn, settings.collection_name)
    pool = await create_pool(dsn, min_size=1, max_size=4, statement_timeout_ms=600_000, command_timeout_s=900)
    embedder = build_embedder(settings)
    blobs = build_blob_store(BlobSettings.from_settings(settings))
    ingest = IngestService(settings, pool, info, embedder, blobs)
    ctx = V2Context(settings, pool, info, embedder, blobs)
    folder = root / "files"
    folder.mkdir()
    stack = contextlib.AsyncExitStack()
    work_cm = v2_worker(
        ctx,
        dsn=dsn,
        concurrency=settings.indexer_concurrency,
        policy=retry_policy(JobSettings.from_settings(settings)),
        job_timeout_s=settings.indexer_job_timeout_ms / 1000,
        stale_s=settings.indexer_stale_timeout_s,
    )
    work = await stack.enter_async_context(work_cm)

    async def backfill(namespace: str) -> RunStatus:
        run = await start_backfill_run(ctx, namespace=namespace)
        await work.jobs.enqueue_backfill(namespace=namespace, run_id=run.run_id)
        return await work.jobs.wait_for_run(run.run_id, poll_s=0.05)

    try:
        warm = getattr(embedder, "warmup", None)
        if warm is not None:
            await warm()
        mixed, long_ns = "agent_bench_mixed", "agent_bench_long"
        for name, make in MIXED.items():
            await ingest.ingest(source_of(make(folder / name)), file_id=name, owner=mixed, uploader=mixed)
        await v1_only(ingest, folder, mixed)
        long_path = v2_corpus.long_pdf(folder / "long.pdf", pages)
        times = _Times()
        started = time.perf_counter()
        await ingest.ingest(source_of(long_path), file_id="long.pdf", owner=long_ns, uploader=long_ns)
        times.v1 = time.perf_counter() - started

        started = time.perf_counter()
        parsed = await parse_in_worker(long_path, "long.pdf", limits=ParseLimits.from_settings(settings))
        times.parse = time.perf_counter() - started
        started = time.perf_counter()
        long_progress = await backfill(long_ns)
        times.long = time.perf_counter() - started
        started = time.perf_counter()
        mixed_progress = await backfill(mixed)
        times.mixed = time.perf_counter() - started
        for done in (long_progress, mixed_progress):
            assert done.run.status == "active", describe_run(done)
        # the embedding share of the long file: its chunk texts embedded once more, alone
        async with pool.acquire() as conn:
            long_chunks = await read_store.run_chunks(
                conn, Scope.of(info.collection_id, [long_ns]), long_progress.run.run_id, limit=1_000_000
            )
        started = time.perf_counter()
        await embedder.embed_documents([c.embed_text for c in long_chunks])
        times.embed = time.perf_counter() - started
        held = await _held(pool, info.collection_id, mixed, long_ns, mixed_progress.run.run_id, long_chunks)
        return _figures(pages, parsed.page_count, times, held)
    finally:
        await stack.aclose()
        ingest.close()
        await blobs.aclose()
        await embedder.aclose()
        await pool.close()


@dataclass
class _Times:
    """Seconds taken: V1's ingest and the parse of the long file, each namespace's backfill, its embedding."""

    v1: float = 0.0
    parse: float = 0.0
    long: float = 0.0
    mixed: float = 0.0
    embed: float = 0.0


@dataclass
class _Held:
    """What the two runs and V1 hold once the backfills are done."""

    mixed_chunks: list[read_store.StoredChunk]
    long_chunks: list[read_store.StoredChunk]
    documents: list[asyncpg.Record]  # the mixed corpus's V2 documents (file_id, source, metadata)
    entity_kinds: list[asyncpg.Record]  # (kind, n) of the mixed corpus
    long_entities: int
    v1_rows: list[v1_store.StoredChunk]


async def _held(
    pool: SupervisedPool,
    collection_id: uuid.UUID,
    mixed: str,
    long_ns: str,
    mixed_run: int,
    long_chunks: list[read_store.StoredChunk],
) -> _Held:
    """Read back the mixed run's chunks, documents and entities, the long file's entities, V1's rows."""
    async with pool.acquire() as conn:
        mixed_chunks = await read_store.run_chunks(
            conn, Scope.of(collection_id, [mixed]), mixed_run, limit=1_000_000
        )
        documents = await conn.fetch(
            "SELECT file_id, source, metadata::text AS metadata FROM ragoverlay_v2_documents "
            "WHERE owner = $1",
            mixed,
        )
        entity_kinds = await conn.fetch(
            "SELECT kind, count(*) AS n FROM ragoverlay_v2_entities WHERE owner = $1 GROUP BY kind", mixed
        )
        long_entities = await conn.fetchval(
            "SELECT count(*) FROM ragoverlay_v2_entities WHERE owner = $1", long_ns
        )
        v1_scope = Scope.of(collection_id, [mixed, long_ns])
        v1_files = await v1_store.list_file_ids(conn, v1_scope, limit=1_000_000)
        v1_rows = await v1_store.documents(conn, v1_scope.with_files(v1_files), limit=1_000_000)
    return _Held(mixed_chunks, long_chunks, documents, entity_kinds, int(long_entities), v1_rows)


def _figures(pages: int, pages_parsed: int | None, times: _Times, held: _Held) -> dict[str, Any]:
    """The run's figures: the long PDF, the mixed corpus, what reaches the model, the boilerplate."""
    counter, window = local_model_counter()
    long_chunks, mixed_chunks, documents = held.long_chunks, held.mixed_chunks, held.documents
    all_v2 = mixed_chunks + long_chunks
    v2_tokens = [counter.count(c.embed_text) + counter.special_tokens for c in all_v2]
    v1_tokens = [counter.count(r.text) + counter.special_tokens for r in held.v1_rows]
    kept = removed = 0
    kinds: Counter[str] = Counter()
    for doc in documents:
        stats = json.loads(doc["metadata"]).get("stats", {})
        kept += stats.get("kept_chars", 0)
        removed += stats.get("boilerplate_chars", 0)
        kinds.update(stats.get("boilerplate_by_kind", {}))
    per_file = Counter(c.file_id for c in mixed_chunks)
    return {
        "pages": pages,
        "long_pdf": {
            "chunks": len(long_chunks),
            "table_rows": sum(1 for c in long_chunks if c.place.kind == "table_row"),
            "entities": held.long_entities,
            "v2_backfill_seconds": round(times.long, 2),
            "v2_seconds_per_100_pages": round(times.long * 100 / pages, 2),
            "parse_seconds": round(times.parse, 2),
            "embed_seconds": round(times.embed, 2),
            "v1_ingest_seconds": round(times.v1, 2),
            "pages_parsed": pages_parsed,
        },
        "mixed": {
            "files": len(per_file),
            "chunks": len(mixed_chunks),
            "table_rows": sum(1 for c in mixed_chunks if c.place.kind == "table_row"),
            "prose": sum(1 for c in mixed_chunks if c.place.kind == "prose"),
            "entities": sum(int(r["n"]) for r in held.entity_kinds),
            "entities_by_kind": {r["kind"]: int(r["n"]) for r in held.entity_kinds},
            "chunks_per_file": dict(sorted(per_file.items())),
            "sources": dict(Counter(d["source"] for d in documents)),
            "backfill_seconds": round(times.mixed, 2),
        },
        "model_window": window,
        "v2_chunks_over_window": sum(1 for t in v2_tokens if t > window),
        "v2_max_tokens": max(v2_tokens),
        "v2_share_reaching_model": round(share(v2_tokens, window), 4),
        "v1_chunks": len(v1_tokens),
        "v1_chunks_over_window": sum(1 for t in v1_tokens if t > window),
        "v1_share_if_truncated": round(share(v1_tokens, window), 4),
        "boilerplate": {
            "chars_removed": removed,
            "chars_kept": kept,
            "share_removed": round(removed / (removed + kept), 4) if removed + kept else 0.0,
            "blocks_by_kind": dict(kinds),
        },
        "machine": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
        "run": str(uuid.uuid4())[:8],
    }


def report(figures: dict[str, Any]) -> str:
    """The figures as markdown lines."""
    f, long, mixed, bp = figures, figures["long_pdf"], figures["mixed"], figures["boilerplate"]
    total_chars = bp["chars_removed"] + bp["chars_kept"]
    lines = [
        f"- {f['pages']}-page PDF: V2 backfill {long['v2_backfill_seconds']} s "
        f"(**{long['v2_seconds_per_100_pages']} s per 100 pages**; parse {long['parse_seconds']} s, "
        f"embedding {long['embed_seconds']} s), {long['chunks']} chunks of which {long['table_rows']} "
        f"table rows, {long['entities']} entities; V1 ingest of the same file {long['v1_ingest_seconds']} s",
        f"- mixed corpus ({mixed['files']} files: {mixed['sources']}): {mixed['chunks']} chunks "
        f"({mixed['prose']} prose, {mixed['table_rows']} table rows), {mixed['entities']} entities "
        f"{mixed['entities_by_kind']}, backfill {mixed['backfill_seconds']} s",
        f"- share of indexed text reaching the model (window {f['model_window']} tokens): V2 "
        f"**{f['v2_share_reaching_model']:.1%}** ({f['v2_chunks_over_window']} chunks over the window, "
        f"longest {f['v2_max_tokens']} tokens); V1's {f['v1_chunks']} chunks, were they truncated: "
        f"{f['v1_share_if_truncated']:.1%} ({f['v1_chunks_over_window']} over)",
        f"- boilerplate kept out of the mixed corpus: {bp['chars_removed']} of {total_chars} characters "
        f"({bp['share_removed']:.1%}), blocks by kind {bp['blocks_by_kind']}",
        f"- machine: {f['machine']['cpus']} CPUs, load average {f['machine']['load_average']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.v2_index",
        description="What building the V2 index costs and what it holds.",
    )
    parser.add_argument("--pages", type=int, default=100, help="pages of the long PDF (%(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    figures = asyncio.run(measure(options))
    print(report(figures))
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
