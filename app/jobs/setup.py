"""The job system of one service: registry, worker, service, and the kinds wired to the services.

`build_queue` makes the queue (registry, worker, service) that other services are built on (the
maintenance schedule, the V2 jobs an upload queues); `build_jobs` registers the kinds once those
exist (app/services.py calls both); `JobSystem.start` and `close` bracket the worker. Every process
registers every kind (`index-upload`, `maintenance`, `reembed-missing`, and the kinds its callers
install, evidence search's `v2-backfill` and `v2-index-file`, `app/evidence/jobs.py`), so any
replica with a worker can run any job of the queue. The job gauges of `/metrics` are refreshed at
each scrape from the queue itself (every replica sees the same counts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg

from app import metrics
from app.clients.embeddings import Embedder
from app.config_sections import JobSettings
from app.jobs.kinds import REEMBED_MISSING, ReembedMissing
from app.jobs.maintenance import QueuedMaintenance
from app.jobs.policy import RetryPolicy, stale_timeout_warning
from app.jobs.registry import JobRegistry, JobResult, Progress
from app.jobs.service import JobService
from app.jobs.sweep import SWEEP_RETRY_SECONDS, SWEEP_SECONDS, missing_counts, sweep_missing_vectors
from app.jobs.uploads import Uploads
from app.jobs.worker import JobWorker
from app.store.db import StoreInfo
from app.store.jobs import JOB_STATUSES
from app.store.missing_vectors import MissingCount, RagApiMissingVectors, SweepStore

logger = logging.getLogger(__name__)

JOBS_GAUGE = metrics.gauge(
    "ragoverlay_jobs",
    "Jobs of the queue by status (queued includes those waiting for a retry; due: queued and due now)",
    ("status",),
    per_process=False,
)
JOBS_RUNNING_GAUGE = metrics.gauge(
    "ragoverlay_jobs_running", "Jobs running now on any replica, by kind", ("kind",), per_process=False
)
JOBS_OLDEST_DUE_GAUGE = metrics.gauge(
    "ragoverlay_jobs_oldest_due_seconds",
    "How long the longest-waiting due job has waited (0: none)",
    per_process=False,
)
WORKER_RUNNING_GAUGE = metrics.gauge("ragoverlay_job_worker_running", "Jobs running in this process")
WORKER_SLOTS_GAUGE = metrics.gauge(
    "ragoverlay_job_worker_concurrency", "Jobs this process runs at most at once (INDEXER_CONCURRENCY)"
)


def retry_policy(settings: JobSettings) -> RetryPolicy:
    """INDEXER_RETRY_* as a policy."""
    return RetryPolicy(settings.retry_max, settings.retry_base_ms, settings.retry_max_ms)


class JobKinds(Protocol):
    """Kinds a service runs on the queue, registered by its `install`."""

    def install(self, registry: JobRegistry) -> None:
        """Register the kinds on `registry`."""


@dataclass
class JobSystem:
    """Everything the queue needs at run time, and what the admin routes read."""

    service: JobService
    registry: JobRegistry
    worker: JobWorker | None
    maintenance: QueuedMaintenance
    uploads: Uploads
    missing_stores: list[SweepStore] = field(default_factory=list)
    _forget_metrics: Callable[[], None] | None = None

    async def start(self) -> None:
        """Schedule the periodic jobs and start the worker (if this process runs jobs)."""
        if self.worker is not None:
            await self.worker.start()
        await self.service.ensure_periodic(
            REEMBED_MISSING, {}, key=REEMBED_MISSING, period_s=SWEEP_SECONDS, retry_s=SWEEP_RETRY_SECONDS
        )
        self._forget_metrics = metrics.on_scrape(self.refresh_metrics)

    async def missing(self) -> dict[str, MissingCount]:
        """Per store, chunks (and documents) without a vector."""
        return await missing_counts(self.missing_stores)

    async def refresh_metrics(self) -> None:
        """Set the job gauges from the queue (called before each /metrics answer)."""
        stats = await self.service.queue_stats()
        c = stats.counts
        for status, value in (*((s, getattr(c, s)) for s in JOB_STATUSES), ("due", c.due)):
            JOBS_GAUGE.labels(status=status).set(value)
        running: dict[str, int] = dict.fromkeys(self.registry.names(), 0)
        for job in stats.running:
            running[job.kind] = running.get(job.kind, 0) + 1
        for kind, value in running.items():
            JOBS_RUNNING_GAUGE.labels(kind=kind).set(value)
        JOBS_OLDEST_DUE_GAUGE.set(c.oldest_due_s or 0.0)
        WORKER_RUNNING_GAUGE.set(len(stats.local_running))
        WORKER_SLOTS_GAUGE.set(stats.concurrency)

    async def close(self) -> None:
        """Stop the worker: running jobs go back to the queue."""
        if self._forget_metrics is not None:
            self._forget_metrics()
        await self.maintenance.close()
        if self.worker is not None:
            await self.worker.stop()


@dataclass(frozen=True)
class JobQueue:
    """The queue itself: its kinds, this process's worker (None: INDEXER_CONCURRENCY=0), the service."""

    registry: JobRegistry
    worker: JobWorker | None
    service: JobService


def build_queue(settings: JobSettings, *, dsn: str, pool: asyncpg.Pool, info: StoreInfo) -> JobQueue:
    """The registry (empty until `build_jobs`), the worker and the service of the collection's queue."""
    warning = stale_timeout_warning(settings.stale_timeout_s)
    if warning:
        logger.warning(warning)
    registry = JobRegistry()
    policy = retry_policy(settings)
    worker = None
    if settings.concurrency > 0:
        worker = JobWorker(
            dsn=dsn,
            queue=info.collection_name,
            registry=registry,
            policy=policy,
            concurrency=settings.concurrency,
            job_timeout_s=settings.job_timeout_s,
            stale_timeout_s=settings.stale_timeout_s,
        )
    return JobQueue(registry, worker, JobService(pool, info.collection_name, registry, policy, worker))


def build_jobs(
    queue: JobQueue,
    *,
    uploads: Uploads,
    model: str,
    pool: asyncpg.Pool,
    info: StoreInfo,
    embedder: Embedder,
    maintenance: QueuedMaintenance,
    kinds: Sequence[JobKinds] = (),
    missing_stores: Sequence[SweepStore] = (),
) -> JobSystem:
    """Register every kind this service runs on `queue` (the core's, `uploads`' and `kinds`); the
    system the lifespan starts and closes. `missing_stores` join rag_api's table in the
    self-healing sweep, which embeds with `model` (the embedder's identity)."""
    registry = queue.registry
    system = JobSystem(queue.service, registry, queue.worker, maintenance, uploads)
    uploads.install(registry)
    maintenance.install(registry)
    for more in kinds:
        more.install(registry)
    # Self-healing: rag_api's table, and the stores of chunks the callers hand in (evidence search's)
    system.missing_stores.append(RagApiMissingVectors(pool, info))
    system.missing_stores.extend(missing_stores)

    async def reembed(payload: dict[str, Any], progress: Progress) -> JobResult:
        report = await sweep_missing_vectors(system.missing_stores, embedder, model=model, progress=progress)
        if report.stored:
            logger.info("Self-healing sweep stored %d vectors", report.stored)
        return JobResult(result=report.as_dict())

    registry.register(REEMBED_MISSING, reembed, payload=ReembedMissing, priority=-5)
    return system
