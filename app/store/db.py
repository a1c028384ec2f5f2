"""Database start-up: the connection pool, codecs, schema and SQL code, and the collection in use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import asyncpg.pool
import numpy as np
from pgvector.asyncpg import register_vector

from app.errors import DatabaseUnavailable, database_unavailable
from app.store import queries
from app.store.migrate import prepare_schema

logger = logging.getLogger(__name__)

MIN_PGVECTOR = (0, 8, 0)


@dataclass(frozen=True)
class StoreInfo:
    """Facts about the database every store call needs, learned once at start-up."""

    collection_id: uuid.UUID
    collection_name: str
    metadata_type: str  # "jsonb" (rag_api default) or "json" (older deployments)


def vector_array(value: Any) -> np.ndarray:
    """A vector column's value as float32: pgvector's codec yields a `Vector`, older versions ndarray."""
    if hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def rows_affected(status: str | None) -> int:
    """Row count from an asyncpg command status such as 'INSERT 0 12' or 'UPDATE 3'."""
    try:
        return int((status or "").split()[-1])
    except (IndexError, ValueError):
        return 0


@contextlib.asynccontextmanager
async def try_advisory_lock(conn: asyncpg.Connection, *key: int) -> AsyncIterator[bool]:
    """Hold the session advisory lock `key` (one or two ints) if it is free; yields whether it was."""
    placeholders = ", ".join(f"${i}" for i in range(1, len(key) + 1))
    got = bool(await conn.fetchval(f"SELECT pg_try_advisory_lock({placeholders})", *key))
    try:
        yield got
    finally:
        if got:
            await conn.execute(f"SELECT pg_advisory_unlock({placeholders})", *key)


class PoolShare:
    """At most `limit` of a pool's connections for one kind of work, so the rest stay free for others.

    `/query_v2` holds its connection through longer statements than any other request: without a
    cap, twenty questions at once take every connection, and a `/query_multiple`, an upload or a
    health check waits behind them. A slot counts a connection in use: it is given back when the
    caller is done with it, while the pool is still taking the connection back.
    """

    def __init__(self, pool: asyncpg.Pool, limit: int) -> None:
        self.pool = pool
        self.limit = max(1, limit)
        self._slots = asyncio.Semaphore(self.limit)

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float) -> AsyncIterator[asyncpg.Connection]:  # noqa: ASYNC109
        """A pool connection within the share; `timeout` bounds both waits together (else 503)."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            # the share is busy, not the database: no alarm for the supervisor
            raise DatabaseUnavailable(
                f"No database connection became free within {timeout:g} s (the database is slow or "
                "overloaded); try again shortly"
            ) from None
        freed = False
        try:
            left = max(timeout - (time.monotonic() - started), 0.001)
            async with self.pool.acquire(timeout=left) as conn:
                try:
                    yield conn
                finally:
                    # the slot is free once the caller is done, not once the pool has the connection
                    # back: that release waits for the event loop (twice), ~60 ms of a busy loop,
                    # and a connection on its way back does no work
                    freed = True
                    self._slots.release()
        finally:
            if not freed:
                self._slots.release()


# connections `/query_v2` leaves to every other request (V1 searches, uploads, health checks)
POOL_RESERVE = 10


def pool_share(pool_size: int) -> int:
    """The connections `/query_v2` may hold at once: all of DB_POOL_MAX_SIZE but POOL_RESERVE (but
    half, in a pool under twice the reserve), at least one: 20 of the default 30."""
    return max(1, pool_size - min(POOL_RESERVE, pool_size // 2))


async def _init_connection(conn: asyncpg.Connection) -> None:
    """Per-connection set-up: the pgvector binary codec."""
    await register_vector(conn)


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing beyond asyncpg's own rollback of an open transaction.

    asyncpg's default sends `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` on every
    release: a round trip during which the connection stays taken, about a fifth of the time a
    `/query_v2` held one with twenty at once. Pool connections keep no session state to undo:
    advisory locks taken on them are transaction locks (`pg_advisory_xact_lock`), settings are
    transaction- or function-local (`set_config(..., true)`, a function's `SET` clause), nothing
    LISTENs or holds a cursor. What does keep session state runs on connections of its own: the job
    worker's lease (LISTEN, the jobs' session locks), maintenance (`dedicated_connection`: index
    builds, the vector copy's lock, session settings) and the migrations (`bootstrap`).
    tests/unit/test_pool_session_state.py keeps it so. Before this is called, asyncpg rolls back a
    transaction left open and drops the connection's listeners.
    """


@contextlib.asynccontextmanager
async def dedicated_connection(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, outside the pool, without a statement timeout: background work.

    Maintenance holds a connection for minutes (an index built CONCURRENTLY, a backfill in committed
    batches), which must neither starve the request pool nor be cut by its timeout.
    """
    conn = await asyncpg.connect(dsn, server_settings={"application_name": "ragoverlay-maintenance"})
    try:
        await _init_connection(conn)
        await conn.execute("SET statement_timeout = 0")
        yield conn
    finally:
        await conn.close()


CONNECT_TIMEOUT_S = 10.0  # asyncpg's own default is 60 s: too long to tell a caller "unavailable"


class SupervisedPool(asyncpg.pool.Pool):  # type: ignore[misc]
    """asyncpg's pool, whose acquire reports a lost database instead of hanging or failing obscurely.

    - An acquire without a timeout waits at most `acquire_timeout_s` for a free connection; a
      timeout (pool exhausted, or the server not answering) is `DatabaseUnavailable` (503).
    - A connection-class failure while acquiring (refused, reset, server shutting down) calls
      `on_failure` (the supervisor probes at once) before it propagates to the error handler.
    - `reset(dsn)` is the pool reset after an outage: new connections (to `dsn` if it moved), and
      every idle or returned connection replaced, so none half-open from before is used again.
    """

    acquire_timeout_s: float = 35.0
    on_failure: Callable[[BaseException], None] | None = None
    connect_options: dict[str, Any]

    async def _acquire(self, timeout: float | None) -> Any:  # noqa: ASYNC109 - asyncpg's signature
        try:
            return await super()._acquire(self.acquire_timeout_s if timeout is None else timeout)
        except TimeoutError:
            waited = self.acquire_timeout_s if timeout is None else timeout
            if self.on_failure is not None:
                self.on_failure(DatabaseUnavailable())
            raise DatabaseUnavailable(
                f"No database connection became free within {waited:g} s (the database is slow, "
                "overloaded or unreachable); try again shortly"
            ) from None
        except Exception as exc:
            if self.on_failure is not None and database_unavailable(exc):
                self.on_failure(exc)
            raise

    async def reset(self, dsn: str | None = None) -> None:
        """Replace every connection (after an outage, or when the server moved to `dsn`)."""
        if dsn is not None:
            # set_connect_args replaces every argument: pass ours (timeouts, settings) again
            self.set_connect_args(dsn, **self.connect_options)
        await self.expire_connections()


async def create_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    statement_timeout_ms: int,
    command_timeout_s: float,
    on_failure: Callable[[BaseException], None] | None = None,
) -> SupervisedPool:
    """Open the pool; every connection gets the vector codec and a server-side statement timeout."""
    options: dict[str, Any] = {
        "command_timeout": command_timeout_s,
        "timeout": CONNECT_TIMEOUT_S,
        "server_settings": {
            "application_name": "ragoverlay",
            "statement_timeout": str(statement_timeout_ms),
            # an abandoned transaction must not hold locks for ever
            "idle_in_transaction_session_timeout": "60000",
        },
    }
    # create_pool's own defaults, spelled out: it cannot build a subclass
    pool = SupervisedPool(
        dsn,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        min_size=min_size,
        max_size=max_size,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        init=_init_connection,
        reset=keep_session,
        loop=None,
        **options,
    )
    pool.connect_options = options
    pool.acquire_timeout_s = command_timeout_s
    pool.on_failure = on_failure
    await pool
    return pool


async def ping(pool: asyncpg.Pool, *, timeout_s: float) -> None:
    """A pool connection answers `SELECT 1` (raises when none does within `timeout_s`)."""
    async with pool.acquire(timeout=timeout_s) as conn:
        await conn.fetchval(queries.HEALTH)


# The dimension of the vectors this service stored for one model identity (provider:model[@dims]).
# rag_api's own rows record no model, so they cannot say which model made them and are not asked.
_STORED_DIMENSION = """
    SELECT f.embedding_dim FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.embedding_model = $2 AND f.embedding_dim IS NOT NULL
    ORDER BY f.updated_at DESC
    LIMIT 1
"""


async def stored_dimension(
    pool: Any, info: StoreInfo, model_id: str, *, timeout_s: float = 5.0
) -> int | None:
    """The dimension of the vectors stored for `model_id` in this collection, or None when none are."""
    async with pool.acquire(timeout=timeout_s) as conn:
        value = await conn.fetchval(_STORED_DIMENSION, info.collection_id, model_id, timeout=timeout_s)
    return int(value) if value else None


async def bootstrap(dsn: str, collection_name: str) -> StoreInfo:
    """Apply migrations and SQL code, check pgvector, find or create the collection (idempotent)."""
    conn = await asyncpg.connect(dsn)
    try:
        changes = await prepare_schema(conn)
        if changes.migrations:
            logger.info("Applied migrations %s", changes.migrations)
        if changes.code:
            logger.info("Applied SQL code %s", ", ".join(changes.code))
        version = await conn.fetchval(queries.VECTOR_VERSION)
        if version is None:
            raise RuntimeError("the pgvector extension is not installed in this database")
        if _version_tuple(version) < MIN_PGVECTOR:
            raise RuntimeError(
                f"pgvector {version} is too old: ragoverlay needs pgvector >= 0.8 "
                "(ALTER EXTENSION vector UPDATE)"
            )
        meta_type = await conn.fetchval(queries.CMETADATA_TYPE) or "jsonb"
        collection_id = await ensure_collection(conn, collection_name)
        return StoreInfo(collection_id, collection_name, str(meta_type))
    finally:
        await conn.close()


async def ensure_collection(conn: asyncpg.Connection, name: str) -> uuid.UUID:
    """The uuid of collection `name`, created if absent (serialised against other starters)."""
    found = await conn.fetchval(queries.SELECT_COLLECTION, name)
    if found is not None:
        return uuid.UUID(str(found))
    async with conn.transaction():
        # rag_api's table has no unique constraint on name: a lock keeps two starters from
        # creating two collections with the same name.
        await conn.execute(queries.LOCK_COLLECTION_CREATE, name)
        found = await conn.fetchval(queries.SELECT_COLLECTION, name)
        if found is not None:
            return uuid.UUID(str(found))
        new_id = uuid.uuid4()
        await conn.execute(queries.INSERT_COLLECTION, new_id, name)
        logger.info("Created collection %s", name)
        return new_id


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
