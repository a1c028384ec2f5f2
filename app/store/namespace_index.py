"""The HNSW index of one large namespace on the vector copy: sizes, build, drop, its walk.

Which namespaces get one is decided in `app/search/namespaces.py` (pure); this module only reads
the catalogue's sizes and carries the decision out. An index is partial on the namespace's dimension,
collection and owner (`dims = d AND collection_id = c AND owner = o`), on the same expression as the
dimension's global index, so the walk function (`sql/vec_ns_walk.template.sql`, one per dimension)
reaches it with the owner as a parameter. Builds and drops run CONCURRENTLY on a dedicated
connection under an advisory lock per index and the table's build lock (`build_lock.py`, shared with
the global indexes' builds): ingestion and searches go on (on the global index) meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
import zlib
from dataclasses import dataclass

import asyncpg

from app.store.build_lock import table_build_lock
from app.store.db import try_advisory_lock
from app.store.vector_index import BuildOutcome, IndexFamily, IndexSpec, ensure_walk, prepare_build

logger = logging.getLogger(__name__)

NAMESPACE_INDEX_PREFIX = "ragoverlay_vec_ns_"
_LOCK_KEY = 0x7261676E  # "ragn"
NAMESPACE_WALKS = IndexFamily(
    table="ragoverlay_vectors",
    index_prefix=NAMESPACE_INDEX_PREFIX,
    walk_prefix="ragoverlay_vec_ns_walk_",
    walk_template="vec_ns_walk.template.sql",
    lock_key=_LOCK_KEY,
)


@dataclass(frozen=True)
class NamespaceSize:
    """Chunks of one dimension in one namespace (owner) of the collection, from the catalogue."""

    owner: str
    dims: int
    rows: int


def _digest(text: str, length: int) -> str:
    return hashlib.md5(text.encode(errors="surrogatepass"), usedforsecurity=False).hexdigest()[:length]


def collection_prefix(collection_id: uuid.UUID) -> str:
    """The name prefix of one collection's namespace indexes (collections may share a database)."""
    return f"{NAMESPACE_INDEX_PREFIX}{_digest(str(collection_id), 8)}_"


def namespace_index_name(collection_id: uuid.UUID, owner: str, dims: int) -> str:
    """The index name of a namespace: its collection, dimension and a digest of the owner (any string)."""
    owner_digest = _digest(f"{collection_id}\x1f{owner}", 16)
    return f"{collection_prefix(collection_id)}{int(dims)}_{owner_digest}"


def namespace_walk_name(dims: int) -> str:
    """The walk function shared by every namespace index of `dims` dimensions."""
    return IndexSpec(dims, NAMESPACE_WALKS).function_name


# chunks per namespace and dimension, as the catalogue counts them (files of unknown or mixed
# dimension are left out: their rows are searched through the global index)
NAMESPACE_SIZES = """
    SELECT owner, embedding_dim AS dims, sum(chunk_count)::bigint AS rows
    FROM ragoverlay_files
    WHERE collection_id = $1 AND embedding_dim IS NOT NULL AND owner <> ''
    GROUP BY owner, embedding_dim
    HAVING sum(chunk_count) >= $2
"""
# the names are ours (prefix, digits, hex), so LIKE's wildcards in the prefix are harmless
NAMESPACE_INDEXES = """
    SELECT c.relname AS name, i.indisvalid AS valid
    FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relname LIKE $1 || '%'
      AND i.indrelid = 'ragoverlay_vectors'::regclass
"""
# The owner is any string a request named: the server quotes it (%L), never Python.
CREATE_SQL = """
    SELECT format(
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON ragoverlay_vectors '
        'USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) '
        'WHERE dims = %s AND collection_id = %L AND owner = %L',
        $1::text, $2::integer, $3::integer, $4::integer, $2::integer, $5::uuid, $6::text)
"""


async def namespace_sizes(
    conn: asyncpg.Connection, collection_id: uuid.UUID, min_rows: int
) -> list[NamespaceSize]:
    """Namespaces of the collection holding at least `min_rows` chunks of one dimension."""
    rows = await conn.fetch(NAMESPACE_SIZES, collection_id, max(min_rows, 1))
    return [NamespaceSize(r["owner"], int(r["dims"]), int(r["rows"])) for r in rows]


async def namespace_indexes(conn: asyncpg.Connection, collection_id: uuid.UUID) -> dict[str, bool]:
    """The collection's namespace indexes: name -> valid (False while building or after a crash)."""
    rows = await conn.fetch(NAMESPACE_INDEXES, collection_prefix(collection_id))
    return {r["name"]: bool(r["valid"]) for r in rows}


def _lock_id(name: str) -> int:
    """A 32-bit advisory-lock id of an index name."""
    return zlib.crc32(name.encode()) - 2**31


async def build_namespace_index(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    size: NamespaceSize,
    *,
    m: int,
    ef_construction: int,
    memory: str,
) -> BuildOutcome:
    """Build one namespace's index unless another session is building it or another index of the table.

    `conn` must be a dedicated connection outside any transaction (CONCURRENTLY needs that).
    """
    name = namespace_index_name(collection_id, size.owner, size.dims)
    async with try_advisory_lock(conn, _LOCK_KEY, _lock_id(name)) as got:
        if not got:
            return "busy"
        if not (await namespace_indexes(conn, collection_id)).get(name):
            async with table_build_lock(conn, NAMESPACE_WALKS.table) as turn:
                if not turn:
                    return "table-busy"
                await _create(
                    conn, collection_id, name, size, m=m, ef_construction=ef_construction, memory=memory
                )
        if not (await namespace_indexes(conn, collection_id)).get(name):
            return "busy"
        await ensure_walk(conn, IndexSpec(size.dims, NAMESPACE_WALKS))
        return "valid"


async def _create(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    name: str,
    size: NamespaceSize,
    *,
    m: int,
    ef_construction: int,
    memory: str,
) -> None:
    """Drop what an interrupted build left, then build; the caller holds both build locks."""
    state = (await namespace_indexes(conn, collection_id)).get(name)
    if state is False:
        # we hold its build lock, so nobody is building it: a crash left it invalid
        logger.warning("Dropping invalid index %s left by an interrupted build", name)
        await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    if not state:
        await prepare_build(conn, memory)
        sql = await conn.fetchval(
            CREATE_SQL, name, size.dims, int(m), int(ef_construction), collection_id, size.owner
        )
        logger.info("Building %s for a namespace of %d rows of %d dimensions", name, size.rows, size.dims)
        await conn.execute(sql)


async def drop_namespace_index(conn: asyncpg.Connection, collection_id: uuid.UUID, name: str) -> bool:
    """Drop a namespace index (CONCURRENTLY: searches and writes go on); `name` must be one of ours.

    False when it was left for a later pass: another session holds its lock or its table's.
    """
    if not name.startswith(collection_prefix(collection_id)) or not name.replace("_", "").isalnum():
        raise ValueError(f"not a namespace index: {name!r}")
    async with try_advisory_lock(conn, _LOCK_KEY, _lock_id(name)) as got:
        if not got:
            return False
        async with table_build_lock(conn, NAMESPACE_WALKS.table) as turn:
            if not turn:
                return False
            await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
            logger.info("Dropped %s (its namespace shrank below the threshold)", name)
            return True
