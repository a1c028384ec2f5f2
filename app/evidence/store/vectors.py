"""V2 chunk vectors: reuse by embedded text, the chunks stored without one, their HNSW indexes, and
what the vector planner reads of a run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from app.store.db import vector_array
from app.store.vector_index import IndexFamily, IndexSpec

# The HNSW index of each dimension on `ragoverlay_v2_chunks` (partial on `dims`, like V1's copy),
# walked by `ragoverlay_v2_vec_walk_<dims>`. Its own build lock key ("rag2"): V1's builds use another,
# so neither waits for the other.
V2_CHUNK_INDEX = IndexFamily(
    table="ragoverlay_v2_chunks",
    index_prefix="ragoverlay_v2_hnsw_",
    walk_prefix="ragoverlay_v2_vec_walk_",
    walk_template="v2_walk.template.sql",
    lock_key=0x72616732,
)


@dataclass(frozen=True)
class MissingVector:
    """A chunk stored without a vector (the provider failed): the re-embed sweep's unit of work."""

    document_id: int
    ordinal: int
    embedding_model: str
    embed_text: str
    tokens: int
    dims: int | None = None  # the dimension of the document's other vectors (None: it has none)


@dataclass(frozen=True)
class RunVectors:
    """What the vector planner reads of a run: each staged file's vectors, the table, the walk.

    `files` maps file id -> owner -> vectors of the file's document in the run; `table_rows` is
    PostgreSQL's estimate of the V2 chunk table's rows (what a filtered walk passes over); `walk`
    the HNSW walk of the dimension when its index is valid, else None.
    """

    files: dict[str, dict[str, int]]
    table_rows: float
    walk: str | None


# --- statements ----------------------------------------------------------------------------------


# Vectors already made by `model` for these embedded texts: the file's earlier versions, or any
# document with the same bytes (another file id holding the same original).
REUSABLE_VECTORS = """
    SELECT DISTINCT ON (c.embed_digest) c.embed_digest, c.embedding
    FROM ragoverlay_v2_documents d
    JOIN ragoverlay_v2_chunks c ON c.document_id = d.document_id
    WHERE d.collection_id = $1 AND d.embedding_model = $2
      AND (d.checksum = $3 OR (d.owner = $4 AND d.file_id = $5))
      AND c.embed_digest = ANY ($6::text[]) AND c.embedding IS NOT NULL
"""

# Chunks without a vector in key order after ($4, $5), with the dimension of their document's
# other vectors (a new vector must match it).
MISSING_VECTORS = """
    SELECT c.document_id, c.ordinal, d.embedding_model, c.embed_text, c.tokens,
           (SELECT o.dims FROM ragoverlay_v2_chunks o
            WHERE o.document_id = c.document_id AND o.dims IS NOT NULL LIMIT 1) AS dims
    FROM ragoverlay_v2_documents d
    JOIN ragoverlay_v2_chunks c ON c.document_id = d.document_id AND c.embedding IS NULL
    WHERE d.collection_id = $1 AND d.vectors_missing > 0
      AND ($2::text IS NULL OR d.embedding_model = $2)
      AND ($4::bigint IS NULL OR (c.document_id, c.ordinal) > ($4::bigint, $5::integer))
    ORDER BY c.document_id, c.ordinal
    LIMIT $3
"""

COUNT_MISSING = """
    SELECT count(*) AS documents, coalesce(sum(vectors_missing), 0)::bigint AS chunks
    FROM ragoverlay_v2_documents
    WHERE collection_id = $1 AND vectors_missing > 0
"""

SET_VECTOR = """
    UPDATE ragoverlay_v2_chunks SET embedding = $3, dims = vector_dims($3::vector)
    WHERE document_id = $1 AND ordinal = $2 AND embedding IS NULL
    RETURNING 1
"""

RECOUNT_MISSING = """
    UPDATE ragoverlay_v2_documents d
    SET vectors_missing = (SELECT count(*) FROM ragoverlay_v2_chunks c
                           WHERE c.document_id = d.document_id AND c.embedding IS NULL),
        embedding_error = CASE WHEN EXISTS (SELECT 1 FROM ragoverlay_v2_chunks c
                                            WHERE c.document_id = d.document_id AND c.embedding IS NULL)
                               THEN d.embedding_error END
    WHERE d.document_id = ANY ($1::bigint[])
"""


# Planner input, not a read of anyone's rows: each staged file's vector count in the run (nothing
# of it reaches a response; the channels read rows in the caller's scope).
RUN_VECTORS = """
    SELECT rf.file_id::text AS file_id, d.owner::text AS owner, d.chunk_count - d.vectors_missing AS vectors
    FROM ragoverlay_v2_run_files rf
    JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
    WHERE rf.run_id = $1 AND rf.state = 'staged'
"""

# the chunk table's size, and whether the walk function and its valid index exist
VECTOR_INDEX_STATE = """
    SELECT (SELECT greatest(c.reltuples, 0) FROM pg_class c WHERE c.oid = 'ragoverlay_v2_chunks'::regclass)
               AS table_rows,
           to_regproc($1) IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_class ic JOIN pg_index i ON i.indexrelid = ic.oid
                       WHERE ic.relname = $2 AND ic.relnamespace = current_schema()::regnamespace
                         AND i.indisvalid) AS walk_ready
"""


# --- reuse ---------------------------------------------------------------------------------------


async def reusable_vectors(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    embedding_model: str,
    checksum: str,
    owner: str,
    file_id: str,
    digests: Sequence[str],
) -> dict[str, np.ndarray]:
    """Vectors `embedding_model` already made for these embedded texts (by digest)."""
    if not digests:
        return {}
    rows = await conn.fetch(
        REUSABLE_VECTORS, collection_id, embedding_model, checksum, owner, file_id, list(set(digests))
    )
    return {r["embed_digest"]: vector_array(r["embedding"]) for r in rows}


# --- vectors the provider could not make ---------------------------------------------------------


async def chunks_missing_vectors(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    embedding_model: str | None = None,
    limit: int = 256,
    after: tuple[int, int] | None = None,
) -> list[MissingVector]:
    """Chunks stored without a vector (the provider failed while staging), in (document, ordinal)
    order after `after`, oldest documents first."""
    rows = await conn.fetch(
        MISSING_VECTORS,
        collection_id,
        embedding_model,
        limit,
        after[0] if after else None,
        after[1] if after else None,
    )
    return [
        MissingVector(
            int(r["document_id"]),
            int(r["ordinal"]),
            r["embedding_model"],
            r["embed_text"],
            r["tokens"],
            r["dims"],
        )
        for r in rows
    ]


async def count_missing_vectors(conn: asyncpg.Connection, collection_id: uuid.UUID) -> tuple[int, int]:
    """Documents with chunks stored without a vector, and how many such chunks (any model)."""
    row = await conn.fetchrow(COUNT_MISSING, collection_id)
    return int(row["documents"]), int(row["chunks"])


async def set_chunk_vectors(conn: asyncpg.Connection, vectors: Sequence[tuple[int, int, np.ndarray]]) -> int:
    """Store vectors for chunks that had none ((document_id, ordinal, vector)); returns rows updated."""
    if not vectors:
        return 0
    updated = 0
    async with conn.transaction():
        for document_id, ordinal, vector in vectors:
            if await conn.fetchval(SET_VECTOR, document_id, ordinal, np.asarray(vector, dtype=np.float32)):
                updated += 1
        await conn.execute(RECOUNT_MISSING, sorted({v[0] for v in vectors}))
    return updated


# --- what the vector planner reads ---------------------------------------------------------------


async def run_vectors(conn: asyncpg.Connection, run_id: int, dims: int) -> RunVectors:
    """What the vector planner reads of run `run_id` for queries of `dims` dimensions (`RunVectors`)."""
    files: dict[str, dict[str, int]] = {}
    for r in await conn.fetch(RUN_VECTORS, run_id):
        by_owner = files.setdefault(r["file_id"], {})
        by_owner[r["owner"]] = by_owner.get(r["owner"], 0) + int(r["vectors"])
    spec = IndexSpec(dims, V2_CHUNK_INDEX)
    row = await conn.fetchrow(VECTOR_INDEX_STATE, spec.function_name, spec.name)
    walk = spec.function_name if row["walk_ready"] else None
    return RunVectors(files, float(row["table_rows"] or 0.0), walk)
