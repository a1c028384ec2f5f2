"""The service's maintenance tasks: catalogue statistics, the vector copy, an HNSW index per dimension.

Everything here runs in the background: start-up and requests never wait for it. Until the copy is
ready and an index is valid, searches take the exact path (always correct, slower on large
allow-lists). Each task does one pass per call and reaches the database only through
`MaintenanceStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import asyncpg

from app.config_sections import VectorIndexSettings
from app.maintenance.namespace_task import (
    NAMESPACE_INDEXES,
    NAMESPACE_SECONDS,
    NamespaceIndexTask,
    copy_ready,
)
from app.maintenance.registry import MaintenanceRegistry, MaintenanceTask, Pass, Report
from app.search.planner import CatalogueStats
from app.search.state import SearchState
from app.store.build_lock import TURN_SECONDS, waiting_note
from app.store.catalogue import CatalogueSnapshot
from app.store.maintenance import MaintenanceStore
from app.store.vector_index import IndexSpec, index_spec

logger = logging.getLogger(__name__)

CATALOGUE_SECONDS = 60.0  # statistics refresh
COPY_RECHECK_SECONDS = 30.0  # while another replica fills the copy
# drift check of the vector copy: a count of both tables, so not every minute on large tables
RECONCILE_SECONDS = 3600.0
INDEX_RECHECK_SECONDS = 30.0  # while another replica builds an index
INDEX_RETRY_SECONDS = 300.0  # after a failed build (the exact path answers meanwhile)
# while the copy or an index is not usable here, this process looks again after 5, 10, 20 ... s (up
# to its refresh interval): the pass that readies it may run on another replica, and until this one
# reads the outcome its searches scan rag_api's rows (a replica that missed the copy's first pass
# scanned them for a whole minute: tests/e2e/test_replicas.py)
PENDING_REFRESH_SECONDS = 5.0

CATALOGUE = "catalogue"
CHECKPOINTS = "embedding-checkpoints"
VECTOR_COPY = "vector-copy"
HNSW_PREFIX = "hnsw-index-"


async def read_statistics(store: MaintenanceStore, state: SearchState) -> CatalogueSnapshot:
    """Read the catalogue's statistics into `state`, marked with when the read began (so the files
    stored meanwhile are kept); the snapshot read."""
    began = state.read_begins()
    snapshot = await store.read_catalogue()
    state.set_stats(CatalogueStats.from_snapshot(snapshot), began)
    return snapshot


class CatalogueTask:
    """Catalogue rag_api's files once, then refresh the planner's statistics."""

    def __init__(self, store: MaintenanceStore, state: SearchState) -> None:
        self.store = store
        self.state = state
        self.backfilled = False

    async def __call__(self, report: Report) -> Pass:
        """One pass: the backfill (first pass only), then a fresh read of the statistics."""
        note = ""
        if not self.backfilled:
            report("cataloguing files written by rag_api")
            try:
                added = await self.store.backfill_catalogue()
            except (OSError, asyncpg.PostgresError) as exc:
                # statistics of what is catalogued are still worth having; estimates may be off
                logger.warning("Catalogue backfill failed (%s); path estimates may be off", exc)
                note = f"; backfill failed: {type(exc).__name__}"
            else:
                if added:
                    logger.info("Catalogued %d files written by rag_api", added)
            self.backfilled = True
        snapshot = await read_statistics(self.store, self.state)
        return Pass(progress=f"{snapshot.files} files, {snapshot.chunks} chunks{note}")


async def _prune_checkpoints(store: MaintenanceStore) -> Pass:
    """Delete the embedding checkpoints of uploads that never committed (a week or older)."""
    removed = await store.prune_checkpoints()
    if removed:
        logger.info("Removed %d embedding checkpoints left by uploads that never completed", removed)
    return Pass(progress=f"{removed} old checkpoints removed")


class VectorCopyTask:
    """Fill the compact vector copy with rows that predate its triggers, then check it for drift."""

    def __init__(self, store: MaintenanceStore, state: SearchState) -> None:
        self.store = store
        self.state = state

    async def __call__(self, report: Report) -> Pass:
        """One pass: backfill if needed, then (once ready) compare and repair; stops when disabled."""
        started = time.monotonic()
        if await self.store.copy_state() == "backfilling":
            report("backfilling")
            copied = await self.store.backfill_copy()
            if copied is not None:
                logger.info("Vector copy backfilled: %d rows in %.1f s", copied, time.monotonic() - started)
        state = await self.store.copy_state()
        self.state.set_copy_state(state)
        if state == "disabled":
            return Pass(progress="disabled (no TRIGGER privilege): exact scans of rag_api's rows", done=True)
        if state != "ready":
            # another replica holds the backfill lock
            return Pass(progress=state, again_in=COPY_RECHECK_SECONDS)
        repaired = await self.store.reconcile_copy()
        if repaired and any(repaired):
            logger.warning("Vector copy repaired: %d rows added, %d removed", *repaired)
            return Pass(progress=f"ready; repaired {repaired[0]} added, {repaired[1]} removed rows")
        return Pass(progress="ready")


class HnswIndexTask:
    """Build the HNSW index of one dimension on the vector copy, then make it usable."""

    def __init__(
        self, settings: VectorIndexSettings, store: MaintenanceStore, state: SearchState, spec: IndexSpec
    ) -> None:
        self.settings = settings
        self.store = store
        self.state = state
        self.spec = spec

    async def __call__(self, report: Report) -> Pass:
        """One pass: build (or wait for another replica's build); done once the index is usable."""
        # the index lives on the copy: build it once the copy holds every row (a build during the
        # backfill would work, but slower, and nothing may use it before then)
        if not await copy_ready(self.store, self.state, report):
            return Pass(progress="waiting for the vector copy", again_in=INDEX_RECHECK_SECONDS)
        state = await self.store.index_state(self.spec)
        if state == "valid":
            await self.store.ensure_walk(self.spec)
        else:
            report(f"building {self.spec.name}")
            outcome = await self.store.build_index(
                self.spec,
                m=self.settings.m,
                ef_construction=self.settings.ef_construction,
                memory=self.settings.build_memory,
            )
            if outcome == "table-busy":
                return Pass(
                    progress=f"{self.spec.name}: {waiting_note(self.spec.family.table)}",
                    again_in=TURN_SECONDS,
                )
            if outcome == "busy":
                return Pass(
                    progress=f"{self.spec.name}: another session is building it",
                    again_in=INDEX_RECHECK_SECONDS,
                )
        self.state.add_walk(self.spec.dims, self.spec.function_name)
        return Pass(progress=f"{self.spec.name} valid", done=True)


class Maintenance:
    """The service's maintenance: the tasks above in a registry, and the search state they keep."""

    def __init__(
        self,
        settings: VectorIndexSettings,
        store: MaintenanceStore,
        state: SearchState,
        registry: MaintenanceRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.state = state
        self.registry = registry or MaintenanceRegistry()
        self._specs: dict[int, IndexSpec] = {}  # dimensions with an index task
        self._refresher: asyncio.Task[None] | None = None
        self._namespaces: NamespaceIndexTask | None = None
        self.registry.add_resolver(self._resolve)

    def _resolve(self, name: str) -> bool:
        """Build `hnsw-index-<dims>` from its name (a dimension another replica saw first)."""
        dims = name[len(HNSW_PREFIX) :] if name.startswith(HNSW_PREFIX) else ""
        if not (dims.isascii() and dims.isdigit()) or not 0 < int(dims) <= 100_000:
            return False
        self.want_index(int(dims))
        return True

    def _global_pending(self, dims: int) -> bool:
        """Whether the global index of `dims` is wanted here and not usable yet (it is built first)."""
        name = f"{HNSW_PREFIX}{dims}"
        if name not in self.registry or self.state.walk(dims) is not None:
            return False
        return self.registry.status(name).state != "done"

    def start(self, dims_hint: int | None) -> None:
        """Start the catalogue and vector copy tasks, and the index of `dims_hint` when known."""
        self.registry.add(
            MaintenanceTask(CATALOGUE, CatalogueTask(self.store, self.state), CATALOGUE_SECONDS)
        )
        self.registry.add(
            MaintenanceTask(
                VECTOR_COPY,
                VectorCopyTask(self.store, self.state),
                RECONCILE_SECONDS,
                retry_interval=COPY_RECHECK_SECONDS,
            )
        )
        if self.settings.enabled:
            self._namespaces = NamespaceIndexTask(self.settings, self.store, self.state, self._global_pending)
            self.registry.add(
                MaintenanceTask(
                    NAMESPACE_INDEXES, self._namespaces, NAMESPACE_SECONDS, retry_interval=INDEX_RETRY_SECONDS
                )
            )
        store = self.store
        self.registry.add(
            MaintenanceTask(CHECKPOINTS, lambda report: _prune_checkpoints(store), RECONCILE_SECONDS)
        )
        if dims_hint:
            self.want_index(dims_hint)

    def want_index(self, dims: int) -> None:
        """Make sure the index for `dims` exists (the first sight of a dimension starts its task)."""
        if not self.settings.enabled or f"{HNSW_PREFIX}{dims}" in self.registry:
            return
        spec = index_spec(dims)
        if spec is None:
            logger.warning("pgvector cannot index %d dimensions; searches stay exact", dims)
            # registered all the same, as done: the status says why there is no index
            self.registry.add(MaintenanceTask(f"{HNSW_PREFIX}{dims}", _unindexable(dims), 0.0))
            return
        self._specs[dims] = spec
        task = HnswIndexTask(self.settings, self.store, self.state, spec)
        self.registry.add(
            MaintenanceTask(
                f"{HNSW_PREFIX}{dims}", task, INDEX_RECHECK_SECONDS, retry_interval=INDEX_RETRY_SECONDS
            )
        )

    async def refresh(self) -> None:
        """Bring this process's search state to what the database says: statistics, copy, indexes.

        With the job queue, one replica runs each pass and learns from it; the others (and this
        one, between its own passes) read the outcome here. Statistics are read only when no
        catalogue pass of this process has read them within its interval.
        """
        if CATALOGUE in self.registry:
            last = self.registry.status(CATALOGUE).last_run
            fresh = last is not None and (time.time() - last.timestamp()) < CATALOGUE_SECONDS
        else:
            fresh = False
        if not fresh:
            await read_statistics(self.store, self.state)
        self.state.set_copy_state(await self.store.copy_state())
        for dims, spec in list(self._specs.items()):
            if self.state.walk(dims) is None and await self.store.index_state(spec) == "valid":
                await self.store.ensure_walk(spec)
                self.state.add_walk(dims, spec.function_name)
        if self._namespaces is not None and self.state.use_copy:
            await self._namespaces.refresh()

    def start_refresh(self, interval: float = CATALOGUE_SECONDS) -> None:
        """Refresh this process's search state now and then every `interval` seconds (queue mode)."""
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(interval), name="maintenance:refresh")

    def _pending(self) -> bool:
        """Whether the copy or a wanted index is not usable here yet (another replica may be readying it)."""
        return not self.state.use_copy or any(self.state.walk(dims) is None for dims in self._specs)

    async def _refresh_loop(self, interval: float) -> None:
        pause = PENDING_REFRESH_SECONDS
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next round tries again; searches stay exact meanwhile
                logger.warning("Search state refresh failed: %s: %s", type(exc).__name__, exc)
            if self._pending():
                await asyncio.sleep(min(pause, interval))
                pause = min(pause * 2, interval)
            else:
                pause = PENDING_REFRESH_SECONDS
                await asyncio.sleep(interval)

    async def close(self) -> None:
        """Stop every task."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        await self.registry.close()


def _unindexable(dims: int) -> Callable[[Report], Awaitable[Pass]]:
    async def run(report: Report) -> Pass:
        return Pass(
            progress=f"{dims} dimensions: more than pgvector can index; searches stay exact", done=True
        )

    return run
