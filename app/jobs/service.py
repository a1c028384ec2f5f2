"""The queue as the rest of the service sees it: enqueue, look up, retry, count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from app.jobs.policy import RetryPolicy
from app.jobs.registry import JobRegistry
from app.jobs.worker import JobWorker, RunningJob
from app.store import jobs as store
from app.store.jobs import Enqueued, EnqueueMode, JobRow, QueueCounts


@dataclass(frozen=True)
class QueueStats:
    """What the status page and the metrics read: counts, the running jobs, this process's share."""

    counts: QueueCounts
    running: list[JobRow]  # every running job of the queue, on any replica
    local_running: list[RunningJob]  # those running in this process
    concurrency: int  # this process's INDEXER_CONCURRENCY (0: it runs no jobs)
    worker: str | None


class JobService:
    """One collection's queue: its name is the collection's."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        queue: str,
        registry: JobRegistry,
        policy: RetryPolicy,
        worker: JobWorker | None = None,
    ) -> None:
        self.pool = pool
        self.queue = queue
        self.registry = registry
        self.policy = policy
        self.worker = worker

    async def enqueue(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        dedupe_key: str | None = None,
        mode: EnqueueMode = "keep",
        created_by: str | None = None,
        delay_s: float = 0.0,
        priority: int | None = None,
    ) -> Enqueued:
        """Add a job of `kind` (checked against the kind's payload model when it is registered here).

        `priority` overrides the kind's (higher runs first).
        """
        spec = self.registry.get(kind)
        if spec is not None:
            payload = spec.parse(payload)
        if priority is None:
            priority = spec.priority if spec else 0
        async with self.pool.acquire() as conn:
            added = await store.enqueue(
                conn,
                queue=self.queue,
                kind=kind,
                payload=payload,
                dedupe_key=dedupe_key,
                mode=mode,
                priority=priority,
                max_attempts=(spec.max_attempts if spec and spec.max_attempts else self.policy.max_attempts),
                delay_s=delay_s,
                created_by=created_by,
            )
        if self.worker is not None:
            self.worker.wake()
        return added

    async def raise_priority(self, keys: list[str], priority: int) -> int:
        """Move the waiting jobs with these dedupe keys up to `priority` (never down); how many moved."""
        if not keys:
            return 0
        async with self.pool.acquire() as conn:
            moved = await store.raise_priority(conn, queue=self.queue, keys=keys, priority=priority)
        if moved and self.worker is not None:
            self.worker.wake()
        return moved

    async def ensure_periodic(
        self, kind: str, payload: dict[str, Any], *, key: str, period_s: float, retry_s: float
    ) -> Enqueued:
        """Make sure the periodic job `key` exists (one row per schedule, whichever replica asks)."""
        spec = self.registry.get(kind)
        async with self.pool.acquire() as conn:
            added = await store.enqueue(
                conn,
                queue=self.queue,
                kind=kind,
                payload=payload,
                dedupe_key=key,
                mode="periodic",
                priority=spec.priority if spec else 0,
                max_attempts=1,
                period_s=period_s,
                retry_s=retry_s,
            )
        if self.worker is not None:
            self.worker.wake()
        return added

    async def get(self, job_id: int, *, created_by: str | None = None) -> JobRow | None:
        """Job `job_id`; with `created_by`, only when that caller asked for it (else None)."""
        async with self.pool.acquire() as conn:
            return await store.get(conn, queue=self.queue, job_id=job_id, created_by=created_by)

    async def list_jobs(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
        created_by: str | None = None,
    ) -> list[JobRow]:
        """Jobs, newest first; with `created_by`, only those that caller asked for."""
        async with self.pool.acquire() as conn:
            return await store.list_jobs(
                conn,
                queue=self.queue,
                status=status,
                kind=kind,
                before_id=before_id,
                limit=limit,
                created_by=created_by,
            )

    async def waiting(self, kind: str, matching: dict[str, Any]) -> int:
        """Jobs of `kind` queued or running whose payload holds every key and value of `matching`."""
        async with self.pool.acquire() as conn:
            return await store.count_waiting(conn, queue=self.queue, kind=kind, matching=matching)

    async def retry(self, job_id: int) -> str:
        """Send a failed job back: 'queued', 'missing', 'duplicate', or the status that forbids it."""
        async with self.pool.acquire() as conn:
            outcome = await store.retry(conn, queue=self.queue, job_id=job_id)
        if outcome == "queued" and self.worker is not None:
            self.worker.wake()
        return outcome

    async def queue_stats(self) -> QueueStats:
        """Counts per state, the running jobs of every replica, and this process's runs."""
        async with self.pool.acquire() as conn:
            counts = await store.counts(conn, queue=self.queue)
            running = await store.list_jobs(conn, queue=self.queue, status="running", limit=1000)
        return QueueStats(
            counts=counts,
            running=running,
            local_running=self.worker.running() if self.worker else [],
            concurrency=self.worker.concurrency if self.worker else 0,
            worker=self.worker.name if self.worker else None,
        )

    async def versions(self) -> dict[str, str | None]:
        """The database's versions, for the status page."""
        async with self.pool.acquire() as conn:
            return await store.versions(conn)
