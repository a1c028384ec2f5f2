"""One concurrent index build at a time per table, across tasks, processes and replicas.

Two CREATE (or DROP) INDEX CONCURRENTLY on one table deadlock: each holds the table's SHARE UPDATE
EXCLUSIVE lock from start to end, so the second waits for it inside a transaction whose snapshot
the first, in its last phase, waits to see end. PostgreSQL breaks the cycle by cancelling one of
them (seen on a first start: the global HNSW build of `ragoverlay_vectors`, six minutes in, beside
a namespace index's). So every concurrent build or drop of ours (V1's global and namespace
indexes, V2's indexes, the migrations) first takes its table's build lock: a session advisory lock
keyed by the table's name, on the dedicated connection the build runs on, held until the build ends.

The lock is only ever tried (`pg_try_advisory_lock`), never waited for inside PostgreSQL: a session
blocked in `pg_advisory_lock` sits in a statement with a snapshot, which the running build's last
phase would wait for, the same cycle again (measured: PostgreSQL cancels the waiting statement with
`deadlock detected`). A maintenance build that finds the lock taken comes back later (its task says
so); a migration polls for it here, between statements, and so do replicas waiting for the
migrations' own lock (`wait_advisory_lock`), which a migration holds through its concurrent builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import AsyncIterator

import asyncpg

logger = logging.getLogger(__name__)

TABLE_LOCK_KEY = 0x72616774  # "ragt": the first half of every table's build-lock key
POLL_SECONDS = 1.0  # how often a waiting migration tries the lock again
TURN_SECONDS = 5.0  # how soon a maintenance build that found the lock taken tries again
_NOTE_SECONDS = 60.0  # a build that keeps finding its table busy says so once a minute, not every try
_noted: dict[str, float] = {}  # table -> when a busy table was last logged


def waiting_note(table: str) -> str:
    """What a task says while its build waits for the table's build lock."""
    return f"waiting for another index build on {table} to end"


def table_lock_id(table: str) -> int:
    """The second half of `table`'s build-lock key: a 32-bit digest of its name."""
    return zlib.crc32(table.encode()) - 2**31


# (app.store.db's try_advisory_lock does the same try, but db imports migrate, which imports this)
@contextlib.asynccontextmanager
async def table_build_lock(conn: asyncpg.Connection, table: str) -> AsyncIterator[bool]:
    """Hold `table`'s build lock if it is free; yields whether it was (False: another build runs)."""
    key = (TABLE_LOCK_KEY, table_lock_id(table))
    got = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *key))
    if not got and time.monotonic() - _noted.get(table, -_NOTE_SECONDS) >= _NOTE_SECONDS:
        _noted[table] = time.monotonic()
        logger.info("Another index build on %s is running: this one waits its turn", table)
    try:
        yield got
    finally:
        if got:
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", *key)


async def wait_advisory_lock(
    conn: asyncpg.Connection, *key: int, what: str, poll: float = POLL_SECONDS
) -> None:
    """Take the session advisory lock `key` (one or two ints), polling while another session holds it.

    Never blocked inside PostgreSQL, where the wait would hold a snapshot a concurrent index build
    waits for. `what` names the holder's work in the log line of a wait.
    """
    placeholders = ", ".join(f"${i}" for i in range(1, len(key) + 1))
    waited = False
    while not await conn.fetchval(f"SELECT pg_try_advisory_lock({placeholders})", *key):
        if not waited:
            logger.info("%s is running: waiting for it to end", what)
            waited = True
        await asyncio.sleep(poll)
    if waited:
        logger.info("%s ended: going on", what)


@contextlib.asynccontextmanager
async def wait_table_build_lock(
    conn: asyncpg.Connection, table: str, *, poll: float = POLL_SECONDS
) -> AsyncIterator[None]:
    """Hold `table`'s build lock, waiting for it while another session holds it (polled, never blocked)."""
    key = (TABLE_LOCK_KEY, table_lock_id(table))
    await wait_advisory_lock(conn, *key, what=f"Another index build on {table}", poll=poll)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, $2)", *key)
