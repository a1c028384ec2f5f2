"""Reads and deletes of V2 rows in the caller's scope (run in SQL, like V1's), and run statistics."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from app.store.scope import SCOPE_SQL, Scope
from app.text.chunk_records import ChunkPlace


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A V2 chunk read back (what a channel or a test sees)."""

    document_id: int
    ordinal: int
    chunk_id: str
    file_id: str
    owner: str
    place: ChunkPlace
    content: str
    embed_text: str
    search_text: str
    tokens: int
    has_vector: bool


@dataclass(frozen=True)
class CatalogueEntry:
    """What the catalogue knows about a stored original."""

    filename: str
    content_type: str | None
    sha256: str | None
    blob_key: str | None
    size_bytes: int | None


# --- statements ----------------------------------------------------------------------------------


RUN_CHUNKS = f"""
    SELECT c.document_id, c.ordinal, c.chunk_id, c.file_id, c.owner, c.kind, c.page, c.page_label,
           c.section, c.table_caption, c.table_index, c.row_index, c.row_label, c.headers, c.row_values,
           c.units, c.footnotes, c.content, c.embed_text, c.search_text, c.tokens,
           c.embedding IS NOT NULL AS has_vector
    FROM ragoverlay_v2_run_chunks(p_scope => {SCOPE_SQL}, p_run => $7, p_limit => $8) AS c
"""

DELETE_FILES = f"SELECT d.file_id FROM ragoverlay_v2_delete_files(p_scope => {SCOPE_SQL}) AS d"

RUN_STATS = "SELECT chunks, average_length FROM ragoverlay_v2_run_stats(p_run => $1)"

# The stored original of one file, read in the namespace's scope (admin work on behalf of it).
CATALOGUE_FILE = f"""
    SELECT f.filename, f.content_type, f.sha256, f.blob_key, f.size_bytes
    FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = $7
      AND ragoverlay_in_scope(p_scope => {SCOPE_SQL}, p_collection => f.collection_id,
                              p_file_id => f.file_id, p_owner => f.owner)
    ORDER BY f.owner
    LIMIT 1
"""

SCHEMA_READY = """
    SELECT to_regclass('ragoverlay_v2_chunks') IS NOT NULL
       AND to_regproc('ragoverlay_v2_run_chunks') IS NOT NULL
"""


# --- reads and deletes in the caller's scope -----------------------------------------------------


async def run_chunks(conn: asyncpg.Connection, scope: Scope, run_id: int, *, limit: int) -> list[StoredChunk]:
    """The chunks of a run the scope may read, by file and ordinal."""
    rows = await conn.fetch(RUN_CHUNKS, *scope.for_reading().sql_args(), run_id, limit)
    return [
        StoredChunk(
            document_id=int(r["document_id"]),
            ordinal=int(r["ordinal"]),
            chunk_id=str(r["chunk_id"]),
            file_id=r["file_id"],
            owner=r["owner"],
            place=ChunkPlace.of_row(r),
            content=r["content"],
            embed_text=r["embed_text"],
            search_text=r["search_text"],
            tokens=int(r["tokens"]),
            has_vector=bool(r["has_vector"]),
        )
        for r in rows
    ]


async def delete_files(conn: asyncpg.Connection, scope: Scope) -> set[str]:
    """Delete the V2 rows of the scope's files (documents, chunks, entities, run entries).

    Run it in the V1 delete's transaction, before the catalogue rows go (the uploader rule reads them).
    """
    if scope.file_ids is None:
        raise ValueError("a delete needs the file ids to delete")
    return {r["file_id"] for r in await conn.fetch(DELETE_FILES, *scope.sql_args())}


async def run_stats(conn: asyncpg.Connection, run_id: int) -> tuple[int, float]:
    """BM25's N (chunks of the run) and mean chunk length in terms."""
    row = await conn.fetchrow(RUN_STATS, run_id)
    return int(row["chunks"]), float(row["average_length"])


async def catalogue_file(conn: asyncpg.Connection, scope: Scope, file_id: str) -> CatalogueEntry | None:
    """The catalogue row of `file_id` inside `scope` (one owner: the run's namespace), or None."""
    row = await conn.fetchrow(CATALOGUE_FILE, *scope.for_reading().sql_args(), file_id)
    if row is None:
        return None
    return CatalogueEntry(
        row["filename"], row["content_type"], row["sha256"], row["blob_key"], row["size_bytes"]
    )


async def schema_ready(conn: asyncpg.Connection) -> bool:
    """True when the V2 tables and functions exist."""
    return bool(await conn.fetchval(SCHEMA_READY))
