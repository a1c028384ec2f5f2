"""The file catalogue (`ragoverlay_files`) as the search planner sees it, and its backfill.

Only the path choice uses these figures; authorisation is always the SQL scope's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from app.store.db import rows_affected

# Per-file rows are read for the estimate up to this many catalogued files (~200 bytes each in
# memory); above it the planner falls back to files x average chunks per file.
FILE_ROWS_MAX = 100_000

CATALOGUE_TOTALS = """
    SELECT count(*) AS files, coalesce(sum(chunk_count), 0) AS chunks,
           count(DISTINCT embedding_dim) AS dim_kinds, bool_or(embedding_dim IS NULL) AS unknown_dims,
           min(embedding_dim) AS dims
    FROM ragoverlay_files WHERE collection_id = $1
"""
CATALOGUE_FILES = """
    SELECT file_id, owner, uploader, chunk_count FROM ragoverlay_files WHERE collection_id = $1
"""
# The searched tables' size as PostgreSQL estimates it (the copy mirrors rag_api's table: whichever
# was analysed more recently knows better). The HNSW index spans every collection.
TABLE_ROWS = """
    SELECT greatest(max(c.reltuples), 0) FROM pg_class c
    WHERE c.oid IN (to_regclass('ragoverlay_vectors'), to_regclass('langchain_pg_embedding'))
"""

# rag_api's files enter the catalogue with an unknown uploader (''), which never matches a caller,
# so read and delete rights stay with the owner. The dimension is recorded only when all of a
# file's rows agree; mixed or unknown stays NULL (searches then check it row by row).
BACKFILL_MISSING = r"""
    INSERT INTO ragoverlay_files (collection_id, file_id, owner, uploader, filename, status, chunk_count,
                                  embedding_dim)
    SELECT e.collection_id, e.custom_id, e.cmetadata ->> 'user_id', '',
           coalesce(min(regexp_replace(e.cmetadata ->> 'source', '^.*[/\\]', '')), e.custom_id),
           'legacy', count(*),
           CASE WHEN min(vector_dims(e.embedding)) = max(vector_dims(e.embedding))
                THEN min(vector_dims(e.embedding)) END
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND e.custom_id IS NOT NULL AND (e.cmetadata ->> 'user_id') IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM ragoverlay_files f
                      WHERE f.collection_id = e.collection_id AND f.file_id = e.custom_id
                        AND f.owner = e.cmetadata ->> 'user_id')
    GROUP BY e.collection_id, e.custom_id, e.cmetadata ->> 'user_id'
    ON CONFLICT (collection_id, file_id, owner) DO NOTHING
"""
BACKFILL_DIMS = """
    UPDATE ragoverlay_files f
    SET embedding_dim = d.dims
    FROM (SELECT e.custom_id, e.cmetadata ->> 'user_id' AS owner,
                 CASE WHEN min(vector_dims(e.embedding)) = max(vector_dims(e.embedding))
                      THEN min(vector_dims(e.embedding)) END AS dims
          FROM langchain_pg_embedding e
          JOIN ragoverlay_files g
            ON g.collection_id = e.collection_id AND g.file_id = e.custom_id
           AND g.owner = e.cmetadata ->> 'user_id'
          WHERE e.collection_id = $1 AND g.status = 'legacy' AND g.embedding_dim IS NULL
          GROUP BY e.custom_id, e.cmetadata ->> 'user_id') d
    WHERE f.collection_id = $1 AND f.file_id = d.custom_id AND f.owner = d.owner
      AND f.status = 'legacy' AND f.embedding_dim IS NULL AND d.dims IS NOT NULL
"""


@dataclass(frozen=True)
class CatalogueFile:
    """One catalogue row, as far as the planner cares."""

    file_id: str
    owner: str
    uploader: str
    chunks: int


@dataclass(frozen=True)
class CatalogueSnapshot:
    """The catalogue of one collection at one moment."""

    files: int
    chunks: int
    uniform_dims: int | None  # the single dimension of every catalogued file, if there is one
    rows: list[CatalogueFile] | None  # None when there are more than FILE_ROWS_MAX files
    table_rows: float


async def read_catalogue(conn: asyncpg.Connection, collection_id: uuid.UUID) -> CatalogueSnapshot:
    """Totals, dimensions and (when small enough) the per-file rows of a collection."""
    row = await conn.fetchrow(CATALOGUE_TOTALS, collection_id)
    uniform = row["dims"] if row["dim_kinds"] == 1 and not row["unknown_dims"] else None
    files = int(row["files"])
    rows: list[CatalogueFile] | None = None
    if files <= FILE_ROWS_MAX:
        rows = [
            CatalogueFile(r["file_id"], r["owner"], r["uploader"], int(r["chunk_count"]))
            for r in await conn.fetch(CATALOGUE_FILES, collection_id)
        ]
    table_rows = float(await conn.fetchval(TABLE_ROWS) or 0.0)
    return CatalogueSnapshot(files, int(row["chunks"]), uniform, rows, table_rows)


async def backfill_catalogue(conn: asyncpg.Connection, collection_id: uuid.UUID) -> int:
    """Catalogue the files rag_api wrote (chunk counts, dimension); returns the rows added or completed."""
    added = await conn.execute(BACKFILL_MISSING, collection_id)
    completed = await conn.execute(BACKFILL_DIMS, collection_id)
    return rows_affected(added) + rows_affected(completed)
