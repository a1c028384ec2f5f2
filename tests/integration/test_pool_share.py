"""The service's pool on a real server: `/query_v2`'s cap on connections (`PoolShare`) leaves the
rest to other requests, and a released connection comes back clean without a reset query."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.config import Settings
from app.errors import DatabaseUnavailable
from app.store.db import PoolShare, create_pool, pool_share
from tests.fixtures.service import Database

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def pool(database: Database) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database.dsn, min_size=1, max_size=4)
    assert p is not None
    try:
        yield p
    finally:
        await p.close()


async def test_the_share_holds_at_most_its_limit_and_the_pool_keeps_the_rest(pool: asyncpg.Pool) -> None:
    share = PoolShare(pool, 2)
    inside = 0
    most = 0
    release = asyncio.Event()
    entered = asyncio.Event()

    async def hold() -> int:
        nonlocal inside, most
        async with share.acquire(timeout=30) as conn:
            inside += 1
            most = max(most, inside)
            if inside == 2:
                entered.set()
            await release.wait()
            inside -= 1
            return int(await conn.fetchval("SELECT 1"))

    holders = [asyncio.create_task(hold()) for _ in range(5)]
    await entered.wait()
    # the share is full; a request outside it still gets one of the pool's other connections
    async with pool.acquire(timeout=5) as conn:
        assert await conn.fetchval("SELECT 2") == 2
    assert inside == 2
    release.set()
    assert await asyncio.gather(*holders) == [1] * 5
    assert most == 2


async def test_a_full_share_times_out_and_gives_back_what_it_took(pool: asyncpg.Pool) -> None:
    share = PoolShare(pool, 1)
    release = asyncio.Event()
    entered = asyncio.Event()

    async def hold() -> None:
        async with share.acquire(timeout=30):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await entered.wait()
    with pytest.raises(DatabaseUnavailable, match=r"No database connection became free within 0\.05 s"):
        async with share.acquire(timeout=0.05):
            pass
    release.set()
    await holder
    async with share.acquire(timeout=5) as conn:  # the share's slot came back
        assert await conn.fetchval("SELECT 3") == 3


async def test_a_slot_is_free_once_its_caller_is_done_while_the_pool_takes_the_connection_back(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = PoolShare(pool, 1)
    returning = asyncio.Event()
    gate = asyncio.Event()
    release = asyncpg.Pool.release

    async def slow_release(
        self: asyncpg.Pool,
        conn: asyncpg.Connection,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's signature
    ) -> None:
        returning.set()
        await gate.wait()  # the pool's own release, held back
        await release(self, conn, timeout=timeout)

    monkeypatch.setattr(asyncpg.Pool, "release", slow_release)

    entered = asyncio.Event()

    async def done_at_once() -> None:
        async with share.acquire(timeout=5) as conn:
            await conn.fetchval("SELECT 1")

    async def next_caller() -> None:
        async with share.acquire(timeout=5) as conn:
            entered.set()
            await conn.fetchval("SELECT 2")

    first = asyncio.create_task(done_at_once())
    second: asyncio.Task[None] | None = None
    try:
        await returning.wait()
        second = asyncio.create_task(next_caller())
        # the share's only slot is free while the first connection is still on its way back
        async with asyncio.timeout(5):
            await entered.wait()
        assert not first.done()
    finally:
        gate.set()
        await asyncio.gather(first, *([second] if second is not None else []))
    async with share.acquire(timeout=5) as conn:  # every slot came back
        assert await conn.fetchval("SELECT 4") == 4


def test_query_v2_gets_all_but_a_reserve_of_ten_and_at_least_one_connection() -> None:
    assert pool_share(Settings.model_fields["db_pool_max_size"].default) == 20  # the default: twenty at once
    assert pool_share(40) == 30
    assert pool_share(20) == 10
    assert pool_share(5) == 3  # a small pool keeps half for the rest
    assert pool_share(2) == 1
    assert pool_share(1) == 1


async def test_a_released_connection_is_reused_without_a_reset_query_and_out_of_any_transaction(
    database: Database,
) -> None:
    pool = await create_pool(
        database.dsn, min_size=1, max_size=1, statement_timeout_ms=5000, command_timeout_s=5.0
    )
    sent: list[str] = []
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            # a transaction a caller left open (not through asyncpg's transaction manager)
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock(4242)")
            assert conn.is_in_transaction()
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid  # the same session
            assert not conn.is_in_transaction()
            # its transaction's lock went with the rollback
            assert await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0
            # the session's settings are the connection's own (statement_timeout from create_pool)
            assert await conn.fetchval("SHOW statement_timeout") == "5s"
    finally:
        await pool.close()
    assert "ROLLBACK" in sent
    assert not [q for q in sent if "RESET ALL" in q or "pg_advisory_unlock_all" in q]
