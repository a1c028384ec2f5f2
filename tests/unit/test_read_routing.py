"""`ReadPools` (app/store/standby.py) on fake servers: which server a read goes to, and why.

The real standby (lagging, stopped, promoted) is tests/integration/test_read_standby.py; these pin the
rules it cannot time exactly: a short wait that ends on the standby, the second read after a wait
ran out not waiting again, a failed standby left alone, a read failing on the standby asked again.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import asyncpg
import pytest

from app.store.standby import ReadPools, Standby, open_read_pools


class FakeServer:
    """A server's answers: its WAL position (primary) or replay positions in turn (standby)."""

    def __init__(self, name: str, *, replayed: list[int] | None = None, position: int = 100) -> None:
        self.name = name
        self.replayed = replayed or [position]
        self.position = position
        self.in_recovery = True
        self.down = False
        self.asked = 0  # position checks answered
        self.commit_mode = "on"

    def replay(self) -> int:
        self.asked += 1
        return self.replayed.pop(0) if len(self.replayed) > 1 else self.replayed[0]


class FakeConn:
    def __init__(self, server: FakeServer) -> None:
        self.server = server

    async def fetchrow(self, sql: str) -> tuple[bool, int]:
        return self.server.in_recovery, self.server.replay()

    async def fetchval(self, sql: str, timeout: float | None = None) -> int | str:  # noqa: ASYNC109
        if "pg_current_wal_flush_lsn" in sql:
            return self.server.position
        if "synchronous_commit" in sql:
            return self.server.commit_mode
        return self.server.replay()


class FakeAcquire:
    """asyncpg's acquire: awaited (the standby's) or used with `async with` (the primary's)."""

    def __init__(self, pool: FakePool) -> None:
        self.pool = pool

    def __await__(self) -> Generator[Any, None, FakeConn]:
        return self._get().__await__()

    async def _get(self) -> FakeConn:
        self.pool.acquired += 1
        if self.pool.server.down:
            raise ConnectionRefusedError
        return FakeConn(self.pool.server)

    async def __aenter__(self) -> FakeConn:
        return await self._get()

    async def __aexit__(self, *exc: object) -> None:
        return None


class FakePool:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.acquired = 0
        self.released = 0

    def acquire(self, timeout: float | None = None) -> FakeAcquire:
        return FakeAcquire(self)

    async def release(self, conn: FakeConn) -> None:
        self.released += 1


def pools(standby: FakeServer, *, wait_s: float = 0.05) -> tuple[ReadPools, FakePool]:
    """Reads over a primary at WAL position 100 and `standby`."""
    pool = FakePool(standby)
    return ReadPools(
        FakePool(FakeServer("primary")), [Standby("s1:5432", pool)], wait_s=wait_s, retry_s=60
    ), pool


async def where(conn: FakeConn) -> str:
    return conn.server.name


async def test_a_caught_up_standby_answers() -> None:
    reads, pool = pools(FakeServer("standby", replayed=[100]))
    assert await reads.read(where) == "standby"
    assert pool.released == 1


async def test_a_standby_a_few_checks_behind_is_waited_for() -> None:
    reads, _ = pools(FakeServer("standby", replayed=[90, 95, 100]))
    assert await reads.read(where) == "standby"


async def test_after_a_wait_ran_out_the_next_read_does_not_wait() -> None:
    server = FakeServer("standby", replayed=[90])
    reads, pool = pools(server, wait_s=0.02)
    assert await reads.read(where) == "primary"
    polls = server.asked
    assert polls > 2  # 1 + 2 + 4 + 8 ms: several checks within 20 ms
    assert await reads.read(where) == "primary"
    assert server.asked == polls + 1  # one check, no wait
    assert pool.released == pool.acquired == 2


async def test_an_unreachable_standby_is_left_alone() -> None:
    server = FakeServer("standby")
    server.down = True
    reads, pool = pools(server)
    assert await reads.read(where) == "primary"
    assert await reads.read(where) == "primary"
    assert pool.acquired == 1  # set aside for retry_s after the first failure


async def test_a_promoted_standby_is_never_read() -> None:
    server = FakeServer("standby", replayed=[100])
    server.in_recovery = False
    reads, pool = pools(server)
    assert await reads.read(where) == "primary"
    async with reads.acquire() as conn:
        assert conn.server.name == "primary"
    assert pool.acquired == 1


async def test_a_read_failing_on_the_standby_is_asked_again_on_the_primary() -> None:
    reads, pool = pools(FakeServer("standby"))

    async def lost_on_standby(conn: FakeConn) -> str:
        if conn.server.name == "standby":
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        return conn.server.name

    assert await reads.read(lost_on_standby) == "primary"
    assert await reads.read(where) == "primary"  # set aside: the connection was lost
    assert pool.acquired == 1


async def test_a_connection_asyncpg_gave_back_after_the_server_closed_it_is_retried() -> None:
    reads, _ = pools(FakeServer("standby"))

    async def released_under_us(conn: FakeConn) -> str:
        if conn.server.name == "standby":
            raise asyncpg.InterfaceError(
                "cannot call Connection.fetch(): connection has been released back to the pool"
            )
        return conn.server.name

    assert await reads.read(released_under_us) == "primary"


async def test_a_wrong_request_is_not_asked_twice() -> None:
    reads, _ = pools(FakeServer("standby"))
    calls: list[str] = []

    async def wrong(conn: FakeConn) -> str:
        calls.append(conn.server.name)
        raise ValueError("a bad request, not a bad standby")

    with pytest.raises(ValueError):
        await reads.read(wrong)
    assert calls == ["standby"]


@pytest.mark.parametrize(("mode", "warned"), [("on", False), ("local", False), ("off", True)])
async def test_a_primary_acknowledging_unwritten_commits_is_reported(
    caplog: pytest.LogCaptureFixture, mode: str, warned: bool
) -> None:
    primary = FakeServer("primary")
    primary.commit_mode = mode
    with caplog.at_level("ERROR", logger="app.store.standby"):
        await open_read_pools(
            FakePool(primary), [], max_size=1, statement_timeout_ms=1000, wait_s=0, retry_s=1
        )
    assert ("synchronous_commit = off" in caplog.text) is warned
