"""Read standbys: searches read on a streaming standby once it has replayed the primary's last write.

    reads = ReadPools(primary_pool, [Standby(url, pool)], wait_s=0.1, retry_s=5.0)
    rows = await reads.read(lambda conn: store.documents(conn, scope), timeout=10)  # retried on the primary
    async with reads.acquire(timeout=10) as conn: ...  # a standby or the primary

Read-your-writes for every client, with no state shared between service replicas: before a read, the
primary's flushed WAL position (`pg_current_wal_flush_lsn()`: a commit is flushed before it is
acknowledged, and standbys are sent flushed WAL only) is asked beside the standby's replay position
and recovery state, both at once. A standby that has replayed up to that position sees every write
acknowledged before the read began; one that is behind gets a short, bounded wait (polled with
growing pauses), then the read goes to the primary. A standby that fails or cannot be reached is
skipped for `retry_s`; one no longer in recovery (promoted, or a primary given by mistake) is never
read. So a lagging, lost or promoted standby makes a read slower, never wrong. Only reads come here:
writes, job claims and migrations keep the primary pool; the statements are the same on either
server (the scope predicate included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg

from app.errors import database_unavailable
from app.metrics import STANDBY_CHECK_SECONDS, STANDBY_READS
from app.store.db import create_pool

logger = logging.getLogger(__name__)

T = TypeVar("T")

PRIMARY_POSITION = "SELECT pg_current_wal_flush_lsn()"
STANDBY_POSITION = "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()"
REPLAYED = "SELECT pg_last_wal_replay_lsn()"
COMMIT_MODE = "SELECT current_setting('synchronous_commit')"

# a standby's connection and its position, within this: an unreachable host must not hold a read
CHECK_TIMEOUT_S = 1.0
# after a wait that ran out, reads that find the standby behind go to the primary at once for this
# long: a standby lagging by seconds would otherwise cost every read after a write the whole wait
IMPATIENT_S = 1.0
FIRST_PAUSE_S = 0.001


def describe_url(url: str) -> str:
    """host:port of a PostgreSQL URL, for logs (never its password)."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"


@dataclass
class Standby:
    """One read standby: its pool and what the last check found."""

    name: str  # host:port, for logs
    pool: Any  # asyncpg.Pool (min_size 0: a standby down at start-up does not stop the service)
    skip_until: float = 0.0  # monotonic: not asked before this (down, failing or promoted)
    impatient_until: float = 0.0  # monotonic: behind means the primary at once, no wait
    trouble: str | None = None  # "unavailable" or "promoted" while it is skipped, for the log

    def usable(self, now: float) -> bool:
        """Not skipped right now."""
        return now >= self.skip_until

    def set_aside(self, reason: str, retry_s: float, detail: str) -> None:
        """Skip it for `retry_s`; the first time of an outage is logged, the repeats are not."""
        self.skip_until = time.monotonic() + retry_s
        if self.trouble != reason:
            logger.warning(
                "Read standby %s %s (%s): reads go to the primary, asked again every %g s",
                self.name,
                "is not in recovery (promoted?)" if reason == "promoted" else "is unavailable",
                detail,
                retry_s,
            )
        self.trouble = reason

    def answered(self) -> None:
        """It answered as a standby again."""
        if self.trouble is not None:
            logger.warning("Read standby %s answers again: reads go to it when it has caught up", self.name)
            self.trouble = None


def standby_failure(exc: BaseException) -> bool:
    """A failure of the standby, not of the request: the primary is asked instead.

    A lost connection, a query cancelled by a conflict with recovery (class 40: a search on a
    standby that is replaying a vacuum of the rows it reads), a write that landed on a standby, or
    any client-side error: asyncpg hands a pooled connection the server closed back to its pool
    itself, and the next statement on it fails with "connection has been released back to the
    pool". A request that is wrong fails on the primary again, and that answer stands.
    """
    return database_unavailable(exc) or isinstance(
        exc,
        (asyncpg.TransactionRollbackError, asyncpg.ReadOnlySQLTransactionError, asyncpg.InterfaceError),
    )


class ReadPools:
    """Where reads go: a standby that has replayed the primary's last write, else the primary."""

    def __init__(self, primary: Any, standbys: Sequence[Standby], *, wait_s: float, retry_s: float) -> None:
        self.primary = primary
        self.standbys = list(standbys)
        self.wait_s = wait_s
        self.retry_s = retry_s
        self._turn = 0

    async def read(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> T:
        """`work` on a caught-up standby's connection, or on the primary's (also when it fails there)."""
        chosen = await self._route(timeout)
        if chosen is not None:
            standby, conn = chosen
            try:
                return await work(conn)
            except Exception as exc:
                if not standby_failure(exc):
                    raise
                STANDBY_READS.labels("retried").inc()
                if database_unavailable(exc):
                    standby.set_aside("unavailable", self.retry_s, type(exc).__name__)
            finally:
                await _release_quietly(standby.pool, conn)
        async with self.primary.acquire(timeout=timeout) as conn:
            return await work(conn)

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float | None = None) -> AsyncIterator[asyncpg.Connection]:  # noqa: ASYNC109
        """A caught-up standby's connection, else the primary's (for callers that retry on their own)."""
        chosen = await self._route(timeout)
        if chosen is None:
            async with self.primary.acquire(timeout=timeout) as conn:
                yield conn
            return
        standby, conn = chosen
        try:
            yield conn
        except Exception as exc:
            if database_unavailable(exc):
                standby.set_aside("unavailable", self.retry_s, type(exc).__name__)
            raise
        finally:
            await _release_quietly(standby.pool, conn)

    async def close(self) -> None:
        """Close the standbys' pools (the primary's is closed by its owner)."""
        for standby in self.standbys:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(standby.pool.close(), CHECK_TIMEOUT_S * 5)

    def _next(self) -> Standby | None:
        """The next standby not set aside, in turn."""
        now = time.monotonic()
        for _ in range(len(self.standbys)):
            standby = self.standbys[self._turn % len(self.standbys)]
            self._turn += 1
            if standby.usable(now):
                return standby
        return None

    async def _route(self, timeout: float | None) -> tuple[Standby, asyncpg.Connection] | None:  # noqa: ASYNC109
        """A standby and its connection when it has replayed the primary's position; None: the primary."""
        standby = self._next()
        if standby is None:
            STANDBY_READS.labels("unavailable").inc()
            return None
        started = time.perf_counter()
        # both positions at once: the standby's replay only grows, so whichever answers first, a
        # replay at or past the primary's position holds every write acknowledged before this read
        target = asyncio.ensure_future(self._primary_position(timeout))
        checked = None
        try:
            checked = await self._standby_position(standby)
            position = await target  # the primary's failure is this read's, as without standbys
        except BaseException:
            target.cancel()
            if checked is not None:
                await _release_quietly(standby.pool, checked[0])
            raise
        outcome = "unavailable"
        try:
            if checked is not None:
                conn, replayed = checked
                outcome = await self._caught_up(standby, conn, replayed, position)
                if outcome in ("standby", "waited"):
                    return standby, conn
                await _release_quietly(standby.pool, conn)
            return None
        finally:
            STANDBY_READS.labels(outcome).inc()
            STANDBY_CHECK_SECONDS.observe(time.perf_counter() - started)

    async def _primary_position(self, timeout: float | None) -> int:  # noqa: ASYNC109
        async with self.primary.acquire(timeout=timeout) as conn:
            return int(await conn.fetchval(PRIMARY_POSITION, timeout=timeout))

    async def _standby_position(self, standby: Standby) -> tuple[asyncpg.Connection, int | None] | None:
        """A standby connection and its replay position (None when promoted); None when it failed."""
        conn = None
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                conn = await standby.pool.acquire()
                in_recovery, replayed = await conn.fetchrow(STANDBY_POSITION)
        except Exception as exc:  # any failure of the standby's is a reason to skip it, none to fail
            if conn is not None:
                await _release_quietly(standby.pool, conn)
            standby.set_aside("unavailable", self.retry_s, type(exc).__name__)
            return None
        if not in_recovery:
            return conn, None
        standby.answered()
        return conn, int(replayed)

    async def _caught_up(
        self, standby: Standby, conn: asyncpg.Connection, replayed: int | None, position: int
    ) -> str:
        """standby or waited (it holds `position`), else why the primary answers instead."""
        if replayed is None:
            standby.set_aside("promoted", self.retry_s, "pg_is_in_recovery() is false")
            return "promoted"
        if replayed >= position:
            return "standby"
        if time.monotonic() < standby.impatient_until or self.wait_s <= 0:
            return "behind"
        deadline = time.monotonic() + self.wait_s
        pause = FIRST_PAUSE_S
        try:
            # pauses double (1, 2, 4 ... ms): a standby a few ms behind costs a few ms, one seconds
            # behind a handful of checks before the wait runs out
            while (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(min(pause, left))
                pause *= 2
                if int(await conn.fetchval(REPLAYED, timeout=CHECK_TIMEOUT_S)) >= position:
                    return "waited"
        except Exception as exc:
            standby.set_aside("unavailable", self.retry_s, type(exc).__name__)
            return "unavailable"
        standby.impatient_until = time.monotonic() + IMPATIENT_S
        return "behind"


async def _release_quietly(pool: Any, conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        await pool.release(conn)


async def open_read_pools(
    primary: Any,
    urls: Sequence[str],
    *,
    max_size: int,
    statement_timeout_ms: int,
    wait_s: float,
    retry_s: float,
) -> ReadPools:
    """The standbys' pools beside the primary's (none connects yet: a standby down at start-up is
    skipped like one lost later, and the service starts)."""
    standbys = []
    for url in urls:
        pool = await create_pool(
            url,
            min_size=0,
            max_size=max_size,
            statement_timeout_ms=statement_timeout_ms,
            command_timeout_s=statement_timeout_ms / 1000 + 5,
        )
        standbys.append(Standby(describe_url(url), pool))
    logger.info("Read standbys: %s", ", ".join(s.name for s in standbys))
    async with primary.acquire() as conn:
        mode = await conn.fetchval(COMMIT_MODE)
    if mode == "off":
        # an acknowledged commit may then lie past the flushed position for up to wal_writer_delay:
        # a read right after it could miss it on a standby
        logger.error(
            "Read standbys: the primary runs with synchronous_commit = off for this role, so a "
            "search right after an upload may miss it on a standby; set it to on (the default)"
        )
    return ReadPools(primary, standbys, wait_s=wait_s, retry_s=retry_s)
