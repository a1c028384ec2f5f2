"""The V2 index's background work, as named maintenance tasks in the service's registry.

- `v2-backfill-<run id>`: stages every file of a backfill run, then activates it. A pass resumes
  where the last one stopped (the run's file table is the progress), so a crash or a restart loses
  nothing: at start-up every running backfill run gets its task again. Only one replica works on a
  run at a time (a session advisory lock on the run id).
- `v2-hnsw-index-<dims>`: the HNSW index of one embedding dimension over V2 chunk vectors, built
  CONCURRENTLY once the dimension is first stored.

The passes call the plain functions of `app/ingest/v2/runs.py`, which the job queue can run too.
"""

from __future__ import annotations

import logging

from app.config import Settings
from app.ingest.v2.runs import V2Context, resume_backfill
from app.maintenance.registry import MaintenanceRegistry, MaintenanceTask, Pass, Report
from app.store import v2_index as store
from app.store.db import dedicated_connection

logger = logging.getLogger(__name__)

BACKFILL_PREFIX = "v2-backfill-"
HNSW_PREFIX = "v2-hnsw-index-"
BACKFILL_RETRY_SECONDS = 60.0  # after a failed pass (the database or the blob store was away)
BACKFILL_RECHECK_SECONDS = 30.0  # while another process works on the run
INDEX_RECHECK_SECONDS = 30.0
INDEX_RETRY_SECONDS = 300.0


class BackfillTask:
    """One backfill run: each pass stages what is left, then activates the run."""

    def __init__(self, ctx: V2Context, run_id: int, *, activate: bool = True) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.activate = activate

    async def __call__(self, report: Report) -> Pass:
        """One pass: resume the run (unless another process holds it)."""
        progress = await resume_backfill(
            self.ctx, self.run_id, activate_when_done=self.activate, report=report
        )
        if progress.busy:
            return Pass(progress=progress.describe(), again_in=BACKFILL_RECHECK_SECONDS)
        if progress.run.status != "running" or progress.staged == progress.expected:
            return Pass(progress=progress.describe(), done=True)
        # files that failed their last attempt stay failed: the admin restages or fails the run
        return Pass(progress=progress.describe() + "; restage the failed files, then activate", done=True)


class V2IndexTask:
    """Build the V2 HNSW index of one dimension, then stop."""

    def __init__(self, settings: Settings, dsn: str, spec: store.V2IndexSpec) -> None:
        self.settings = settings
        self.dsn = dsn
        self.spec = spec

    async def __call__(self, report: Report) -> Pass:
        """One pass: build (or wait for another session's build)."""
        report(f"building {self.spec.name}")
        async with dedicated_connection(self.dsn) as conn:
            valid = await store.build_v2_index(
                conn,
                self.spec,
                m=self.settings.hnsw_m,
                ef_construction=self.settings.hnsw_ef_construction,
                memory=self.settings.hnsw_build_memory,
            )
        if not valid:
            return Pass(
                progress=f"{self.spec.name}: another session is building it", again_in=INDEX_RECHECK_SECONDS
            )
        return Pass(progress=f"{self.spec.name} valid", done=True)


class V2Maintenance:
    """The V2 tasks in the service's maintenance registry."""

    def __init__(self, ctx: V2Context, dsn: str, registry: MaintenanceRegistry) -> None:
        self.ctx = ctx
        self.dsn = dsn
        self.registry = registry
        ctx.on_dimension = self.want_index

    async def start(self) -> None:
        """Resume every backfill run a stop or crash interrupted; the index of the known dimension."""
        async with self.ctx.pool.acquire() as conn:
            if not await store.schema_ready(conn):
                return
            running = await store.list_runs(
                conn, self.ctx.info.collection_id, statuses=["running"], limit=1000
            )
            dims = {run.embedding_dim for run in await store.active_runs(conn, self.ctx.info.collection_id)}
        for run in running:
            if run.origin == "backfill":
                logger.info("Resuming V2 backfill of run %d (%s)", run.run_id, run.namespace)
                self.start_backfill(run.run_id, activate=bool(run.settings.get("activate", True)))
        if self.ctx.enabled_namespaces and self.ctx.embedder.dimensions:
            dims.add(self.ctx.embedder.dimensions)
        for value in sorted(d for d in dims if d):
            self.want_index(value)

    def start_backfill(self, run_id: int, *, activate: bool = True) -> str:
        """Run the backfill of `run_id` as a named task; returns the task's name."""
        name = f"{BACKFILL_PREFIX}{run_id}"
        if name not in self.registry:
            task = BackfillTask(self.ctx, run_id, activate=activate)
            self.registry.add(MaintenanceTask(name, task, 0.0, retry_interval=BACKFILL_RETRY_SECONDS))
        return name

    def want_index(self, dims: int) -> None:
        """Make sure the V2 index of `dims` exists (the first stored vector of a dimension starts it)."""
        name = f"{HNSW_PREFIX}{dims}"
        if self.ctx.settings.vector_index == "none" or name in self.registry:
            return
        spec = store.v2_index_spec(dims)
        if spec is None:
            return  # more dimensions than pgvector indexes: exact scans only
        self.registry.add(
            MaintenanceTask(
                name,
                V2IndexTask(self.ctx.settings, self.dsn, spec),
                INDEX_RECHECK_SECONDS,
                retry_interval=INDEX_RETRY_SECONDS,
            )
        )
