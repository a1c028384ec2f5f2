"""The HNSW index on rag_api's dimensionless `embedding` column, and the file catalogue backfill.

rag_api's `vector` column has no dimension, so the index is on an expression cast to the model's
dimension, partial on `vector_dims(embedding) = d` (rows of another model never hit the cast), and
the search function queries through the very same expression. Builds run CONCURRENTLY on a
dedicated connection under an advisory lock: ingestion and searches go on, and only one replica
builds.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import asyncpg

logger = logging.getLogger(__name__)

# pgvector's limits for HNSW: vector up to 2,000 dimensions, halfvec up to 4,000.
MAX_VECTOR_DIMS = 2000
MAX_HALFVEC_DIMS = 4000
_BUILD_LOCK_KEY = 0x72616769  # "ragi"


@dataclass(frozen=True)
class IndexSpec:
    """Name and expression of the HNSW index for one dimension."""

    dims: int
    type_name: str  # "vector" or "halfvec"

    @property
    def name(self) -> str:
        """Index name (prefix `ragoverlay_emb_hnsw`)."""
        return f"ragoverlay_emb_hnsw_{self.type_name}_{self.dims}"

    @property
    def function_name(self) -> str:
        """The per-dimension index-walk function the search function calls."""
        return f"ragoverlay_hnsw_{self.type_name}_{self.dims}"

    @property
    def function_sql(self) -> str:
        """CREATE OR REPLACE of the index-walk function: static SQL through the index expression.

        plpgsql, not sql: a sql function would be inlined into the caller's dynamic statement and
        planned on every call; plpgsql keeps one cached plan per connection.
        """
        expr = f"(e.embedding::{self.type_name}({self.dims}))"
        query = f"p_query::{self.type_name}({self.dims})"
        return f"""
            CREATE OR REPLACE FUNCTION {self.function_name}(
                p_query vector, p_collection uuid, p_fileset jsonb, p_owners text[],
                p_legacy_unowned boolean, p_limit integer)
            RETURNS TABLE (id uuid, distance double precision)
            LANGUAGE plpgsql STABLE AS $fn$
            BEGIN
                RETURN QUERY
                    SELECT e.uuid, {expr} <=> {query}
                    FROM langchain_pg_embedding e
                    WHERE vector_dims(e.embedding) = {self.dims}
                      AND e.collection_id = p_collection
                      -- jsonb `?` is a binary search over sorted keys: no linear scan per tuple
                      AND p_fileset ? e.custom_id
                      AND ((e.cmetadata ->> 'user_id') = ANY (p_owners)
                           OR (p_legacy_unowned AND (e.cmetadata ->> 'user_id') IS NULL))
                    ORDER BY {expr} <=> {query}
                    LIMIT p_limit;
            END;
            $fn$
        """

    @property
    def create_sql(self) -> str:
        """CREATE INDEX CONCURRENTLY statement (dims and type are ours, never request data)."""
        ops = "vector_cosine_ops" if self.type_name == "vector" else "halfvec_cosine_ops"
        return (
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.name} ON langchain_pg_embedding "
            f"USING hnsw ((embedding::{self.type_name}({self.dims})) {ops}) "
            f"WITH (m = $M, ef_construction = $EFC) "
            f"WHERE vector_dims(embedding) = {self.dims}"
        )


def index_spec(dims: int) -> IndexSpec | None:
    """The index to build for `dims`, or None when pgvector cannot index that many dimensions."""
    if dims <= 0:
        return None
    if dims <= MAX_VECTOR_DIMS:
        return IndexSpec(dims, "vector")
    if dims <= MAX_HALFVEC_DIMS:
        return IndexSpec(dims, "halfvec")
    return None


async def index_state(conn: asyncpg.Connection, spec: IndexSpec) -> str:
    """'valid', 'building' (exists, not yet valid) or 'missing'."""
    row = await conn.fetchrow(
        """
        SELECT i.indisvalid, i.indisready
        FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
        WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace
        """,
        spec.name,
    )
    if row is None:
        return "missing"
    return "valid" if row["indisvalid"] else "building"


async def build_index(
    conn: asyncpg.Connection, spec: IndexSpec, *, m: int, ef_construction: int, memory: str
) -> bool:
    """Build the index if no other session is; return True when it is valid afterwards.

    `conn` must be a dedicated connection outside any transaction (CONCURRENTLY needs that).
    """
    got = await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", _BUILD_LOCK_KEY, spec.dims)
    if not got:
        logger.info("Another session is building %s", spec.name)
        return False
    try:
        state = await index_state(conn, spec)
        if state == "building":
            # we hold the build lock, so nobody is building it: a crash left it invalid
            logger.warning("Dropping invalid index %s left by an interrupted build", spec.name)
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {spec.name}")
            state = "missing"
        if state == "missing":
            await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)
            await conn.execute("SET statement_timeout = 0")
            sql = spec.create_sql.replace("$M", str(int(m))).replace("$EFC", str(int(ef_construction)))
            logger.info("Building %s (CONCURRENTLY; searches use the exact path meanwhile)", spec.name)
            await conn.execute(sql)
            logger.info("Built %s", spec.name)
        valid = await index_state(conn, spec) == "valid"
        if valid:
            await ensure_function(conn, spec)
        return valid
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, $2)", _BUILD_LOCK_KEY, spec.dims)


async def ensure_function(conn: asyncpg.Connection, spec: IndexSpec) -> None:
    """Create (or refresh) the index-walk function of `spec` (idempotent)."""
    # serialised: concurrent CREATE OR REPLACE of one function can fail with "tuple concurrently updated"
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", _BUILD_LOCK_KEY, -spec.dims)
        await conn.execute(spec.function_sql)


async def backfill_catalog(conn: asyncpg.Connection, collection_id: uuid.UUID) -> int:
    """Catalogue the files rag_api wrote (chunk counts, dimension); returns the rows added or completed.

    Their uploader is unknown (''), which never matches a caller, so delete rights stay with the owner.
    The dimension is recorded only when all of a file's rows agree (then searches skip the per-row
    check); mixed or unknown stays NULL and is checked row by row.
    """
    added = await conn.execute(
        """
        INSERT INTO ragoverlay_files (collection_id, file_id, owner, uploader, filename, status, chunk_count,
                                      embedding_dim)
        SELECT e.collection_id, e.custom_id, e.cmetadata ->> 'user_id', '',
               coalesce(min(regexp_replace(e.cmetadata ->> 'source', '^.*[/\\\\]', '')), e.custom_id),
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
        """,
        collection_id,
    )
    completed = await conn.execute(
        """
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
        """,
        collection_id,
    )
    return _count(added) + _count(completed)


def _count(status: str | None) -> int:
    """Row count from an asyncpg command status such as 'INSERT 0 12' or 'UPDATE 3'."""
    if not status:
        return 0
    try:
        return int(status.split()[-1])
    except ValueError:
        return 0
