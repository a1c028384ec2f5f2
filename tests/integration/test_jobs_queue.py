"""The job queue against the real PostgreSQL: claims, retries, deadlines, reclaims, two workers.

Each test has a queue of its own on the session database and registers its own kinds, so these
tests know nothing of the service's kinds (those are tested through the routes).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.clients.embeddings import build_embedder
from app.clients.http import build_http_client
from app.config import load_settings
from app.errors import NoExtractableText
from app.ingest.limits import ParseLimits
from app.ingest.worker import parse_in_worker
from app.jobs.policy import RetryPolicy
from app.jobs.registry import JobRegistry, JobResult, PermanentJobError, Progress, ReleaseJob, current_job_id
from app.jobs.service import JobService
from app.jobs.worker import JobWorker
from app.store.db import bootstrap
from app.store.jobs import JobRow
from tests.fixtures.fake_providers import FakeProvider
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.patience import until as wait_async
from tests.fixtures.service import Database
from tests.fixtures.slow_loaders import steady

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[dict[str, Any], Progress], Awaitable[Any]]


@pytest.fixture(scope="module")
async def schema(database: Database) -> str:
    """The session database with the service's schema (migrations and SQL code)."""
    await bootstrap(database.dsn, "jobs-tests")
    return database.dsn


@pytest.fixture
async def pool(schema: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(schema, min_size=1, max_size=4)
    assert p is not None
    try:
        yield p
    finally:
        await p.close()


class Queue:
    """A queue of its own, its registry, its workers (stopped at the end)."""

    def __init__(self, dsn: str, pool: asyncpg.Pool) -> None:
        self.dsn = dsn
        self.name = f"test-{uuid.uuid4().hex[:10]}"
        self.registry = JobRegistry()
        self.policy = RetryPolicy(retry_max=2, base_ms=100, max_ms=1000)
        self.service = JobService(pool, self.name, self.registry, self.policy)
        self.workers: list[JobWorker] = []

    async def worker(self, *, concurrency: int = 2, timeout_s: float = 30.0, stale_s: int = 60) -> JobWorker:
        w = JobWorker(
            dsn=self.dsn,
            queue=self.name,
            registry=self.registry,
            policy=self.policy,
            concurrency=concurrency,
            job_timeout_s=timeout_s,
            stale_timeout_s=stale_s,
            poll_s=0.05,
        )
        await w.start()
        self.workers.append(w)
        if self.service.worker is None:
            self.service.worker = w
        return w

    async def job(self, job_id: int) -> JobRow:
        row = await self.service.get(job_id)
        assert row is not None
        return row

    async def until(self, job_id: int, check: Callable[[JobRow], bool], within: float = 20.0) -> JobRow:
        async def there() -> JobRow | None:
            row = await self.job(job_id)
            return row if check(row) else None

        found = await wait_async(there, what=f"job {job_id} to get there", within_s=within, every_s=0.05)
        assert found is not None
        return found


@pytest.fixture
async def queue(schema: str, pool: asyncpg.Pool) -> AsyncIterator[Queue]:
    q = Queue(schema, pool)
    try:
        yield q
    finally:
        for w in q.workers:
            await w.stop(grace_s=2)


def crash(worker: JobWorker) -> None:
    """What kill -9 does to a worker, in-process: it stops at once, writes nothing, its session ends."""
    assert worker._loop_task is not None
    worker._loop_task.cancel()
    for run in worker._runs.values():
        run.reason = "lease-lost"  # not "stopping": nothing is written back
        if run.task is not None:
            run.task.cancel()
    assert worker.lease.conn is not None
    worker.lease.conn.terminate()
    worker.lease.conn = None


async def test_a_job_runs_once_reports_progress_and_keeps_its_result(queue: Queue) -> None:
    release = asyncio.Event()
    calls: list[dict[str, Any]] = []

    async def handler(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
        calls.append(payload)
        progress(3, 10, "three of ten")
        await release.wait()
        return {"echo": payload["n"]}

    queue.registry.register("probe", handler)
    await queue.worker()
    added = await queue.service.enqueue("probe", {"n": 7})
    running = await queue.until(added.id, lambda r: r.status == "running" and r.progress_done == 3)
    assert (running.progress_total, running.progress_note, running.attempts) == (10, "three of ten", 1)
    assert running.running_s is not None and running.worker == queue.workers[0].name
    stats = await queue.service.queue_stats()
    assert stats.counts.running == 1 and [r.id for r in stats.running] == [added.id]
    release.set()
    done = await queue.until(added.id, lambda r: r.status == "done")
    assert done.result == {"echo": 7} and done.attempts == 1 and done.finished_at is not None
    await asyncio.sleep(0.3)
    assert calls == [{"n": 7}]


async def test_failures_back_off_then_park_and_only_a_manual_retry_runs_it_again(queue: Queue) -> None:
    starts: list[float] = []

    async def failing(payload: dict[str, Any], progress: Progress) -> None:
        starts.append(time.monotonic())
        raise RuntimeError(f"provider down (run {len(starts)})")

    queue.registry.register("flaky", failing)
    await queue.worker()
    added = await queue.service.enqueue("flaky", {})
    parked = await queue.until(added.id, lambda r: r.status == "failed")
    # INDEXER_RETRY_MAX=2: three runs; waits base·2^(n-1) = 0.1 s then 0.2 s
    assert len(starts) == 3 and parked.attempts == 3 and parked.failures == 3
    assert starts[1] - starts[0] >= 0.1 and starts[2] - starts[1] >= 0.2
    assert parked.last_error == "RuntimeError: provider down (run 3)"
    await asyncio.sleep(0.5)
    assert len(starts) == 3  # parked: nothing runs it on its own
    assert await queue.service.retry(added.id) == "queued"
    await queue.until(added.id, lambda r: r.status == "failed" and r.failures == 6)
    assert len(starts) == 6
    assert await queue.service.retry(added.id + 10_000_000) == "missing"


async def test_a_permanent_failure_parks_at_once(queue: Queue) -> None:
    async def unreadable(payload: dict[str, Any], progress: Progress) -> None:
        raise NoExtractableText()

    async def bad_input(payload: dict[str, Any], progress: Progress) -> None:
        raise PermanentJobError("the file id is gone")

    queue.registry.register("unreadable", unreadable)
    queue.registry.register("bad-input", bad_input)
    await queue.worker()
    first = await queue.service.enqueue("unreadable", {})
    second = await queue.service.enqueue("bad-input", {})
    row = await queue.until(first.id, lambda r: r.status == "failed")
    assert (
        row.attempts == 1 and row.last_error is not None and row.last_error.startswith("NoExtractableText: ")
    )
    row = await queue.until(second.id, lambda r: r.status == "failed")
    assert row.attempts == 1 and row.last_error == "permanent: the file id is gone"
    assert await queue.service.retry(first.id) == "queued"  # by hand it may try again
    assert await queue.service.retry(second.id) in ("queued", "running", "failed")


async def test_a_released_job_comes_back_later_uncounted_and_a_handler_knows_its_job(queue: Queue) -> None:
    seen: list[tuple[int | None, float]] = []

    async def picky(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
        seen.append((current_job_id(), time.monotonic()))
        if len(seen) == 1:
            raise ReleaseJob(0.5, "not this replica's")
        return {"ok": True}

    queue.registry.register("picky", picky)
    await queue.worker()
    added = await queue.service.enqueue("picky", {})
    done = await queue.until(added.id, lambda r: r.status == "done")
    # released: not a failure, not an attempt, and not taken straight back
    assert (
        done.attempts == 1 and done.failures == 0 and done.last_error is None and done.result == {"ok": True}
    )
    assert [job for job, _ in seen] == [added.id, added.id] and current_job_id() is None
    assert seen[1][1] - seen[0][1] >= 0.5


async def test_the_deadline_cancels_the_embedding_request_on_the_shared_client(
    queue: Queue, fake_provider: FakeProvider
) -> None:
    """A provider that hangs: the job's deadline cancels the HTTP call itself, not only the job."""
    fake_provider.delay = 600.0  # never answers while the test runs
    settings = load_settings(
        _env_file=None,
        embeddings_provider="openai",
        openai_api_key="sk-test",
        openai_base_url=f"{fake_provider.url}/v1",
        embedding_max_retries=0,
        embedding_timeout_s=60,
    )
    http = build_http_client(timeout_s=60)
    embedder = build_embedder(settings, http_client=http)
    seen: list[str] = []

    async def embed(payload: dict[str, Any], progress: Progress) -> None:
        try:
            await embedder.embed_documents(["a chunk to embed"])
        except asyncio.CancelledError:
            seen.append("cancelled at the HTTP call")
            raise

    queue.registry.register("embed", embed)
    await queue.worker(timeout_s=0.5)
    started = time.monotonic()
    added = await queue.service.enqueue("embed", {})
    row = await queue.until(
        added.id, lambda r: r.status == "queued" and r.attempts == 1 and r.last_error is not None
    )
    took = time.monotonic() - started
    assert took < ceiling(10), out_of_time("the job's 0.5 s deadline to cut the hanging call", took)
    assert row.last_error is not None and row.last_error.startswith("deadline: ")
    assert seen == ["cancelled at the HTTP call"]
    assert len(fake_provider.requests) == 1 and fake_provider.requests[0].path == "/v1/embeddings"
    await embedder.aclose()
    await http.aclose()


async def test_a_run_that_keeps_progressing_outlives_its_deadline(queue: Queue) -> None:
    """The deadline is 0.5 s without progress, not 0.5 s in all: a run that reports a new value
    every 20 ms for four deadlines' time ends done, in its first attempt."""
    timeout_s = 0.5

    async def progressing(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        started, step = loop.time(), 0
        while loop.time() - started < 4 * timeout_s:
            step += 1
            progress(step, None, "working")
            await asyncio.sleep(0.02)
        return {"steps": step, "ran_s": loop.time() - started}

    queue.registry.register("long", progressing)
    await queue.worker(timeout_s=timeout_s)
    added = await queue.service.enqueue("long", {})
    done = await queue.until(added.id, lambda r: r.status in ("done", "failed") or r.last_error is not None)
    assert (done.status, done.attempts, done.last_error) == ("done", 1, None)
    assert done.result is not None and done.result["ran_s"] >= 4 * timeout_s


async def test_a_run_that_stops_progressing_is_cancelled_and_says_so(queue: Queue) -> None:
    """Progress first, then the same value again and again (a handler stuck in a loop that reports):
    no new value, no progress; the run is cancelled a deadline after its last advance."""
    advanced_at: list[float] = []
    cancelled_at: list[float] = []

    async def stuck(payload: dict[str, Any], progress: Progress) -> None:
        for step in (1, 2, 3):
            progress(step, 10, "reading")
        advanced_at.append(time.monotonic())
        try:
            while True:
                progress(3, 10, "reading")
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic())
            raise

    queue.registry.register("stuck", stuck)
    await queue.worker(timeout_s=0.5)
    added = await queue.service.enqueue("stuck", {})
    # each attempt is a failed one, retried until the three are spent (INDEXER_RETRY_MAX=2)
    row = await queue.until(added.id, lambda r: r.status == "failed")
    assert row.last_error == (
        "deadline: the job made no progress for INDEXER_JOB_TIMEOUT_MS (500 ms) and was cancelled"
    )
    assert (row.attempts, row.failures, len(cancelled_at)) == (3, 3, 3)
    waited = [cancelled - advanced for advanced, cancelled in zip(advanced_at, cancelled_at, strict=True)]
    assert min(waited) >= 0.5  # each cancelled a whole deadline after its last advance


async def test_a_parse_that_advances_keeps_its_job_alive(queue: Queue, tmp_path: Path) -> None:
    """A job waiting three deadlines for a parse in the worker process, which reports nothing to the
    job itself: the parse's pages are its progress, so it ends done."""
    path = tmp_path / "long.pdf"
    path.write_text("3.0")  # seconds the stand-in loader reads pages for
    limits = ParseLimits(timeout_s=60, stall_s=1.0)  # the worker reads the pages every 0.25 s
    warm = tmp_path / "warm.txt"
    warm.write_text("warm up")
    await parse_in_worker(warm, "warm.txt", limits=ParseLimits())  # the fork server starts in ~1 s

    async def parse(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
        progress(0, None, "parsing")
        doc = await parse_in_worker(path, "long.pdf", limits=limits, loader=steady)
        return {"text": doc.text}

    queue.registry.register("parse", parse)
    await queue.worker(timeout_s=1.0)
    added = await queue.service.enqueue("parse", {})
    done = await queue.until(added.id, lambda r: r.status == "done" or r.last_error is not None)
    assert (done.status, done.attempts, done.last_error) == ("done", 1, None)
    assert done.result is not None and done.result["text"].endswith(" pages read")


async def test_two_workers_run_every_job_exactly_once(queue: Queue) -> None:
    runs: list[tuple[int, str]] = []
    active: set[int] = set()
    overlaps: list[int] = []

    async def work(payload: dict[str, Any], progress: Progress) -> None:
        n = int(payload["n"])
        if n in active:
            overlaps.append(n)
        active.add(n)
        await asyncio.sleep(0.01 + (n % 3) * 0.01)
        active.discard(n)
        runs.append((n, "ok"))

    queue.registry.register("work", work)
    await queue.worker(concurrency=3)
    await queue.worker(concurrency=3)
    ids = [(await queue.service.enqueue("work", {"n": n})).id for n in range(60)]
    for job_id in ids:
        await queue.until(job_id, lambda r: r.status == "done")
    assert sorted(n for n, _ in runs) == list(range(60)) and not overlaps
    assert all(w.claimed > 0 for w in queue.workers)  # both took a share
    assert sum(w.claimed for w in queue.workers) == 60


async def test_a_dead_workers_job_is_reclaimed_and_counted_as_an_attempt(queue: Queue) -> None:
    attempts: list[int] = []
    hold = asyncio.Event()

    async def slow(payload: dict[str, Any], progress: Progress) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await hold.wait()  # the first run never ends: its worker dies under it
        return "ok"

    queue.registry.register("slow", slow)
    first = await queue.worker(stale_s=1)
    added = await queue.service.enqueue("slow", {})
    await queue.until(added.id, lambda r: r.status == "running")
    crash(first)
    await queue.worker(stale_s=1)
    row = await queue.until(added.id, lambda r: r.status == "done")
    assert row.attempts == 2 and row.runs == 2 and row.failures == 1 and len(attempts) == 2


async def test_a_reclaimed_job_out_of_attempts_is_parked(queue: Queue) -> None:
    hold = asyncio.Event()

    async def hangs(payload: dict[str, Any], progress: Progress) -> None:
        await hold.wait()

    queue.registry.register("hangs", hangs, max_attempts=1)
    first = await queue.worker(stale_s=1)
    added = await queue.service.enqueue("hangs", {})
    await queue.until(added.id, lambda r: r.status == "running")
    crash(first)
    await queue.worker(stale_s=1)
    row = await queue.until(added.id, lambda r: r.status == "failed")
    assert (
        row.attempts == 1 and row.last_error is not None and row.last_error.startswith("abandoned: worker ")
    )


async def test_a_live_workers_job_is_never_taken_whatever_its_heartbeat_says(
    queue: Queue, pool: asyncpg.Pool
) -> None:
    release = asyncio.Event()
    runs: list[str] = []

    async def long(payload: dict[str, Any], progress: Progress) -> None:
        runs.append("run")
        await release.wait()

    queue.registry.register("long", long)
    owner = await queue.worker(stale_s=3600)
    added = await queue.service.enqueue("long", {})
    await queue.until(added.id, lambda r: r.status == "running")
    # a heartbeat an hour old, as if the owner's loop were stuck: its lock still proves it alive
    await pool.execute(
        "UPDATE ragoverlay_jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", added.id
    )
    await queue.worker(stale_s=1)
    await asyncio.sleep(2.5)
    row = await queue.job(added.id)
    assert (row.status, row.worker, row.attempts, runs) == ("running", owner.name, 1, ["run"])
    release.set()
    row = await queue.until(added.id, lambda r: r.status == "done")
    assert row.attempts == 1 and runs == ["run"]


async def test_a_broken_lease_stops_the_run_and_the_worker_takes_its_job_back(
    queue: Queue, pool: asyncpg.Pool
) -> None:
    runs: list[str] = []

    async def job(payload: dict[str, Any], progress: Progress) -> None:
        runs.append("start")
        if len(runs) == 1:
            await asyncio.sleep(3600)

    queue.registry.register("job", job)
    worker = await queue.worker(stale_s=2)  # heartbeats every 0.5 s
    added = await queue.service.enqueue("job", {})
    await queue.until(added.id, lambda r: r.status == "running")
    pid = worker.lease.conn.get_server_pid() if worker.lease.conn else None
    await pool.execute("SELECT pg_terminate_backend($1)", pid)
    row = await queue.until(added.id, lambda r: r.status == "done")
    assert row.attempts == 2 and runs == ["start", "start"]
    assert row.worker is not None and row.worker == worker.name


async def test_a_stopping_worker_gives_its_jobs_back_uncounted(queue: Queue) -> None:
    async def forever(payload: dict[str, Any], progress: Progress) -> None:
        await asyncio.sleep(3600)

    queue.registry.register("forever", forever)
    worker = await queue.worker()
    added = await queue.service.enqueue("forever", {})
    await queue.until(added.id, lambda r: r.status == "running")
    await worker.stop(grace_s=5)
    queue.workers.remove(worker)
    row = await queue.job(added.id)
    assert (row.status, row.attempts, row.worker) == ("queued", 0, None)
    assert row.last_error == "interrupted: the worker stopped"


async def test_duplicates_join_the_waiting_job(queue: Queue) -> None:
    queue.registry.register("noop", lambda payload, progress: asyncio.sleep(0))
    a = await queue.service.enqueue("noop", {"v": 1}, dedupe_key="k")
    b = await queue.service.enqueue("noop", {"v": 2}, dedupe_key="k")
    assert (a.created, b.id, b.created) == (True, a.id, False)
    assert (await queue.job(a.id)).payload == {"v": 1}
    c = await queue.service.enqueue("noop", {"v": 3}, dedupe_key="k", mode="replace")
    assert c.id == a.id and (await queue.job(a.id)).payload == {"v": 3}
    p1 = await queue.service.ensure_periodic("noop", {}, key="every", period_s=60, retry_s=5)
    p2 = await queue.service.ensure_periodic("noop", {}, key="every", period_s=60, retry_s=5)
    assert p1.created and (p2.id, p2.created) == (p1.id, False)


async def test_a_new_interval_reaches_an_existing_schedule(queue: Queue) -> None:
    """A release that changes a task's interval: the waiting row takes it, and comes no later."""
    first = await queue.service.ensure_periodic("noop", {}, key="slow", period_s=600, retry_s=5)
    async with queue.service.pool.acquire() as conn:  # as a pass of the old release leaves it
        await conn.execute(
            "UPDATE ragoverlay_jobs SET run_after = now() + interval '600 s' WHERE id = $1", first.id
        )
    before = await queue.job(first.id)
    again = await queue.service.ensure_periodic("noop", {}, key="slow", period_s=120, retry_s=7)
    after = await queue.job(first.id)
    assert again.id == first.id and not again.created
    assert (after.period_s, after.retry_s) == (120, 7)
    assert (after.run_after - before.run_after).total_seconds() < -400  # pulled in to ~120 s from now


async def test_a_periodic_job_keeps_one_row_and_stops_when_asked(queue: Queue) -> None:
    passes: list[int] = []

    async def tick(payload: dict[str, Any], progress: Progress) -> JobResult:
        passes.append(1)
        if len(passes) == 2:
            raise RuntimeError("one bad pass")
        return JobResult(result={"pass": len(passes)}, again_in=0.05, stop=len(passes) >= 4)

    queue.registry.register("tick", tick)
    await queue.worker()
    added = await queue.service.ensure_periodic("tick", {}, key="tick", period_s=3600, retry_s=0.05)
    row = await queue.until(added.id, lambda r: r.status == "done")
    assert len(passes) == 4 and row.runs == 4 and row.failures == 1 and row.result == {"pass": 4}
    assert row.max_attempts == 1 and row.period_s == 3600
    assert [j.id for j in await queue.service.list_jobs(kind="tick")] == [added.id]


async def test_a_run_whose_job_was_taken_stops_and_gives_its_lock_back(
    queue: Queue, pool: asyncpg.Pool
) -> None:
    runs: list[str] = []

    async def job(payload: dict[str, Any], progress: Progress) -> None:
        runs.append("start")
        if len(runs) == 1:
            await asyncio.sleep(3600)

    queue.registry.register("job", job)
    worker = await queue.worker(stale_s=2)  # heartbeats every 0.5 s
    added = await queue.service.enqueue("job", {})
    await queue.until(added.id, lambda r: r.status == "running")
    assert worker.lease.conn is not None
    pid = worker.lease.conn.get_server_pid()
    # changed behind the worker's back (by hand): its run must stop and free the job
    await pool.execute(
        "UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, run_after = now() + interval '3 s' "
        "WHERE id = $1",
        added.id,
    )

    async def stopped() -> bool:
        return not worker._runs

    await wait_async(stopped, what="the worker to stop the job's run", within_s=10, every_s=0.05)
    held = await pool.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND classid = 1785686643",
        pid,
    )
    assert held == 0
    row = await queue.until(added.id, lambda r: r.status == "done")
    assert runs == ["start", "start"] and row.attempts == 2
