"""PLACEHOLDER until wt/channels lands: the interface of the V2 channels (replaced on merge)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from app.store.scope import Scope


@dataclass(frozen=True)
class ChannelHit:
    """One hit of a channel."""

    document_id: int
    ordinal: int
    score: float
    detail: str | None = None


@dataclass(frozen=True)
class Visible:
    """The visible part of a run."""

    documents: int
    chunks: int
    average_length: float


@dataclass(frozen=True)
class ChunkDetail:
    """A chunk's fields for a Candidate."""

    document_id: int
    ordinal: int
    chunk_id: str
    file_id: str
    kind: str
    page: int | None
    page_label: str | None
    section: tuple[str, ...]
    table_caption: str | None
    table_index: int | None
    row_index: int | None
    row_label: str | None
    headers: tuple[str, ...]
    row_values: tuple[str, ...]
    units: tuple[str | None, ...]
    footnotes: tuple[str, ...]
    content: str
    search_text: str
    entity_keys: frozenset[str]
    filename: str
    title: str
    language: str | None
    publication_date: str | None
    document_number: str | None
    source: str
    metadata: dict[str, Any]


async def visible(conn: asyncpg.Connection, scope: Scope, run_id: int) -> Visible:
    """Placeholder."""
    raise NotImplementedError


async def document_frequencies(
    conn: asyncpg.Connection, scope: Scope, run_id: int, terms: Sequence[str]
) -> dict[str, int]:
    """Placeholder."""
    raise NotImplementedError


async def lexical(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    terms: Sequence[str],
    *,
    k1: float,
    b: float,
    limit: int,
    trigram_text: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChannelHit]:
    """Placeholder."""
    raise NotImplementedError


async def exact(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    *,
    keys: Sequence[str],
    phrases: Sequence[str],
    limit: int,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChannelHit]:
    """Placeholder."""
    raise NotImplementedError


async def vector(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    query: np.ndarray,
    *,
    limit: int,
    exact_max_chunks: int,
    ef_search: int,
    max_scan_tuples: int,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> tuple[list[ChannelHit], str]:
    """Placeholder."""
    raise NotImplementedError


async def chunk_details(
    conn: asyncpg.Connection, scope: Scope, run_id: int, keys: Sequence[tuple[int, int]]
) -> list[ChunkDetail]:
    """Placeholder."""
    raise NotImplementedError
