"""`V2Admin`: the work behind the V2 index's admin routes (`/v2/...`, app/api/v2_admin.py).

Runs (start, list, read, stage a file, activate, fail), the backfill as jobs of the queue, and the
status page. It reaches the database through app/store and the index code in app/evidence/index; a run
error the caller can act on becomes the HTTP error the routes document (404 unknown, 409 state).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from app.errors import Conflict, NotFound, RagError
from app.evidence.index import lifecycle
from app.evidence.index.backfill import start_backfill_run
from app.evidence.index.context import V2Context
from app.evidence.index.profile import IndexProfile
from app.evidence.index.sources import Derivative
from app.evidence.index.staging import FileOutcome, RunFileNotFound, index_file
from app.evidence.jobs import V2Jobs
from app.evidence.maintenance import V2Maintenance
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.evidence.store.runs import RunRecord
from app.maintenance.registry import TaskStatus
from app.store.jobs import Enqueued


@dataclass(frozen=True)
class AnsweringRun:
    """The run that answers a namespace's queries without `index_version`, and what it covers."""

    namespace: str
    run_id: int
    index_version: str
    files_held: int
    namespace_files: int
    reindex_needed: str | None = None


@dataclass(frozen=True)
class V2Overview:
    """What `GET /v2/status` shows of the index (the settings add the rest)."""

    schema_ready: bool
    active: list[RunRecord]
    answering: list[AnsweringRun]
    running_runs: int
    profile: IndexProfile
    embedding_dimensions: int | None
    tasks: list[TaskStatus]


@dataclass(frozen=True)
class BackfillStarted:
    """A backfill run and the job that queues one job per file of it."""

    run: RunRecord
    job_id: int


@contextlib.contextmanager
def _as_http() -> Iterator[None]:
    """A run error as the HTTP error the routes document: unknown 404, anything else 409."""
    try:
        yield
    except run_store.RunError as exc:
        error: RagError = (
            NotFound(exc.detail)
            if isinstance(exc, (run_store.RunNotFound, RunFileNotFound))
            else Conflict(exc.detail)
        )
        raise error from None


class V2Admin:
    """The V2 index's runs, backfills and status, for admins."""

    def __init__(self, ctx: V2Context, tasks: V2Maintenance, jobs: V2Jobs) -> None:
        self.ctx = ctx
        self.tasks = tasks
        self.jobs = jobs

    async def overview(self) -> V2Overview:
        """Schema readiness, the active runs and which one answers each namespace, the index tasks."""
        ctx = self.ctx
        collection = ctx.info.collection_id
        async with ctx.pool.acquire() as conn:
            ready = await read_store.schema_ready(conn)
            active = await run_store.active_runs(conn, collection) if ready else []
            running = (
                await run_store.list_runs(conn, collection, statuses=["running"], limit=10_000)
                if ready
                else []
            )
        answering = []
        for namespace in sorted({r.namespace for r in active}):
            async with ctx.pool.acquire() as conn:
                newest = await run_store.active_run(conn, collection, namespace)
            if newest is None:
                continue  # superseded since the list above was read
            files = set(await lifecycle.namespace_file_ids(ctx, namespace))
            held = await lifecycle.files_held(ctx, newest.run_id, files)
            stale = lifecycle.reindex_needed(ctx, newest)
            answering.append(
                AnsweringRun(namespace, newest.run_id, newest.index_version, held, len(files), stale)
            )
        return V2Overview(
            schema_ready=ready,
            active=active,
            answering=answering,
            running_runs=len(running),
            profile=ctx.profile,
            embedding_dimensions=ctx.embedder.dimensions,
            tasks=self.tasks.statuses(),
        )

    async def start_run(
        self, *, namespace: str, index_version: str | None, file_ids: Sequence[str], created_by: str
    ) -> lifecycle.RunStatus:
        """A run of `namespace` that must contain exactly `file_ids` (400 when one is not its file)."""
        run = await lifecycle.start_run(
            self.ctx,
            namespace=namespace,
            index_version=index_version,
            file_ids=file_ids,
            created_by=created_by,
        )
        return await lifecycle.run_status(self.ctx, run.run_id)

    async def list_runs(
        self, *, namespace: str | None, status: run_store.RunStatus | None, limit: int
    ) -> list[RunRecord]:
        """Runs, newest first (optionally of one namespace or status)."""
        async with self.ctx.pool.acquire() as conn:
            return await run_store.list_runs(
                conn,
                self.ctx.info.collection_id,
                namespace=namespace,
                statuses=[status] if status else None,
                limit=limit,
            )

    async def run(self, run_id: int) -> lifecycle.RunStatus:
        """A run with the progress of each of its files (404 when unknown)."""
        with _as_http():
            return await lifecycle.run_status(self.ctx, run_id)

    async def stage(self, run_id: int, file_id: str, derivative: Derivative | None = None) -> FileOutcome:
        """Stage one expected file of a run, from its original or from `derivative`."""
        with _as_http():
            return await index_file(self.ctx, run_id, file_id, derivative=derivative)

    async def activate(self, run_id: int, *, force: bool) -> lifecycle.RunStatus:
        """Make a complete run the active one (409 while incomplete or, without force, narrower)."""
        with _as_http():
            await lifecycle.activate(self.ctx, run_id, force=force)
            return await lifecycle.run_status(self.ctx, run_id)

    async def fail(self, run_id: int, reason: str) -> lifecycle.RunStatus:
        """Give a running run up."""
        with _as_http():
            await lifecycle.fail(self.ctx, run_id, reason)
            return await lifecycle.run_status(self.ctx, run_id)

    async def reindex(self, *, namespace: str, force: bool, created_by: str) -> Enqueued:
        """Queue the backfill of a namespace (a waiting request for it is joined, not doubled)."""
        return await self.jobs.enqueue_backfill(namespace=namespace, force=force, created_by=created_by)

    async def backfill(
        self,
        *,
        namespace: str,
        index_version: str | None,
        file_ids: Sequence[str] | None,
        activate: bool,
        force: bool,
        created_by: str,
    ) -> BackfillStarted:
        """Start a backfill run of the namespace and queue the job that plans it, file by file."""
        run = await start_backfill_run(
            self.ctx,
            namespace=namespace,
            index_version=index_version,
            file_ids=file_ids,
            activate_when_done=activate,
            force=force,
            created_by=created_by,
        )
        added = await self.jobs.enqueue_backfill(
            namespace=run.namespace, run_id=run.run_id, created_by=created_by
        )
        return BackfillStarted(run, added.id)
