"""How `/query_v2`'s vector channel runs: V1's planner (app/search/planner.py) fed with a V2 run.

    knowledge = await cache.knowledge(conn, run_id, dims)     # at most every KNOWLEDGE_SECONDS a run
    plan = plan_vectors(knowledge, dims=dims, limit=50, scope=scope, settings=search_settings)

The planner decides exactly as it does for V1: the visible vectors are estimated from the listed
files (each staged file's vectors in the run, under the caller's owners; a file staged since the
last read counts the average), and the HNSW walk is taken only above `exact_max_rows`
(RAG_V2__CHANNELS__EXACT_SCAN_MAX_CHUNKS) when the cost rule (HNSW_COST_FACTOR) says a filtered walk
over the whole chunk table pays and the dimension's index is valid. The SQL carries the decision
out, and falls back to an exact scan itself when a walk meets fewer rows than asked.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from app.config_sections import SearchSettings
from app.evidence.store import vectors as vector_store
from app.evidence.store.channels import VectorPlan
from app.evidence.store.vectors import RunVectors
from app.search.planner import CatalogueStats, SearchKnowledge, plan_vector_search
from app.store.scope import Scope

# as the V1 maintenance rechecks its indexes: a new index or file is planned for within this long
KNOWLEDGE_SECONDS = 30.0
# runs whose knowledge a process keeps (the least recently asked is forgotten first)
MAX_RUNS = 256


def run_knowledge(vectors: RunVectors, dims: int) -> SearchKnowledge:
    """The planner's inputs for a run whose vectors have `dims` dimensions."""
    stats = CatalogueStats(
        files=len(vectors.files),
        chunks=sum(n for owners in vectors.files.values() for n in owners.values()),
        uniform_dims=dims,
        file_chunks=vectors.files,
        table_rows=vectors.table_rows,
    )
    # V2's chunk table holds every vector inline with its HNSW index, as V1's compact copy does
    return SearchKnowledge(stats, use_copy=True, walks={dims: vectors.walk} if vectors.walk else {})


@dataclass(frozen=True)
class PlannedVectors:
    """The plan for the SQL and the visible vectors the planner estimated (for debug output)."""

    plan: VectorPlan
    visible_estimate: int


def plan_vectors(
    knowledge: SearchKnowledge, *, dims: int, limit: int, scope: Scope, settings: SearchSettings
) -> PlannedVectors:
    """The vector channel's path for `limit` hits within `scope` (its file allow-list, else the run)."""
    files = knowledge.stats.file_chunks or {}
    decision = plan_vector_search(
        dims=dims,
        k=limit,
        file_ids=scope.file_ids if scope.file_ids is not None else list(files),
        owners=scope.owners,
        uploader=scope.uploader,
        knowledge=knowledge,
        settings=settings,
    )
    plan = VectorPlan(
        path=decision.path,
        walk=decision.walk,
        candidates=decision.candidates,
        ef_search=decision.ef_search,
        max_scan_tuples=decision.max_scan_tuples,
    )
    return PlannedVectors(plan, decision.visible_estimate)


class RunVectorCache:
    """Each run's planner inputs, read on the asking query's connection when missing or stale."""

    def __init__(self, ttl: float = KNOWLEDGE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[tuple[int, int], tuple[float, SearchKnowledge]] = OrderedDict()

    async def knowledge(self, conn: asyncpg.Connection, run_id: int, dims: int) -> SearchKnowledge:
        """The planner's inputs for run `run_id` and `dims` (read again after `ttl` seconds)."""
        key = (run_id, dims)
        now = self.clock()
        entry = self._entries.get(key)
        if entry is not None and now - entry[0] < self.ttl:
            self._entries.move_to_end(key)
            return entry[1]
        knowledge = run_knowledge(await vector_store.run_vectors(conn, run_id, dims), dims)
        self._entries[key] = (now, knowledge)
        self._entries.move_to_end(key)
        while len(self._entries) > MAX_RUNS:
            self._entries.popitem(last=False)
        return knowledge
