"""The HNSW index of each embedding dimension, on the compact vector copy, and its walk function.

The same build serves V2's chunk vectors: an `IndexFamily` names the table, the index and walk
prefixes, the walk template and the build lock key (`app/evidence/store/vectors.py: V2_CHUNK_INDEX`).

The index lives on `ragoverlay_vectors` (migration 0006), not on rag_api's table: its rows are small
and inline, so each candidate the filtered walk meets is checked against plain "C"-collated columns
instead of a TOASTed row and its JSON metadata (measured: ~6x faster at a 10 % allow-list, same
recall). One halfvec index per dimension, partial on `dims = d`, on an expression cast to that
dimension; the walk function (`sql/vec_walk.template.sql`) queries through the very same
expression. Builds run CONCURRENTLY on a dedicated connection under an advisory lock per index
(only one replica builds it) and the table's build lock (`build_lock.py`: one concurrent build per
table, or two would deadlock): ingestion and searches go on.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Literal

import asyncpg

from app.store.build_lock import table_build_lock
from app.store.db import try_advisory_lock
from app.store.migrate import code_checksum, read_template, record_code

logger = logging.getLogger(__name__)

# pgvector's HNSW limit for halfvec
MAX_INDEX_DIMS = 4000
_BUILD_LOCK_KEY = 0x72616769  # "ragi"
WALK_TEMPLATE = "vec_walk.template.sql"

BuildOutcome = Literal["valid", "busy", "table-busy"]
"""What a build call found: the index valid; another session building it (or it is not valid after
the build); or the table's build lock taken by another index's build (this one waits its turn)."""


@dataclass(frozen=True)
class IndexFamily:
    """The HNSW indexes of one vector table: where they live, how they and their walks are named.

    Every dimension gets `<index_prefix><dims>` on `table` (partial on `dims`, on the embedding cast
    to `halfvec(dims)`) and the walk function `<walk_prefix><dims>` from `walk_template`; builds of
    the family take the advisory lock (`lock_key`, dims), so one session builds each index, and then
    the build lock of `table`, shared with every other index on it.
    """

    table: str
    index_prefix: str
    walk_prefix: str
    walk_template: str
    lock_key: int


# V1: the compact vector copy (migration 0006)
VECTOR_COPY_INDEX = IndexFamily(
    table="ragoverlay_vectors",
    index_prefix="ragoverlay_vec_hnsw_",
    walk_prefix="ragoverlay_vec_walk_",
    walk_template=WALK_TEMPLATE,
    lock_key=_BUILD_LOCK_KEY,
)


@dataclass(frozen=True)
class IndexSpec:
    """Name and expression of the HNSW index of one dimension of a family (default: V1's copy)."""

    dims: int
    family: IndexFamily = VECTOR_COPY_INDEX

    @property
    def name(self) -> str:
        """Index name (`ragoverlay_vec_hnsw_<dims>` for V1's copy)."""
        return f"{self.family.index_prefix}{self.dims}"

    @property
    def function_name(self) -> str:
        """The per-dimension index-walk function the search function calls."""
        return f"{self.family.walk_prefix}{self.dims}"

    @property
    def function_sql(self) -> str:
        """The walk function's SQL: the template with this dimension (an int of ours) filled in."""
        return read_template(self.family.walk_template).replace("__DIMS__", str(int(self.dims)))

    @property
    def create_sql(self) -> str:
        """CREATE INDEX CONCURRENTLY statement (dims are ours, never request data; $M and $EFC are
        replaced by integers of ours)."""
        return (
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.name} ON {self.family.table} "
            f"USING hnsw ((embedding::halfvec({self.dims})) halfvec_cosine_ops) "
            f"WITH (m = $M, ef_construction = $EFC) "
            f"WHERE dims = {self.dims}"
        )


def index_spec(dims: int, family: IndexFamily = VECTOR_COPY_INDEX) -> IndexSpec | None:
    """The index of `family` to build for `dims`, or None when pgvector cannot index that many dimensions."""
    if 0 < dims <= MAX_INDEX_DIMS:
        return IndexSpec(dims, family)
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
) -> BuildOutcome:
    """Build the index unless another session is building it or another index of its table.

    `conn` must be a dedicated connection outside any transaction (CONCURRENTLY needs that).
    """
    async with try_advisory_lock(conn, spec.family.lock_key, spec.dims) as got:
        if not got:
            logger.info("Another session is building %s", spec.name)
            return "busy"
        if await index_state(conn, spec) != "valid":
            async with table_build_lock(conn, spec.family.table) as turn:
                if not turn:
                    return "table-busy"
                await _create(conn, spec, m=m, ef_construction=ef_construction, memory=memory)
        if await index_state(conn, spec) != "valid":
            return "busy"
        await ensure_walk(conn, spec)
        return "valid"


async def _create(
    conn: asyncpg.Connection, spec: IndexSpec, *, m: int, ef_construction: int, memory: str
) -> None:
    """Drop what an interrupted build left, then build; the caller holds both build locks."""
    state = await index_state(conn, spec)
    if state == "building":
        # we hold the build lock, so nobody is building it: a crash left it invalid
        logger.warning("Dropping invalid index %s left by an interrupted build", spec.name)
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {spec.name}")
        state = "missing"
    if state == "missing":
        await prepare_build(conn, memory)
        sql = spec.create_sql.replace("$M", str(int(m))).replace("$EFC", str(int(ef_construction)))
        logger.info("Building %s (CONCURRENTLY; searches use the exact path meanwhile)", spec.name)
        await conn.execute(sql)
        logger.info("Built %s", spec.name)


async def prepare_build(conn: asyncpg.Connection, memory: str) -> None:
    """Ready a dedicated connection for an index build: its memory, and no statement timeout."""
    await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)
    await conn.execute("SET statement_timeout = 0")


async def ensure_walk(conn: asyncpg.Connection, spec: IndexSpec) -> bool:
    """Create the index-walk function of `spec` unless it is current; True when it was (re)created.

    Recorded in `ragoverlay_sql_code` under the function's name with the checksum of its text, like
    the SQL code files, so a new template reaches every dimension at the next start.
    """
    sql = spec.function_sql
    checksum = hashlib.sha256(sql.encode()).hexdigest()
    exists = await conn.fetchval("SELECT to_regproc($1) IS NOT NULL", spec.function_name)
    if exists and await code_checksum(conn, spec.function_name) == checksum:
        return False
    # serialised: concurrent CREATE of one function can fail with "tuple concurrently updated"
    # (one lock per dimension for the walks of every family, whatever their build lock)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", _BUILD_LOCK_KEY, -spec.dims)
        # pgvector's library defines the hnsw.* settings the function's SET clauses name; until it
        # is loaded in this session they are placeholders, which only a superuser may set
        await conn.execute("SELECT '[1]'::vector")
        await conn.execute(sql)
        await record_code(conn, spec.function_name, checksum)
    return True
