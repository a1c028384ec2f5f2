"""Read standbys (DATABASE_READ_URLS) against a real streaming standby: an upload acknowledged by
`/embed` is found by the very next search, over real HTTP, while the standby is caught up, lagged
by two seconds on purpose, stopped, and promoted; a service without read URLs keeps its one pool.

The module starts one primary and one standby (`pg_basebackup -R`, tests/fixtures/standby.py) and one
service on them; the tests run in file order, the promotion last (it ends the standby's life as one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
import uvicorn

from app.main import create_app
from app.metrics import REGISTRY
from app.services import Services
from tests.contract.helpers import file_ids_of, query, upload
from tests.fixtures.patience import ceiling, until
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app
from tests.fixtures.standby import StreamingPair, streaming_pair

pytestmark = pytest.mark.slow

USER = f"user-{uuid.uuid4().hex[:8]}"
ADMIN = f"admin-{uuid.uuid4().hex[:8]}"
AGENT = f"agent_{uuid.uuid4().hex[:12]}"  # evidence search (/query_v2) is on for this namespace
OUTCOMES = ("standby", "waited", "behind", "unavailable", "promoted", "retried")


def routed() -> dict[str, float]:
    """How many reads each outcome has counted so far (ragoverlay_standby_reads_total)."""
    return {
        outcome: REGISTRY.get_sample_value("ragoverlay_standby_reads_total", {"outcome": outcome}) or 0.0
        for outcome in OUTCOMES
    }


def since(before: dict[str, float]) -> dict[str, float]:
    """The outcomes counted after `before`."""
    now = routed()
    return {outcome: now[outcome] - before[outcome] for outcome in OUTCOMES}


@dataclass
class Served:
    """The service on the pair, over real HTTP, and its services."""

    client: httpx.AsyncClient
    services: Services


@dataclass
class Tally:
    """What an upload-then-search loop saw."""

    rounds: int = 0
    errors: int = 0  # an upload or a read that did not answer 200
    missing: int = 0  # a read that did not find the file just acknowledged


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingPair]:
    """One primary and its streaming standby for the module."""
    with streaming_pair() as started:
        yield started


@pytest.fixture(scope="module")
async def served(pair: StreamingPair, settings_factory: SettingsFactory) -> AsyncIterator[Served]:
    """A service on the pair's primary with the standby as its read URL, behind uvicorn on a port."""
    settings = settings_factory(
        database_url=pair.primary.dsn,
        database_read_urls=[pair.standby_dsn],
        read_standby_retry_s=0.2,  # a stopped standby is asked again soon, so the test sees it come back
        v2_namespace_ids=[AGENT],
        admin_user_ids=[ADMIN],
    )
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: _started(server, task), what="uvicorn on the standby service", within_s=120)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=ceiling(60)) as client:
            yield Served(client, app.state.services)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, ceiling(30))


async def _started(server: uvicorn.Server, task: asyncio.Task[None]) -> bool:
    assert not task.done(), "the server did not start"
    return bool(server.started)


async def upload_then_search(client: httpx.AsyncClient, rounds: int) -> Tally:
    """Upload a file, then at once search it and read its text; count what was not found."""
    tally = Tally()
    headers = auth(USER)
    for _ in range(rounds):
        file_id, word = new_id("standby"), f"marker{uuid.uuid4().hex[:10]}"
        stored = await upload(client, file_id, "note.txt", f"The {word} report says hello.".encode(), headers)
        found = await query(client, word, file_id, headers, k=1)
        text = await client.get(f"/documents/{file_id}/context", headers=headers)
        tally.rounds += 1
        if {stored.status_code, found.status_code, text.status_code} != {200}:
            tally.errors += 1
            continue
        if file_id not in file_ids_of(found.json()) or word not in text.text:
            tally.missing += 1
    return tally


async def _superuser(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn)


async def test_caught_up_standby_answers_reads_and_finds_every_upload(served: Served) -> None:
    before, spent = routed(), _check_seconds()
    tally = await upload_then_search(served.client, 10)
    counted = since(before)
    assert (tally.errors, tally.missing) == (0, 0), tally
    # the standby answered reads, else this test would prove nothing about it
    assert counted["standby"] + counted["waited"] > 0, counted
    total, reads = (now - then for now, then in zip(_check_seconds(), spent, strict=True))
    print(f"caught up: {counted}; check mean {total / max(reads, 1) * 1000:.2f} ms over {reads:.0f} reads")


def _check_seconds() -> tuple[float, float]:
    """ragoverlay_standby_check_seconds so far: (sum, count)."""
    total = REGISTRY.get_sample_value("ragoverlay_standby_check_seconds_sum") or 0.0
    return total, REGISTRY.get_sample_value("ragoverlay_standby_check_seconds_count") or 0.0


async def test_query_v2_reads_on_the_standby_and_finds_each_searchable_upload(served: Served) -> None:
    headers = auth(USER)
    first = await _heater(served.client, headers)
    assert first.status_code == 200, first.text

    async def active() -> bool:  # the namespace's first upload queued its backfill: a run is active
        status = await served.client.get("/v2/status", headers=auth(ADMIN))
        assert status.status_code == 200, status.text
        return any(run["namespace"] == AGENT for run in status.json()["active_runs"])

    await until(active, what=f"an active V2 run of {AGENT}", within_s=120)
    before, asked = routed(), 0
    for _ in range(3):
        stored = await _heater(served.client, headers)
        assert stored.status_code == 200, stored.text
        if not stored.json()["evidence"]["searchable"]:
            continue  # staged by a job instead: /query_v2 serves the version before it meanwhile
        file_id, word = stored.json()["file_id"], stored.request.headers["x-test-word"]
        body = {"query": f"weight of the {word} heater", "file_ids": [file_id], "entity_id": AGENT}
        answer = await served.client.post("/query_v2", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        assert file_id in {item["file_id"] for item in answer.json()["results"]}, answer.text
        asked += 1
    assert asked > 0  # at least one upload was searchable at once, else nothing was checked
    counted = since(before)
    assert counted["standby"] + counted["waited"] > 0, counted


async def _heater(client: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    """Upload a one-heater manual into AGENT's knowledge base (the word goes back in a header)."""
    word = f"Heater{uuid.uuid4().hex[:8]}"
    text = f"# {word} heater\n\n## Ratings\n\nThe {word} heater weighs 12 kg and gives 2.8 kW.\n"
    return await upload(
        client,
        new_id("heater"),
        "manual.md",
        text.encode(),
        {**headers, "x-test-word": word},
        entity_id=AGENT,
    )


async def test_standby_lagging_two_seconds_costs_no_missing_answer(
    served: Served, pair: StreamingPair
) -> None:
    conn = await _superuser(pair.standby_superuser_dsn)
    try:
        await conn.execute("ALTER SYSTEM SET recovery_min_apply_delay = '2s'")
        await conn.execute("SELECT pg_reload_conf()")
        await _assert_lag_at_least(pair, seconds=1.0)
        before = routed()
        tally = await upload_then_search(served.client, 5)
        counted = since(before)
        print(f"lagged: {tally}; {counted}")
        assert (tally.errors, tally.missing) == (0, 0), tally
        # the reads right after each upload found the standby behind and went to the primary
        assert counted["behind"] >= tally.rounds, counted
    finally:
        await conn.execute("ALTER SYSTEM RESET recovery_min_apply_delay")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.close()


async def _assert_lag_at_least(pair: StreamingPair, *, seconds: float) -> None:
    """A commit on the primary takes `seconds` or more to be replayed on the standby."""
    primary = await asyncpg.connect(pair.primary.superuser_dsn)
    standby = await asyncpg.connect(pair.standby_superuser_dsn)
    try:
        await primary.execute("CREATE TABLE IF NOT EXISTS lag_probe (at timestamptz)")
        await primary.execute("INSERT INTO lag_probe VALUES (now())")
        target = await primary.fetchval("SELECT pg_current_wal_flush_lsn()")
        started = time.monotonic()

        async def replayed() -> bool:
            return bool(await standby.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", target))

        await until(replayed, what="the standby to replay the probe", within_s=30)
        assert time.monotonic() - started >= seconds
    finally:
        await primary.close()
        await standby.close()


async def test_stopped_standby_costs_no_errors_and_is_used_again(served: Served, pair: StreamingPair) -> None:
    file_id, word = new_id("steady"), f"marker{uuid.uuid4().hex[:10]}"
    stored = await upload(served.client, file_id, "note.txt", f"The {word} memo.".encode(), auth(USER))
    assert stored.status_code == 200, stored.text
    stop = asyncio.Event()
    # searches in flight while the standby goes down: those it cuts are asked again on the primary
    searchers = [asyncio.create_task(_search_until(served.client, word, file_id, stop)) for _ in range(4)]
    try:
        await asyncio.to_thread(pair.stop_standby)
        before = routed()
        tally = await upload_then_search(served.client, 3)
        counted = since(before)
    finally:
        stop.set()
        failed = [line for lines in await asyncio.gather(*searchers) for line in lines]
        await asyncio.to_thread(pair.start_standby)
    assert failed == [], failed
    assert (tally.errors, tally.missing) == (0, 0), tally
    assert counted["unavailable"] >= tally.rounds, counted
    assert counted["standby"] + counted["waited"] == 0, counted
    before = routed()

    async def back() -> bool:
        await upload_then_search(served.client, 1)
        return since(before)["standby"] + since(before)["waited"] > 0

    await until(back, what="reads on the restarted standby", within_s=60)


async def _search_until(client: httpx.AsyncClient, word: str, file_id: str, stop: asyncio.Event) -> list[str]:
    """Search the file until `stop`; what went wrong, one entry per failed search."""
    failed: list[str] = []
    while not stop.is_set():
        found = await query(client, word, file_id, auth(USER), k=1)
        if found.status_code != 200 or file_id not in file_ids_of(found.json()):
            failed.append(f"{found.status_code}: {found.text[:200]}")
    return failed


async def test_promoted_standby_is_never_read(served: Served, pair: StreamingPair) -> None:
    headers = auth(USER)
    file_id, word = new_id("promoted"), f"marker{uuid.uuid4().hex[:10]}"
    assert (
        await upload(served.client, file_id, "note.txt", f"The {word} memo.".encode(), headers)
    ).is_success
    before = routed()

    async def read_on_standby() -> bool:
        found = await _search_once(served.client, word, file_id)
        return found and since(before)["standby"] + since(before)["waited"] > 0

    await until(read_on_standby, what="a search of the upload answered by the standby", within_s=30)
    await asyncio.to_thread(pair.promote)
    # a write the primary never saw: the file's rows gone on the promoted server only
    conn = await _superuser(pair.standby_superuser_dsn)
    try:
        await until(lambda: _writable(conn), what="the promoted standby to take writes", within_s=30)
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE cmetadata->>'file_id' = $1", file_id)
    finally:
        await conn.close()
    before = routed()
    for _ in range(3):
        assert await _search_once(served.client, word, file_id)
    counted = since(before)
    assert counted["standby"] + counted["waited"] == 0, counted
    assert counted["promoted"] >= 1, counted
    # set aside once found promoted: the reads after it go straight to the primary
    assert counted["promoted"] + counted["unavailable"] >= 3, counted


async def _search_once(client: httpx.AsyncClient, word: str, file_id: str) -> bool:
    found = await query(client, word, file_id, auth(USER), k=1)
    return found.status_code == 200 and file_id in file_ids_of(found.json())


async def _writable(conn: asyncpg.Connection) -> bool:
    return not await conn.fetchval("SELECT pg_is_in_recovery()")


async def test_without_read_urls_one_pool_serves_every_read(settings_factory: SettingsFactory) -> None:
    before = routed()
    async with running_app(settings_factory()) as client:
        services = resources(client)
        assert services.search.pool is services.pool  # no ReadPools in between
        file_id, word = new_id("one-pool"), f"marker{uuid.uuid4().hex[:10]}"
        stored = await upload(client, file_id, "note.txt", f"The {word} memo.".encode(), auth(USER))
        assert stored.status_code == 200
        assert await _search_once(client, word, file_id)
    assert since(before) == dict.fromkeys(OUTCOMES, 0.0)
