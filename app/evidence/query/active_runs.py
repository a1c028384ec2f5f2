"""The active index run of each namespace a `/query_v2` reads, remembered between queries.

A query plans with the remembered run, and its one statement checks that the run is still the
namespace's active one (`app.evidence.store.retrieve.RunCheck`, in the same snapshot as the channels): a run
activated, abandoned or deleted by any replica is seen by the first statement that begins after,
which then reads nothing; the query forgets the run, looks it up again and asks once more. So
remembering costs no staleness, and saves the look-up's round trip while the query holds its
connection.
"""

from __future__ import annotations

import uuid

import asyncpg

from app.errors import BadRequest, ServiceUnavailable
from app.evidence.store import runs as v2_index

MAX_REMEMBERED = 256  # (namespace, index_version) pairs; only pairs with an active run are kept


async def find_active_run(
    conn: asyncpg.Connection, collection_id: uuid.UUID, namespace: str, index_version: str | None
) -> v2_index.RunRecord:
    """The namespace's active run (pinned by `index_version`, else the newest); 400 / 503 when none."""
    run = await v2_index.active_run(conn, collection_id, namespace, index_version)
    if run is None and index_version is not None:
        # a pinned version that does not exist is the request's mistake, not a passing state
        others = await v2_index.active_runs(conn, collection_id, namespace)
        known = ", ".join(sorted({r.index_version for r in others})) or "none"
        raise BadRequest(
            f"The V2 index of {namespace} has no active run of index version {index_version!r} "
            f"(active: {known}); leave index_version out for the newest"
        )
    if run is None:
        raise ServiceUnavailable(
            f"The V2 index of {namespace} has no active run yet: its first upload queues one, or "
            "build one with POST /v2/backfill (or scripts/v2-backfill)"
        )
    return run


class ActiveRunCache:
    """The active run last found for each (namespace, index_version) of one collection."""

    def __init__(self, collection_id: uuid.UUID) -> None:
        self.collection_id = collection_id
        self._runs: dict[tuple[str, str | None], v2_index.RunRecord] = {}

    async def run(
        self, conn: asyncpg.Connection, namespace: str, index_version: str | None
    ) -> v2_index.RunRecord:
        """The remembered run, else the one looked up on `conn` (then remembered)."""
        key = (namespace, index_version)
        run = self._runs.get(key)
        if run is None:
            run = await find_active_run(conn, self.collection_id, namespace, index_version)
            if len(self._runs) >= MAX_REMEMBERED:
                self._runs.pop(next(iter(self._runs)))
            self._runs[key] = run
        return run

    def forget(self, namespace: str, index_version: str | None) -> None:
        """Drop the remembered run: a statement found it is no longer the active one."""
        self._runs.pop((namespace, index_version), None)
