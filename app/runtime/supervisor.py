"""The database supervisor: notices an outage, restarts the embedded PostgreSQL, resets the pool.

One background task per service. It checks the database every `interval_s` while it is up (a
fresh connection and `SELECT 1`, never one from the request pool, which may simply be busy) and
every `down_interval_s` while it is down; a request that meets a connection-class error wakes it at
once (`report_failure`, or the pool through the `FailureAlarm` both are built with). With the
embedded server it also looks at the server process itself, and starts it again (same data folder,
same port) when it died. When the database answers again after an outage, the pool is reset: every
connection from before is replaced, so none that is half-open (an external server that restarted,
or moved behind the same name) is used again.

Requests never wait for it: while the database is down they fail fast with 503 from the error
handler (app/main.py), and `/health` (`healthy`) answers DOWN from `status.up` at once; while it is
up, `healthy` asks the database through the pool, and a failure wakes the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg

from app.errors import database_unavailable
from app.runtime.postgres import EmbeddedPostgres
from app.store.db import ping

logger = logging.getLogger(__name__)


@dataclass
class DatabaseStatus:
    """What the supervisor knows, for /health, /metrics and the admin status."""

    up: bool = True
    outages: int = 0
    restarts: int = 0
    last_outage_s: float | None = None
    last_error: str | None = None


class FailureAlarm:
    """How a failure reaches the supervisor: made first, so the pool it watches can report to it."""

    def __init__(self) -> None:
        self.rung = asyncio.Event()

    def report(self, exc: BaseException | None = None) -> None:
        """A connection-class error (or None: a failure already judged so): wake the supervisor."""
        if exc is not None and not database_unavailable(exc):
            return
        self.rung.set()


class DatabaseSupervisor:
    """Watch the database of one service; restart the embedded server; reset the pool after outages."""

    def __init__(
        self,
        dsn: str,
        pool: asyncpg.Pool,
        *,
        embedded: EmbeddedPostgres | None = None,
        interval_s: float = 5.0,
        down_interval_s: float = 0.5,
        probe_timeout_s: float = 2.0,
        on_change: Callable[[DatabaseStatus], None] | None = None,
        alarm: FailureAlarm | None = None,
    ) -> None:
        self.dsn = dsn
        self.pool = pool
        self.embedded = embedded
        self.interval_s = interval_s
        self.down_interval_s = down_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.on_change = on_change
        self.status = DatabaseStatus()
        self.alarm = alarm or FailureAlarm()
        self._task: asyncio.Task[None] | None = None
        self._down_since: float | None = None
        self._last_restart = 0.0

    @property
    def up(self) -> bool:
        """True unless the last check found the database unreachable."""
        return self.status.up

    def start(self) -> None:
        """Start watching (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="database-supervisor")

    async def close(self) -> None:
        """Stop watching; never restarts anything afterwards."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def report_failure(self, exc: BaseException | None = None) -> None:
        """A request met a connection-class error: check now rather than at the next tick."""
        self.alarm.report(exc)

    async def _run(self) -> None:
        while True:
            delay = self.interval_s if self.status.up else self.down_interval_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.alarm.rung.wait()
            self.alarm.rung.clear()
            try:
                await self.check()
            except Exception:  # the watcher must outlive any failure of its own
                logger.exception("Database supervisor check failed")

    async def check(self) -> bool:
        """One check: restart a dead embedded server, probe, and reset the pool on recovery."""
        if self.embedded is not None and not await asyncio.to_thread(self.embedded.is_running):
            self._mark_down("the embedded PostgreSQL is not running")
            if time.monotonic() - self._last_restart < self.down_interval_s:
                return False  # failing requests wake us often: one restart attempt per interval
            self._last_restart = time.monotonic()
            try:
                started = await asyncio.to_thread(self.embedded.restart)
            except Exception as exc:  # e.g. its old processes still hold shared memory: next tick
                logger.warning("Could not restart the embedded PostgreSQL yet: %s", type(exc).__name__)
                return False
            if started:
                self.status.restarts += 1
                logger.warning("Restarted the embedded PostgreSQL on port %s", self.embedded.port)
        error = await self._probe()
        if error is not None:
            self._mark_down(error)
            return False
        if not self.status.up:
            await self._recovered()
        return True

    async def healthy(self, timeout_s: float) -> bool:
        """For /health: False while the database is known down, else whether a pool connection answers."""
        if not self.status.up:
            return False
        try:
            async with asyncio.timeout(timeout_s):
                await ping(self.pool, timeout_s=timeout_s)
        except Exception as exc:  # any failure to reach it means DOWN; the reason goes to the log only
            logger.warning("Health check failed: database unreachable (%s)", type(exc).__name__)
            self.report_failure()
            return False
        return True

    async def _probe(self) -> str | None:
        """None when the database answers `SELECT 1` on a fresh connection, else why not."""
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                conn = await asyncpg.connect(self.dsn, timeout=self.probe_timeout_s)
                try:
                    await conn.fetchval("SELECT 1")
                finally:
                    await conn.close(timeout=self.probe_timeout_s)
        except TimeoutError:
            return f"no answer within {self.probe_timeout_s:g} s"
        except Exception as exc:  # any failure to reach it counts; only its type is logged
            return type(exc).__name__
        return None

    def _mark_down(self, reason: str) -> None:
        self.status.last_error = reason
        if not self.status.up:
            return
        self._down_since = time.monotonic()
        self.status.up = False
        self.status.outages += 1
        logger.error("Database unavailable (%s): requests answer 503 until it is back", reason)
        self._notify()

    async def _recovered(self) -> None:
        reset: Callable[[], Awaitable[None]] | None = getattr(self.pool, "reset", None)
        try:
            if reset is not None:
                await reset()
            else:  # a plain asyncpg pool
                await self.pool.expire_connections()
        except Exception:
            logger.exception("Pool reset failed")
        now = time.monotonic()
        self.status.last_outage_s = now - (self._down_since or now)
        self.status.up = True
        self.status.last_error = None
        logger.warning(
            "Database available again after %.1f s; connection pool reset", self.status.last_outage_s
        )
        self._notify()

    def _notify(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change(self.status)
            except Exception:
                logger.exception("Database status listener failed")
