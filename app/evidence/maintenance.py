"""The V2 index's background maintenance: `v2-hnsw-index-<dims>`, the HNSW index of one embedding
dimension over V2 chunk vectors, built CONCURRENTLY once the dimension is first stored.

Backfills are not maintenance tasks: they run as jobs of the queue (`v2-backfill`, `v2-index-file`,
`app/evidence/jobs.py`). Every process can build the index task of any dimension from its name, so a
replica runs a pass of it whoever saw the dimension first.
"""

from __future__ import annotations

import logging

import asyncpg

from app.clients.embeddings import Embedder
from app.config import Settings
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.maintenance.registry import MaintenanceRegistry, MaintenanceTask, Pass, Report, TaskStatus
from app.store.build_lock import TURN_SECONDS, waiting_note
from app.store.db import StoreInfo, dedicated_connection
from app.store.vector_index import IndexSpec, build_index, index_spec

logger = logging.getLogger(__name__)

HNSW_PREFIX = "v2-hnsw-index-"
INDEX_RECHECK_SECONDS = 30.0
INDEX_RETRY_SECONDS = 300.0


class V2IndexTask:
    """Build the V2 HNSW index of one dimension, then stop."""

    def __init__(self, settings: Settings, dsn: str, spec: IndexSpec) -> None:
        self.settings = settings
        self.dsn = dsn
        self.spec = spec

    async def __call__(self, report: Report) -> Pass:
        """One pass: build (or wait for another session's build)."""
        report(f"building {self.spec.name}")
        async with dedicated_connection(self.dsn) as conn:
            outcome = await build_index(
                conn,
                self.spec,
                m=self.settings.hnsw_m,
                ef_construction=self.settings.hnsw_ef_construction,
                memory=self.settings.hnsw_build_memory,
            )
        if outcome == "table-busy":
            return Pass(
                progress=f"{self.spec.name}: {waiting_note(self.spec.family.table)}", again_in=TURN_SECONDS
            )
        if outcome == "busy":
            return Pass(
                progress=f"{self.spec.name}: another session is building it", again_in=INDEX_RECHECK_SECONDS
            )
        return Pass(progress=f"{self.spec.name} valid", done=True)


class V2Maintenance:
    """The V2 tasks in the service's maintenance registry (`want_index`: the V2 context's `on_dimension`)."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        info: StoreInfo,
        embedder: Embedder,
        dsn: str,
        registry: MaintenanceRegistry,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.dsn = dsn
        self.registry = registry
        registry.add_resolver(self._resolve)

    async def start(self) -> None:
        """Want the index of every dimension an active run holds, and of the model's own."""
        async with self.pool.acquire() as conn:
            if not await read_store.schema_ready(conn):
                return
            dims = {run.embedding_dim for run in await run_store.active_runs(conn, self.info.collection_id)}
        if self.settings.v2_namespace_ids and self.embedder.dimensions:
            dims.add(self.embedder.dimensions)
        for value in sorted(d for d in dims if d):
            self.want_index(value)

    def _resolve(self, name: str) -> bool:
        """Build `v2-hnsw-index-<dims>` from its name (a dimension another replica saw first)."""
        dims = name[len(HNSW_PREFIX) :] if name.startswith(HNSW_PREFIX) else ""
        if not (dims.isascii() and dims.isdigit()):
            return False
        self.want_index(int(dims))
        return name in self.registry

    def statuses(self) -> list[TaskStatus]:
        """The V2 index tasks as this replica saw them."""
        return [s for s in self.registry.statuses() if s.name.startswith(HNSW_PREFIX)]

    def want_index(self, dims: int) -> None:
        """Make sure the V2 index of `dims` exists (the first stored vector of a dimension starts it)."""
        name = f"{HNSW_PREFIX}{dims}"
        if self.settings.vector_index == "none" or name in self.registry:
            return
        spec = index_spec(dims, vector_store.V2_CHUNK_INDEX)
        if spec is None:
            return  # more dimensions than pgvector indexes: exact scans only
        self.registry.add(
            MaintenanceTask(
                name,
                V2IndexTask(self.settings, self.dsn, spec),
                INDEX_RECHECK_SECONDS,
                retry_interval=INDEX_RETRY_SECONDS,
            )
        )
