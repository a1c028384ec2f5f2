"""The SQL side of the three /query_v2 retrieval channels over one V2 index run.

    visible(conn, scope, run)                     documents, chunks, mean length the scope may read
    document_frequencies(conn, scope, run, terms) chunks holding each term, over those
    lexical(...)  -> [ChannelHit]                 BM25 (app/search/v2/bm25.py), then entity look-alikes
    exact(...)    -> [ChannelHit]                 row labels, entities, document numbers, titles, file names
    vector(...)   -> ([ChannelHit], path)         cosine: exact scan or the dimension's HNSW walk
    chunk_details(conn, scope, run, keys)         what a `Candidate` shows, for the hits kept

Every function reads only the chunks of the run's staged documents that the scope may read, checked
with `ragoverlay_in_scope` inside the SQL (`app/store/sql/60_v2_channels.sql`), and refuses an
any-owner scope. Hits are keyed by (document_id, ordinal); the service reads the details of those it
keeps with one `chunk_details` call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg
import numpy as np

from app.store.scope import SCOPE_SQL, Scope
from app.text.normalize import normalize

VectorPath = Literal["exact", "hnsw", "hnsw+exact"]
# a document-level exact match (number, title, file name) stands for this many of its first chunks
DOCUMENT_MATCH_CHUNKS = 3


@dataclass(frozen=True)
class ChannelHit:
    """One chunk a channel found, with the channel's own score.

    lexical: the BM25 score (detail "bm25"), or for a look-alike of the trigram text the trigram
    similarity of its best entity in 0..1 (detail "trigram"); exact: the match weight in 0..1 with
    what matched ("row_label", "identifier", "standard", "document_number", "quantity", "title",
    "filename", ...: an entity match names the entity's kind); vector: the cosine similarity,
    1 - cosine distance (detail None).
    """

    document_id: int
    ordinal: int
    score: float
    detail: str | None = None


@dataclass(frozen=True)
class Visible:
    """What the scope may read of a run: documents, chunks and their mean length in terms."""

    documents: int
    chunks: int
    average_length: float


@dataclass(frozen=True)
class ChunkDetail:
    """Everything `app.search.v2.records.Candidate` needs of one chunk, with its document's fields."""

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
    entity_keys: frozenset[str]  # the normalised forms of the chunk's entities
    filename: str
    title: str
    language: str | None
    publication_date: str | None
    document_number: str | None
    source: str
    metadata: dict[str, Any] = field(default_factory=dict)  # the document's


def label_key(text: str) -> str:
    """The exact channel's key of a row label, title, file name or document number: `normalize(text)`."""
    return normalize(text)


# --- statements ----------------------------------------------------------------------------------

VISIBLE = f"SELECT documents, chunks, average_length FROM ragoverlay_v2_visible_stats({SCOPE_SQL}, $7)"
DOCUMENT_FREQUENCIES = f"SELECT term, df FROM ragoverlay_v2_visible_term_stats({SCOPE_SQL}, $7, $8::text[])"
LEXICAL = f"""
    SELECT document_id, ordinal, score, detail
    FROM ragoverlay_v2_lexical({SCOPE_SQL}, $7, $8::text[], $9, $10, $11, $12)
    ORDER BY rank
"""
EXACT = f"""
    SELECT document_id, ordinal, weight, detail
    FROM ragoverlay_v2_exact({SCOPE_SQL}, $7, $8::text[], $9::text[], $10, $11)
"""
NEAREST = f"""
    SELECT document_id, ordinal, distance, path
    FROM ragoverlay_v2_nearest({SCOPE_SQL}, $7, $8::vector, $9, $10, $11, $12)
"""
CHUNK_DETAILS = f"""
    SELECT document_id, ordinal, chunk_id, file_id, kind, page, page_label, section, table_caption,
           table_index, row_index, row_label, headers, row_values, units, footnotes, content, search_text,
           entity_keys, filename, title, language, publication_date, document_number, source,
           metadata::text AS metadata
    FROM ragoverlay_v2_chunk_details({SCOPE_SQL}, $7, $8::bigint[], $9::integer[])
"""


# --- the channels --------------------------------------------------------------------------------


async def visible(conn: asyncpg.Connection, scope: Scope, run_id: int) -> Visible:
    """Documents, chunks and mean chunk length (BM25's N and avgdl) of the run that the scope may read."""
    row = await conn.fetchrow(VISIBLE, *scope.for_reading().sql_args(), run_id)
    return Visible(int(row["documents"]), int(row["chunks"]), float(row["average_length"]))


async def document_frequencies(
    conn: asyncpg.Connection, scope: Scope, run_id: int, terms: Sequence[str]
) -> dict[str, int]:
    """Visible chunks of the run holding each term (0 for a term none holds; empty terms left out)."""
    wanted = list(dict.fromkeys(terms))
    if not wanted:
        return {}
    rows = await conn.fetch(DOCUMENT_FREQUENCIES, *scope.for_reading().sql_args(), run_id, wanted)
    return {r["term"]: int(r["df"]) for r in rows}


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
    """BM25 over the visible chunks for the distinct normalised `terms`, best first (ties by key).

    With `trigram_text` (a short identifier-like text, normalised), chunks with an entity that looks
    like it (pg_trgm similarity >= 0.6, see the SQL for why entities) follow in the slots the BM25
    hits leave, de-duplicated: at most `limit` rows in all.
    """
    wanted = list(dict.fromkeys(t for t in terms if t))
    if limit <= 0 or not (wanted or trigram_text):
        return []
    rows = await conn.fetch(
        LEXICAL,
        *scope.for_reading().sql_args(),
        run_id,
        wanted,
        float(k1),
        float(b),
        limit,
        trigram_text or None,
        timeout=timeout,
    )
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), float(r["score"]), r["detail"]) for r in rows
    ]


async def exact(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    *,
    keys: Sequence[str],
    phrases: Sequence[str],
    limit: int,
    document_chunks: int = DOCUMENT_MATCH_CHUNKS,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChannelHit]:
    """Chunks whose stored keys equal a query key or phrase, one per chunk at its best weight.

    Weights: row label 1.0, an entity equal to a key 0.9 (detail: its kind), document number 0.85,
    title 0.7, file name without extension 0.6; a document-level match stands for the document's
    first `document_chunks` chunks. Ordered by weight, then ordinal; at most `limit`.
    """
    key_list = list(dict.fromkeys(k for k in keys if k))
    phrase_list = list(dict.fromkeys(p for p in phrases if p))
    if limit <= 0 or not (key_list or phrase_list):
        return []
    rows = await conn.fetch(
        EXACT,
        *scope.for_reading().sql_args(),
        run_id,
        key_list,
        phrase_list,
        limit,
        document_chunks,
        timeout=timeout,
    )
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), float(r["weight"]), r["detail"]) for r in rows
    ]


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
) -> tuple[list[ChannelHit], VectorPath]:
    """The visible chunks nearest to `query` (cosine, among vectors of its dimension) and the path taken.

    "exact" up to `exact_max_chunks` visible vectors or without a valid HNSW index of the dimension;
    "hnsw" the index walk (re-ranked by exact distance); "hnsw+exact" when the walk met fewer than
    min(limit, visible) rows and an exact scan answered. Score: 1 - cosine distance.
    """
    scope.for_reading()
    if limit <= 0:
        return [], "exact"
    rows = await conn.fetch(
        NEAREST,
        *scope.sql_args(),
        run_id,
        np.asarray(query, dtype=np.float32),
        limit,
        exact_max_chunks,
        ef_search,
        max_scan_tuples,
        timeout=timeout,
    )
    path: VectorPath = rows[0]["path"] if rows else "exact"
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), 1.0 - float(r["distance"])) for r in rows
    ], path


async def chunk_details(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    keys: Sequence[tuple[int, int]],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChunkDetail]:
    """The details of these (document_id, ordinal) chunks of the run that the scope may read, in the
    order of `keys` (each once; a key the scope may not read is left out)."""
    scope.for_reading()
    if not keys:
        return []
    rows = await conn.fetch(
        CHUNK_DETAILS,
        *scope.sql_args(),
        run_id,
        [int(d) for d, _ in keys],
        [int(o) for _, o in keys],
        timeout=timeout,
    )
    return [_detail(r) for r in rows]


def _detail(row: asyncpg.Record) -> ChunkDetail:
    metadata = json.loads(row["metadata"]) if row["metadata"] else {}
    return ChunkDetail(
        document_id=int(row["document_id"]),
        ordinal=int(row["ordinal"]),
        chunk_id=str(row["chunk_id"]),
        file_id=row["file_id"],
        kind=row["kind"],
        page=row["page"],
        page_label=row["page_label"],
        section=tuple(row["section"]),
        table_caption=row["table_caption"],
        table_index=row["table_index"],
        row_index=row["row_index"],
        row_label=row["row_label"],
        headers=tuple(row["headers"]),
        row_values=tuple(row["row_values"]),
        units=tuple(row["units"]),
        footnotes=tuple(row["footnotes"]),
        content=row["content"],
        search_text=row["search_text"],
        entity_keys=frozenset(row["entity_keys"]),
        filename=row["filename"],
        title=row["title"],
        language=row["language"],
        publication_date=row["publication_date"],
        document_number=row["document_number"],
        source=row["source"],
        metadata=metadata if isinstance(metadata, dict) else {},
    )
