"""Database start-up: the connection pool, codecs, schema and SQL code, and the collection in use."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
from pgvector.asyncpg import register_vector

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
    pgvector_version: str


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


async def _init_connection(conn: asyncpg.Connection) -> None:
    """Per-connection set-up: the pgvector binary codec."""
    await register_vector(conn)


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


async def create_pool(
    dsn: str, *, min_size: int, max_size: int, statement_timeout_ms: int, command_timeout_s: float
) -> asyncpg.Pool:
    """Open the pool; every connection gets the vector codec and a server-side statement timeout."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        command_timeout=command_timeout_s,
        server_settings={
            "application_name": "ragoverlay",
            "statement_timeout": str(statement_timeout_ms),
            # an abandoned transaction must not hold locks for ever
            "idle_in_transaction_session_timeout": "60000",
        },
    )
    assert pool is not None
    return pool


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
        return StoreInfo(collection_id, collection_name, str(meta_type), str(version))
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
