"""The worker: claims due jobs of its queue, runs each under its deadline, and reports back.

The deadline (`INDEXER_JOB_TIMEOUT_MS`) is a limit on going without progress, not on a run's age:
each new value a handler reports (`progress(done, total, note)`), and each advance of a parse the
handler waits for (`watching_parses`), pushes it out by the whole timeout. A big file's run lasts
as long as it keeps advancing; one that stops is cancelled that long after its last progress.

One connection of its own, the lease, carries everything that touches a job's state: LISTEN for
new jobs, the claims (which take each job's session advisory lock), heartbeats with progress, the
end of every run (which releases the lock) and the reclaim of jobs whose worker is gone. Handlers
do their own work on the pool or on connections of their own.

If the lease breaks, this worker can no longer prove that its jobs are its own: it cancels every
run (a run that lost its job cannot write its outcome either: every state change names the worker
and attempt), reconnects, and takes back its abandoned jobs at once, each counted as an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import asyncpg

from app.errors import RagError
from app.ingest.limits import ParseProgress, watching_parses
from app.jobs.policy import (
    LEASE_STATEMENT_TIMEOUT_S,
    RetryPolicy,
    after_failure,
    heartbeat_interval_s,
    sweep_interval_s,
)
from app.jobs.registry import (
    JobKind,
    JobRegistry,
    JobResult,
    PermanentJobError,
    ReleaseJob,
    reset_current_job,
    set_current_job,
)
from app.store import jobs as store
from app.store.jobs import Beat, JobRow

logger = logging.getLogger(__name__)

T = TypeVar("T")

PRUNE_EVERY_S = 3600.0
DONE_RETENTION_DAYS = 7.0
FAILED_RETENTION_DAYS = 30.0
MAX_ERROR_CHARS = 2000
RECONNECT_MAX_S = 30.0
LOG_PROGRESS_EVERY_S = 10.0  # a job running longer logs where it is this often

CancelReason = Literal["stopping", "lease-lost", "taken"]


class LeaseLost(Exception):
    """The lease connection broke: this worker's locks are gone."""


def worker_name() -> str:
    """host:pid:random, unique per worker start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """The worker's own connection; one statement at a time."""

    def __init__(self, dsn: str, queue: str, on_notify: Callable[[], None]) -> None:
        self.dsn = dsn
        self.queue = queue
        self.on_notify = on_notify
        self.conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        """True while the connection is open."""
        return self.conn is not None and not self.conn.is_closed()

    async def open(self) -> None:
        """Connect and LISTEN for new jobs."""
        conn = await asyncpg.connect(
            self.dsn,
            timeout=LEASE_STATEMENT_TIMEOUT_S,
            server_settings={"application_name": "ragoverlay-jobs"},
        )
        await conn.add_listener(store.NOTIFY_CHANNEL, self._notified)
        self.conn = conn

    def _notified(self, conn: object, pid: int, channel: str, payload: str) -> None:
        if payload == self.queue:
            self.on_notify()

    async def run(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run `fn` on the lease; LeaseLost when the connection is (or just went) away."""
        async with self._lock:
            conn = self.conn
            if conn is None or conn.is_closed():
                raise LeaseLost()
            try:
                return await asyncio.wait_for(fn(conn), LEASE_STATEMENT_TIMEOUT_S)
            except (
                OSError,
                TimeoutError,
                asyncpg.PostgresConnectionError,
                asyncpg.InterfaceError,
                asyncpg.InternalClientError,
            ) as exc:
                # whatever the cause, the session (and its locks) can no longer be trusted
                await self._drop()
                raise LeaseLost() from exc

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        """Close the connection (its locks go with it)."""
        async with self._lock:
            conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 5)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()


@dataclass
class _Run:
    """A job this worker runs: its task and the progress not yet written."""

    job: JobRow
    kind: JobKind
    task: asyncio.Task[None] | None = None
    reason: CancelReason | None = None
    done: int | None = None
    total: int | None = None
    note: str | None = None
    dirty: bool = False
    started: float = field(default_factory=time.monotonic)
    logged: float = field(default_factory=time.monotonic)  # when its last progress line was logged
    # the no-progress deadline while the handler runs (None: none, or not running), its length
    deadline: asyncio.Timeout | None = None
    deadline_s: float | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def progress(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """The handler's progress callback: a new value pushes the deadline out."""
        before = (self.done, self.total, self.note)
        self.done = int(done)
        if total is not None:
            self.total = int(total)
        if note is not None:
            self.note = note[:500]
        self.dirty = True
        # the same value again is no progress: a handler stuck in a loop that reports is still stuck
        if (self.done, self.total, self.note) != before:
            self.advanced()

    def parsed(self, progress: ParseProgress) -> None:
        """A parse this run waits for advanced (pages read in another process): progress too."""
        self.advanced()

    def advanced(self) -> None:
        """Push the deadline out to a whole timeout from now (safe from any thread)."""
        loop = self.loop
        if loop is None or self.deadline is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._push_deadline()
        else:  # a handler's thread: asyncio's timers are the loop's own
            loop.call_soon_threadsafe(self._push_deadline)

    def _push_deadline(self) -> None:
        scope, length = self.deadline, self.deadline_s
        if scope is None or length is None or scope.expired():
            return  # ended, or already cancelling the run
        assert self.loop is not None
        scope.reschedule(self.loop.time() + length)

    def line(self, now: float) -> str:
        """Where the run is, as the log says it."""
        text = f"Job {self.job.id} ({self.kind.name}) running for {now - self.started:.0f} s"
        if self.done is not None:
            text += f": {self.done} of {self.total}" if self.total is not None else f": {self.done} done"
        if self.note:
            text += f", {self.note}" if self.done is not None else f": {self.note}"
        return text

    def beat(self, with_progress: bool) -> Beat:
        """This run's heartbeat (with progress when it changed)."""
        if with_progress and self.dirty:
            self.dirty = False
            return Beat(self.job.id, self.job.attempts, self.done, self.total, self.note)
        return Beat(self.job.id, self.job.attempts)


@dataclass(frozen=True)
class RunningJob:
    """A job running in this process, as the status page shows it."""

    id: int
    kind: str
    attempt: int
    done: int | None
    total: int | None
    note: str | None
    running_s: float


class JobWorker:
    """Runs the jobs of one queue with at most `concurrency` at once."""

    def __init__(
        self,
        *,
        dsn: str,
        queue: str,
        registry: JobRegistry,
        policy: RetryPolicy,
        concurrency: int,
        job_timeout_s: float,
        stale_timeout_s: float,
        poll_s: float = 1.0,
        name: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.queue = queue
        self.registry = registry
        self.policy = policy
        self.concurrency = concurrency
        self.job_timeout_s = job_timeout_s
        self.stale_timeout_s = stale_timeout_s
        self.poll_s = poll_s
        self.name = name or worker_name()
        self.lease = Lease(dsn, queue, self.wake)
        self._runs: dict[int, _Run] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._beat_every = heartbeat_interval_s(stale_timeout_s)
        self._sweep_every = sweep_interval_s(stale_timeout_s)
        self.claimed = 0  # jobs claimed since start (tests and the status page)
        self.finished: dict[str, int] = {}  # outcome -> runs ended so, since start

    # --- life cycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the lease and start claiming."""
        await self.lease.open()
        self._loop_task = asyncio.create_task(self._loop(), name=f"jobs:{self.queue}")
        logger.info(
            "Job worker %s started: queue %s, concurrency %d, kinds %s",
            self.name,
            self.queue,
            self.concurrency,
            ", ".join(self.registry.names()),
        )

    def wake(self) -> None:
        """Look for due jobs now (a job was added or a slot freed)."""
        self._wake.set()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop claiming; cancel the running jobs, which go back to the queue uncounted."""
        self._stopping = True
        self.wake()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await self._cancel_runs("stopping", grace_s)
        await self.lease.close()

    def running(self) -> list[RunningJob]:
        """The jobs running in this process now."""
        now = time.monotonic()
        return [
            RunningJob(r.job.id, r.job.kind, r.job.attempts, r.done, r.total, r.note, now - r.started)
            for r in self._runs.values()
        ]

    # --- the loop --------------------------------------------------------------------------------
    async def _loop(self) -> None:
        next_sweep = 0.0
        next_beat = time.monotonic() + self._beat_every
        next_prune = time.monotonic() + 60.0
        backoff = 1.0
        while not self._stopping:
            try:
                if not self.lease.alive:
                    await self._reconnect()
                    backoff = 1.0
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + self._sweep_every
                    await self._reclaim(None)
                if now >= next_prune:
                    next_prune = now + PRUNE_EVERY_S
                    await self._prune()
                self._log_long_runs(now)
                full_beat = now >= next_beat
                if full_beat:
                    next_beat = now + self._beat_every
                await self._beat(full=full_beat)
                self._wake.clear()
                await self._claim()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
            except asyncio.CancelledError:
                raise
            except LeaseLost:
                logger.warning("Job worker %s lost its database connection; its runs stop", self.name)
                await self._cancel_runs("lease-lost", 5.0)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)
            except Exception:  # the loop must survive anything; the next tick tries again
                logger.exception("Job worker %s: unexpected error", self.name)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)

    def _log_long_runs(self, now: float) -> None:
        """A line per LOG_PROGRESS_EVERY_S for each job running longer than that."""
        for run in self._runs.values():
            if now - run.logged >= LOG_PROGRESS_EVERY_S:
                run.logged = now
                logger.info("%s", run.line(now))

    async def _reconnect(self) -> None:
        try:
            await self.lease.open()
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise LeaseLost() from exc
        logger.info("Job worker %s reconnected", self.name)
        # the runs of the broken session were cancelled: they are ours to take back, now
        await self._reclaim(self.name)

    async def _reclaim(self, worker: str | None) -> None:
        reclaimed = await self.lease.run(
            lambda c: store.reclaim(c, queue=self.queue, stale_s=self.stale_timeout_s, worker=worker)
        )
        for job in reclaimed:
            logger.warning(
                "Reclaimed job %d (%s) abandoned after attempt %d: now %s",
                job.job_id,
                job.kind,
                job.attempts,
                job.status,
            )
        if reclaimed:
            self.wake()

    async def _prune(self) -> None:
        removed = await self.lease.run(
            lambda c: store.prune(
                c, queue=self.queue, done_days=DONE_RETENTION_DAYS, failed_days=FAILED_RETENTION_DAYS
            )
        )
        if removed:
            logger.info("Pruned %d finished jobs", removed)

    async def _beat(self, *, full: bool) -> None:
        runs = [r for r in self._runs.values() if r.task is not None and not r.task.done()]
        beats = [r.beat(True) for r in runs if full or r.dirty]
        if not beats:
            return
        owned = await self.lease.run(lambda c: store.heartbeat(c, worker=self.name, beats=beats))
        for beat in beats:
            run = self._runs.get(beat.job_id)
            if beat.job_id not in owned and run is not None and run.task is not None and not run.task.done():
                # reclaimed (after a broken lease) or changed by hand: this run must not go on
                logger.warning("Job %d is no longer this worker's; its run stops", beat.job_id)
                run.reason = "taken"
                run.task.cancel()

    async def _claim(self) -> None:
        free = self.concurrency - len(self._runs)
        kinds = self.registry.names()
        if free <= 0 or not kinds or self._stopping:
            return
        try:
            claimed = await self.lease.run(
                lambda c: store.claim(c, queue=self.queue, kinds=kinds, worker=self.name, limit=free)
            )
        except asyncpg.PostgresError:
            # the claim's transaction failed after taking some locks: give back all we do not run
            await self.lease.run(lambda c: store.release_stray_locks(c, list(self._runs)))
            raise
        for job in claimed:
            kind = self.registry.get(job.kind)
            assert kind is not None  # only registered kinds are claimed
            run = _Run(job, kind)
            self._runs[job.id] = run
            self.claimed += 1
            run.task = asyncio.create_task(self._run(run), name=f"job:{job.id}:{job.kind}")
            logger.info(
                "Job %d (%s) started: attempt %d of %d", job.id, job.kind, job.attempts, job.max_attempts
            )

    async def _cancel_runs(self, reason: CancelReason, grace_s: float) -> None:
        runs = [r for r in self._runs.values() if r.task is not None and not r.task.done()]
        for run in runs:
            run.reason = run.reason or reason
            assert run.task is not None
            run.task.cancel()
        if runs:
            await asyncio.wait([r.task for r in runs if r.task is not None], timeout=grace_s)
        if reason != "stopping":
            self._runs = {k: r for k, r in self._runs.items() if r.task is not None and not r.task.done()}

    # --- one run ---------------------------------------------------------------------------------
    async def _run(self, run: _Run) -> None:
        job, kind = run.job, run.kind
        try:
            try:
                outcome, delay, error, result = await self._execute(run)
            except asyncio.CancelledError:
                if run.reason == "stopping":
                    # a shutdown is nobody's fault: the job waits for the next worker, uncounted
                    with contextlib.suppress(LeaseLost, asyncpg.PostgresError):
                        await self._finish(job, "released", 0.0, "interrupted: the worker stopped", None)
                elif run.reason == "taken":
                    # the row is no longer ours (the call changes nothing) but our session may still
                    # hold the job's lock: give it back, or nobody could ever claim the job again
                    with contextlib.suppress(LeaseLost, asyncpg.PostgresError):
                        await self._finish(job, "released", 0.0, None, None)
                raise
            try:
                # shielded: a stop that arrives now must not leave a finished job marked running
                status = await asyncio.shield(self._finish(job, outcome, delay, error, result, run))
            except (LeaseLost, asyncpg.PostgresError) as exc:
                # the row stays 'running' until it is reclaimed (the run then counts as an attempt)
                logger.warning(
                    "Job %d (%s): its outcome could not be recorded (%s)",
                    job.id,
                    kind.name,
                    type(exc).__name__,
                )
                return
        finally:
            self._runs.pop(job.id, None)
            self.wake()
        self.finished[outcome] = self.finished.get(outcome, 0) + 1
        if status is None:
            logger.warning("Job %d (%s) was taken from this worker before it ended", job.id, kind.name)
        elif error is None:
            logger.info(
                "Job %d (%s) %s in %.1f s", job.id, kind.name, outcome, time.monotonic() - run.started
            )
        else:
            logger.warning(
                "Job %d (%s) attempt %d failed (%s): now %s", job.id, kind.name, job.attempts, error, status
            )

    async def _execute(self, run: _Run) -> tuple[store.Outcome, float, str | None, dict[str, Any] | None]:
        """Run the handler under its deadline; (outcome, delay, error, result) for `finish`."""
        job, kind = run.job, run.kind
        periodic = job.period_s is not None
        deadline = self.job_timeout_s if kind.deadline else None
        permanent = False
        # the deadline cancels the handler's task: the cancellation reaches whatever it awaits,
        # the embedding and reranker HTTP requests on the shared client included. Progress pushes
        # it out (`_Run.advanced`), so it fires only after `deadline` seconds without any.
        deadline_scope = asyncio.timeout(deadline)
        token = set_current_job(job.id)
        try:
            payload = kind.parse(job.payload)
            async with deadline_scope:
                run.deadline, run.deadline_s, run.loop = deadline_scope, deadline, asyncio.get_running_loop()
                try:
                    with watching_parses(run.parsed):
                        value = await kind.handler(payload, run.progress)
                finally:
                    run.deadline = None
        except ReleaseJob as exc:
            # not this worker's to run now: back to the queue, the attempt given back, no error
            logger.info("Job %d (%s) released: %s", job.id, kind.name, exc.reason)
            return "released", max(exc.delay_s, 0.0), None, None
        except TimeoutError as exc:
            if not deadline_scope.expired():
                error = _describe(exc)
            else:
                error = (
                    f"deadline: the job made no progress for INDEXER_JOB_TIMEOUT_MS "
                    f"({self.job_timeout_s * 1000:.0f} ms) and was cancelled"
                )
        except PermanentJobError as exc:
            error, permanent = f"permanent: {exc}", True
        except RagError as exc:
            # 4xx: the input can never work (415, 422, 413); 5xx: a dependency that may recover
            error, permanent = _describe(exc), exc.status_code < 500
        except Exception as exc:
            error = _describe(exc)
        else:
            outcome = value if isinstance(value, JobResult) else JobResult(result=value)
            if periodic and not outcome.stop:
                again = outcome.again_in if outcome.again_in is not None else job.period_s
                return "again", float(again or 0.0), None, outcome.result
            return "done", 0.0, None, outcome.result
        finally:
            reset_current_job(token)
        if periodic:
            return "again", float(job.retry_s or job.period_s or 0.0), error, None
        fate = after_failure(
            self.policy, attempt=job.attempts, max_attempts=job.max_attempts, permanent=permanent
        )
        return fate.outcome, fate.delay_s, error, None

    async def _finish(
        self,
        job: JobRow,
        outcome: store.Outcome,
        delay: float,
        error: str | None,
        result: dict[str, Any] | None,
        run: _Run | None = None,
    ) -> str | None:
        return await self.lease.run(
            lambda c: store.finish(
                c,
                job_id=job.id,
                worker=self.name,
                attempt=job.attempts,
                outcome=outcome,
                delay_s=delay,
                error=error,
                result=result,
                progress=run.beat(True) if run is not None and run.dirty else None,
            )
        )


def _describe(exc: BaseException) -> str:
    """A failed run's error for the job row (read by admins only), bounded."""
    detail = exc.detail if isinstance(exc, RagError) else str(exc)
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return text[:MAX_ERROR_CHARS]
