"""`scripts/v2-backfill NAMESPACE`: build and activate a V2 index run of a namespace from stored originals.

Uses the service's configuration (environment, `.env`): the same database, blob store and embedding
model. With the embedded database, a service running on the same DATA_DIR owns it: this command then
connects to that service's server, at the address the service records in DATA_DIR
(`embedded-postgres.address.json`), instead of starting a second one; when no service runs, it
starts the server itself and stops it again at the end. Files without a stored original (uploaded
to rag_api before ragoverlay) are rebuilt from their V1 chunks.

The work is the same jobs the service runs (`v2-backfill`, then one `v2-index-file` job per file,
`app/evidence/jobs.py`), on the service's own queue: this command queues them and runs a worker of its
own until the run is done, so it works with or without the service, and any running replica takes
files too. Interrupted? The queue keeps the jobs (the service, or `--resume RUN_ID`, finishes them).

Exit codes (docs/v2.md lists them too): 0 the run is active (or staged, with --no-activate; for
--status: the run was found), 1 some files could not be staged (the run stays running: see --status
and GET /admin/jobs?status=failed), 2 bad arguments or configuration (an unknown run or namespace
included, and a namespace RAG_V2_NAMESPACE_IDS does not list, refused before anything starts),
3 the database or the blob store could not be reached (a service on DATA_DIR that is still starting
its database included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.clients.blobs import build_blob_store
from app.clients.embeddings import build_embedder
from app.clients.http import build_http_client
from app.config import Settings, load_settings
from app.config_sections import BlobSettings, ContextualSettings, JobSettings
from app.errors import ConfigError, RagError
from app.evidence.index.backfill import start_backfill_run
from app.evidence.index.context import V2Context
from app.evidence.index.lifecycle import RunStatus, describe_run, run_status
from app.evidence.jobs import v2_worker
from app.evidence.store import runs as run_store
from app.ingest.contextual import build_contextualizer
from app.jobs.setup import retry_policy
from app.progress_display import ProgressDisplay
from app.runtime.lock import FolderInUse
from app.runtime.postgres import (
    EmbeddedPostgres,
    ServiceDatabaseUnavailable,
    running_service_database,
)
from app.store.db import bootstrap, create_pool

logger = logging.getLogger("ragoverlay.v2-backfill")

POLL_SECONDS = 0.5


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
    parser.add_argument(
        "--force", action="store_true", help="parse and embed every file again (link no earlier document)"
    )
    parser.add_argument("--resume", type=int, metavar="RUN_ID", help="finish an interrupted run")
    parser.add_argument("--status", type=int, metavar="RUN_ID", help="print a run's progress and exit")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.namespace, args.resume, args.status)) != 1:
        parser.error("give a NAMESPACE, or --resume RUN_ID, or --status RUN_ID")
    return args


@dataclass
class Opened:
    """The service's resources as this command opens them."""

    ctx: V2Context
    dsn: str


@contextlib.asynccontextmanager
async def open_context(settings: Settings) -> AsyncIterator[Opened]:
    """The service's resources, opened as the service opens them (without its HTTP side)."""
    stack = contextlib.AsyncExitStack()
    async with stack:
        if settings.use_embedded_postgres:
            dsn = await _embedded_dsn(settings, stack)
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
        blobs = build_blob_store(BlobSettings.from_settings(settings))
        stack.push_async_callback(blobs.aclose)
        contextualizer = build_contextualizer(ContextualSettings.from_settings(settings))
        if contextualizer is not None:
            stack.push_async_callback(contextualizer.aclose)
        yield Opened(V2Context(settings, pool, info, embedder, blobs, contextualizer=contextualizer), dsn)


async def _embedded_dsn(settings: Settings, stack: contextlib.AsyncExitStack) -> str:
    """The running service's embedded server when one owns DATA_DIR, else one this command starts."""
    for _ in range(2):
        attached = await asyncio.to_thread(running_service_database, settings.data_dir)
        if attached is not None:
            logger.info(
                "The service running on %s owns its database: connecting to it on port %s",
                settings.data_dir,
                attached.port,
            )
            return attached.dsn
        server = EmbeddedPostgres(settings.postgres_data_dir)
        try:
            info = await asyncio.to_thread(server.start)
        except FolderInUse:
            continue  # a service took the folder between the look and the start: look again
        stack.callback(server.stop)  # only when this command started it
        return info.dsn
    raise ServiceDatabaseUnavailable(f"{settings.data_dir} changed owner twice while starting; try again")


def _summary(status: RunStatus) -> dict[str, Any]:
    files = status.files
    return {
        "run_id": status.run.run_id,
        "namespace": status.run.namespace,
        "index_version": status.run.index_version,
        "status": status.run.status,
        "staged": status.counts["staged"],
        "failed": status.counts["failed"],
        "expected": status.run.expected_files,
        "chunks": status.chunks,
        "linked": sum(1 for f in files if f.state == "staged" and f.linked),
        "from_v1_chunks": sum(1 for f in files if f.state == "staged" and f.source == "v1_chunks"),
        "errors": {f.file_id: f.error for f in files if f.state == "failed"},
    }


async def run(args: argparse.Namespace, settings: Settings) -> int:
    """Do what the arguments ask; the exit code."""
    async with open_context(settings) as opened:
        ctx = opened.ctx
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

        if args.resume is not None:
            status = await run_status(ctx, args.resume)
            run_id, namespace = args.resume, status.run.namespace
            if status.run.status != "running":
                if not args.json:
                    print(f"run {run_id} is {status.run.status}: nothing to resume", file=sys.stderr)
                return _report(args, status, 0.0)
        else:
            started = await start_backfill_run(
                ctx,
                namespace=args.namespace,
                index_version=args.index_version,
                file_ids=args.file_ids,
                activate_when_done=not args.no_activate,
                force=args.force,
                created_by="scripts/v2-backfill",
            )
            run_id, namespace = started.run_id, started.namespace
        began = time.monotonic()
        jobs = JobSettings.from_settings(settings)
        async with v2_worker(
            ctx,
            dsn=opened.dsn,
            concurrency=max(1, jobs.concurrency),
            policy=retry_policy(jobs),
            job_timeout_s=jobs.job_timeout_s,
            stale_s=jobs.stale_timeout_s,
        ) as work:
            await work.jobs.enqueue_backfill(
                namespace=namespace, run_id=run_id, created_by="scripts/v2-backfill"
            )
            # a bar on a terminal, else a line per change; nothing beside --json's output
            with ProgressDisplay(
                total=0,
                unit="files",
                label=f"run {run_id}",
                bar=False if args.json else None,
                lines=not args.json,
            ) as shown:
                status = await work.jobs.wait_for_run(
                    run_id, show=lambda s: _show(shown, s), poll_s=POLL_SECONDS
                )
        return _report(args, status, time.monotonic() - began)


def _show(shown: ProgressDisplay, status: RunStatus) -> None:
    """A run's progress: files staged or failed of those expected."""
    c = status.counts
    shown.update(
        c["staged"] + c["failed"],
        f"{c['staging']} staging, {c['failed']} failed",
        total=status.run.expected_files,
        line=describe_run(status),
    )


def _report(args: argparse.Namespace, status: RunStatus, seconds: float) -> int:
    """Print the outcome; the exit code (0 when every file is staged and the run not failed)."""
    summary = {**_summary(status), "seconds": round(seconds, 1)}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(describe_run(status))
        shown = {k: v for k, v in summary.items() if k not in ("namespace", "status", "errors")}
        print(", ".join(f"{k}={v}" for k, v in shown.items()))
        for file_id, error in summary["errors"].items():
            print(f"  failed: {file_id}: {error}")
    complete = status.counts["staged"] == status.run.expected_files
    return 0 if complete and status.run.status in ("active", "running") else 1


def not_enabled_detail(namespace: str, enabled: Sequence[str]) -> str:
    """Why a backfill of a namespace V2 is not enabled for is refused, and what to set."""
    now = f"it lists {', '.join(enabled)}" if enabled else "it is empty"
    return (
        f"V2 is not enabled for {namespace}: RAG_V2_NAMESPACE_IDS does not list it ({now}), so "
        f"/query_v2 would answer 403 and never read the index. Add {namespace} to RAG_V2_NAMESPACE_IDS "
        "where the service and this command read it (.env, or the environment of both: "
        f"RAG_V2_NAMESPACE_IDS={namespace} scripts/v2-backfill {namespace}), restart the service, "
        "then run this again"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"v2-backfill: {exc}", file=sys.stderr)
        return 2
    if args.namespace is not None and args.namespace not in settings.v2_namespace_ids:
        # refused before anything is opened, parsed or embedded: /query_v2 would answer 403 for it
        print(
            f"v2-backfill: {not_enabled_detail(args.namespace, settings.v2_namespace_ids)}", file=sys.stderr
        )
        return 2
    try:
        return asyncio.run(run(args, settings))
    except ServiceDatabaseUnavailable as exc:
        print(f"v2-backfill: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"v2-backfill: {exc}", file=sys.stderr)
        return 2
    except run_store.RunError as exc:
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
