"""`scripts/v2-backfill NAMESPACE`: build and activate a V2 index run of a namespace from stored originals.

Uses the service's configuration (environment, `.env`): the same database (the embedded one under
DATA_DIR is reused when the service runs, started and stopped again when it does not), blob store
and embedding model. Files without a stored original (uploaded to rag_api before ragoverlay) are
rebuilt from their V1 chunks. Interrupted? `--resume RUN_ID` continues where it stopped.

Exit codes: 0 the run is active (or staged, with --no-activate), 1 some files could not be staged
(the run stays running: see --status), 2 bad arguments or configuration, 3 the database or the blob
store could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from app.clients.blobs import build_blob_store
from app.clients.embeddings import build_embedder
from app.clients.http import build_http_client
from app.config import Settings, load_settings
from app.errors import ConfigError, RagError
from app.ingest.v2.runs import BackfillProgress, V2Context, backfill_namespace, resume_backfill, run_status
from app.runtime.postgres import EmbeddedPostgres
from app.store import v2_index as store
from app.store.db import bootstrap, create_pool

logger = logging.getLogger("ragoverlay.v2-backfill")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="scripts/v2-backfill",
        description="Build a V2 index run of a namespace from the originals /embed stored, then activate it.",
    )
    parser.add_argument(
        "namespace", nargs="?", help="the owner to index: an Agent id (agent_...) or a user id"
    )
    parser.add_argument("--file-id", action="append", dest="file_ids", help="index only these files (repeat)")
    parser.add_argument("--index-version", help="default: RAG_V2_INDEX_VERSION")
    parser.add_argument(
        "--no-activate", action="store_true", help="stage every file but leave the run running"
    )
    parser.add_argument("--resume", type=int, metavar="RUN_ID", help="continue an interrupted run")
    parser.add_argument("--status", type=int, metavar="RUN_ID", help="print a run's progress and exit")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.namespace, args.resume, args.status)) != 1:
        parser.error("give a NAMESPACE, or --resume RUN_ID, or --status RUN_ID")
    return args


@contextlib.asynccontextmanager
async def open_context(settings: Settings) -> AsyncIterator[V2Context]:
    """The service's resources, opened as the service opens them (without its HTTP side)."""
    server: EmbeddedPostgres | None = None
    stack = contextlib.AsyncExitStack()
    async with stack:
        if settings.use_embedded_postgres:
            server = EmbeddedPostgres(settings.postgres_data_dir)
            dsn = (await asyncio.to_thread(server.start)).dsn
            stack.callback(server.stop)  # only when this command started it
        else:
            dsn = settings.external_dsn()
        info = await bootstrap(dsn, settings.collection_name)
        pool = await create_pool(
            dsn,
            min_size=1,
            max_size=4,
            statement_timeout_ms=settings.db_statement_timeout_ms,
            command_timeout_s=settings.db_statement_timeout_ms / 1000 + 5,
        )
        stack.push_async_callback(pool.close)
        http = build_http_client(timeout_s=settings.embedding_timeout_s)
        stack.push_async_callback(http.aclose)
        embedder = build_embedder(settings, http_client=http)
        stack.push_async_callback(embedder.aclose)
        blobs = build_blob_store(settings)
        stack.push_async_callback(blobs.aclose)
        ctx = V2Context(settings, pool, info, embedder, blobs)
        stack.push_async_callback(ctx.close)
        yield ctx


def _summary(progress: BackfillProgress) -> dict[str, Any]:
    files = progress.files
    return {
        "run_id": progress.run.run_id,
        "namespace": progress.run.namespace,
        "index_version": progress.run.index_version,
        "status": progress.run.status,
        "staged": progress.staged,
        "failed": progress.failed,
        "expected": progress.expected,
        "chunks": sum(f.chunks for f in files),
        "table_rows": sum(f.table_rows for f in files),
        "entities": sum(f.entities for f in files),
        "linked": sum(1 for f in files if f.linked),
        "from_v1_chunks": sum(1 for f in files if f.source == "v1_chunks"),
        "embedded": sum(f.embedded for f in files),
        "vectors_missing": sum(f.vectors_missing for f in files),
        "boilerplate_chars_removed": sum(f.boilerplate_chars for f in files),
    }


async def run(args: argparse.Namespace, settings: Settings) -> int:
    """Do what the arguments ask; the exit code."""
    async with open_context(settings) as ctx:
        if args.status is not None:
            status = await run_status(ctx, args.status)
            out: dict[str, Any] = {
                "run_id": status.run.run_id,
                "namespace": status.run.namespace,
                "status": status.run.status,
                "counts": status.counts,
                "chunks": status.chunks,
                "failed": {f.file_id: f.error for f in status.files if f.state == "failed"},
            }
            print(json.dumps(out, indent=2, default=str))
            return 0

        def report(line: str) -> None:
            if not args.json:
                print(line, file=sys.stderr, flush=True)

        if args.resume is not None:
            progress = await resume_backfill(
                ctx, args.resume, activate_when_done=not args.no_activate, report=report
            )
        else:
            progress = await backfill_namespace(
                ctx,
                args.namespace,
                index_version=args.index_version,
                file_ids=args.file_ids,
                activate_when_done=not args.no_activate,
                created_by="scripts/v2-backfill",
                report=report,
            )
        summary = _summary(progress)
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            print(progress.describe())
            print(", ".join(f"{k}={v}" for k, v in summary.items() if k not in ("namespace", "status")))
        return 0 if progress.failed == 0 and progress.staged == progress.expected else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"v2-backfill: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args, settings))
    except store.RunError as exc:
        print(f"v2-backfill: {exc.detail}", file=sys.stderr)
        return 2
    except RagError as exc:
        print(f"v2-backfill: {exc.detail}", file=sys.stderr)
        return 3 if exc.status_code >= 500 else 2
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"v2-backfill: the database or the blob store failed: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
