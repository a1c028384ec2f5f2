"""The maintenance of namespace indexes: build one per large namespace, drop it when it shrinks.

One periodic task for the collection. A pass reads the namespaces' sizes from the catalogue, plans
with `plan_namespace_indexes` (pure), drops what is no longer wanted, builds at most one index (a
build of 100k rows takes minutes on two cores; the next pass follows at once while more are
wanted) and tells the search state which namespaces have a valid index. Until then, and whenever
the index is missing, a search walks the dimension's global index as before.

Every index of `ragoverlay_vectors` is built one at a time (the table's build lock,
`app/store/build_lock.py`), and a dimension's global index goes first: it serves every search, a
namespace index only one namespace's. So a namespace of a dimension whose global index is still
wanted waits for it, and a pass that finds another build running comes back later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.config_sections import VectorIndexSettings
from app.maintenance.registry import Pass, Report
from app.search.namespaces import NamespaceWalk, plan_namespace_indexes, usable_walks
from app.search.state import SearchState
from app.store.build_lock import TURN_SECONDS, waiting_note
from app.store.maintenance import MaintenanceStore
from app.store.namespace_index import NAMESPACE_WALKS, NamespaceSize
from app.store.vector_index import MAX_INDEX_DIMS

logger = logging.getLogger(__name__)

NAMESPACE_INDEXES = "namespace-indexes"
# a cheap pass (one GROUP BY of the catalogue); a new large namespace waits at most this
NAMESPACE_SECONDS = 120.0
NEXT_BUILD_SECONDS = 1.0  # more to build: the next pass at once
COPY_WAIT_SECONDS = 30.0  # how long a pass waits for the copy before it gives its slot back
BUSY_SECONDS = 30.0


async def copy_ready(store: MaintenanceStore, state: SearchState, report: Report) -> bool:
    """Whether the vector copy holds every row, waiting up to COPY_WAIT_SECONDS for it.

    Indexes live on the copy: they are built once it is complete (nothing may use them before).
    Another replica may have filled it, so the database is asked first.
    """
    if state.copy_ready.is_set():
        return True
    report("waiting for the vector copy")
    if await store.copy_state() == "ready":
        state.set_copy_state("ready")
        return True
    try:
        await asyncio.wait_for(state.copy_ready.wait(), COPY_WAIT_SECONDS)
    except TimeoutError:
        return False
    return True


def _nothing_pending(dims: int) -> bool:
    return False


class NamespaceIndexTask:
    """Keep an HNSW index for each large namespace of the collection, and the planner told of them.

    `global_pending(dims)`: whether the global index of `dims` is wanted and not yet usable (its
    namespaces' builds wait for it).
    """

    def __init__(
        self,
        settings: VectorIndexSettings,
        store: MaintenanceStore,
        state: SearchState,
        global_pending: Callable[[int], bool] = _nothing_pending,
    ) -> None:
        self.settings = settings
        self.store = store
        self.state = state
        self.global_pending = global_pending

    async def __call__(self, report: Report) -> Pass:
        """One pass: drop, build one, publish the usable walks."""
        if not await copy_ready(self.store, self.state, report):
            return Pass(progress="waiting for the vector copy", again_in=COPY_WAIT_SECONDS)
        min_rows = self.settings.namespace_min_rows
        sizes = await self.store.namespace_sizes(min_rows // 2)
        existing = await self.store.namespace_indexes()
        plan = plan_namespace_indexes(
            self.store.info.collection_id,
            sizes,
            existing,
            min_rows=min_rows,
            max_indexes=self.settings.namespace_max,
            max_dims=MAX_INDEX_DIMS,
        )
        dropped = 0
        for name in plan.drop:
            report(f"dropping {name}")
            dropped += await self.store.drop_namespace_index(name)
        outcome, note = "busy", ""
        ready = [size for size in plan.build if not self.global_pending(size.dims)]
        if ready:
            size = ready[0]
            report(f"building the index of a namespace of {size.rows} rows ({size.dims} dimensions)")
            outcome = await self.store.build_namespace_index(
                size,
                m=self.settings.m,
                ef_construction=self.settings.ef_construction,
                memory=self.settings.build_memory,
            )
            if outcome == "table-busy":
                note = f"; {waiting_note(NAMESPACE_WALKS.table)}"
        elif plan.build:
            note = f"; waiting for the global index of {plan.build[0].dims} dimensions, built first"
        built = outcome == "valid"
        walks = await self.publish([*plan.keep, *plan.build])
        left = len(plan.build) - built
        progress = f"{len(walks)} namespace indexes valid, {left} to build, {dropped} dropped{note}"
        if not left:
            return Pass(progress=progress)
        # more to build: at once after a build; soon while another build of the table runs or the
        # global index goes first; later while another replica builds the one planned
        if built:
            return Pass(progress=progress, again_in=NEXT_BUILD_SECONDS)
        return Pass(progress=progress, again_in=TURN_SECONDS if note else BUSY_SECONDS)

    async def publish(self, sizes: list[NamespaceSize]) -> dict[tuple[str, int], NamespaceWalk]:
        """Tell the search state which of `sizes` have a valid index (their walks made current)."""
        valid = [name for name, ok in (await self.store.namespace_indexes()).items() if ok]
        walks = usable_walks(self.store.info.collection_id, sizes, valid)
        for dims in sorted({d for _, d in walks}):
            await self.store.ensure_namespace_walk(dims)
        self.state.set_namespace_walks(walks)
        return walks

    async def refresh(self) -> None:
        """Learn the usable walks without building (a replica whose queue runs the passes elsewhere)."""
        min_rows = self.settings.namespace_min_rows
        await self.publish(await self.store.namespace_sizes(min_rows // 2))
