"""The database's side of V1's exact search in memory: visible files, their vectors, the re-rank.

Each statement runs inside the caller's scope (app/store/sql/22_memory_search.sql); the service's
cache (app/search/vector_cache.py) only scores rows of the files these statements return.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import asyncpg
import numpy as np

from app.store import queries
from app.store.chunks import SearchCall
from app.store.scope import Scope


class VisibleRevision(NamedTuple):
    """A visible file under one owner and its revision in the vector copy (a tuple: 1,000 per search)."""

    owner: str
    file_id: str
    revision: int


@dataclass(frozen=True)
class PackedVectors:
    """One file's rows of one dimension: 16-byte ids and `halfvec_send` values, each concatenated."""

    owner: str
    file_id: str
    revision: int
    ids: bytes
    packed: bytes

    @property
    def rows(self) -> int:
        """How many rows the file has."""
        return len(self.ids) // 16


async def visible_files(
    conn: asyncpg.Connection,
    scope: Scope,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[VisibleRevision]:
    """The files (per owner) `scope` shows in the vector copy, with their revisions."""
    row = await conn.fetchrow(queries.VISIBLE_VECTOR_FILES, *scope.for_reading().sql_args(), timeout=timeout)
    if row is None or row["owners"] is None:
        return []
    return list(
        map(VisibleRevision._make, zip(row["owners"], row["file_ids"], row["revisions"], strict=True))
    )


async def scope_vectors(
    conn: asyncpg.Connection,
    scope: Scope,
    dims: int,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[PackedVectors]:
    """The vectors of `dims` dimensions of the files `scope` shows, one row per file and owner."""
    rows = await conn.fetch(queries.SCOPE_VECTORS, *scope.for_reading().sql_args(), dims, timeout=timeout)
    return [
        PackedVectors(r["owner"], r["file_id"], int(r["revision"]), bytes(r["ids"]), bytes(r["vectors"]))
        for r in rows
    ]


def answer_call(query: np.ndarray, k: int, ids: Sequence[uuid.UUID], revisions: Sequence[int]) -> SearchCall:
    """Visible files checked against the ranked `revisions` and the candidates re-read, in one statement."""
    return SearchCall(
        queries.MEMORY_ANSWER_FUNCTION,
        {"p_query": query, "p_k": k, "p_ids": list(ids), "p_revisions": sorted(revisions)},
    )


def rank_call(query: np.ndarray, k: int, ids: Sequence[uuid.UUID]) -> SearchCall:
    """The re-rank of memory candidates: read back in scope, ordered by the exact distance."""
    return SearchCall(queries.RANK_CANDIDATES_FUNCTION, {"p_query": query, "p_k": k, "p_ids": list(ids)})
