"""The job system of one service: registry, worker, service, and the kinds wired to the resources.

`build_jobs` is called by the lifespan once the pool and services are open; `JobSystem.start` and
`close` bracket the worker. This is also where the V2 index's functions are registered
(`register_v2`, see `app/jobs/kinds.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.clients.blobs import BlobStore
from app.clients.embeddings import Embedder
from app.config import Settings
from app.ingest.pipeline import IngestService, model_identity
from app.jobs.kinds import REEMBED_MISSING, ReembedMissing
from app.jobs.policy import RetryPolicy, stale_timeout_warning
from app.jobs.registry import JobRegistry, JobResult, Progress
from app.jobs.service import JobService
from app.jobs.sweep import SWEEP_RETRY_SECONDS, SWEEP_SECONDS, missing_counts, sweep_missing_vectors
from app.jobs.uploads import UploadJobs
from app.jobs.worker import JobWorker
from app.maintenance.queue import QueuedMaintenance
from app.maintenance.tasks import Maintenance
from app.search.service import SearchService
from app.store.db import StoreInfo
from app.store.missing_vectors import MissingCount, MissingVectorStore, RagApiMissingVectors

logger = logging.getLogger(__name__)


def retry_policy(settings: Settings) -> RetryPolicy:
    """INDEXER_RETRY_* as a policy."""
    return RetryPolicy(
        settings.indexer_retry_max, settings.indexer_retry_base_ms, settings.indexer_retry_max_ms
    )


@dataclass
class JobSystem:
    """Everything the queue needs at run time, and what the admin routes read."""

    service: JobService
    registry: JobRegistry
    worker: JobWorker | None
    maintenance: QueuedMaintenance
    missing_stores: list[MissingVectorStore] = field(default_factory=list)

    async def start(self) -> None:
        """Schedule the periodic jobs and start the worker (if this process runs jobs)."""
        if self.worker is not None:
            await self.worker.start()
        await self.service.ensure_periodic(
            REEMBED_MISSING, {}, key=REEMBED_MISSING, period_s=SWEEP_SECONDS, retry_s=SWEEP_RETRY_SECONDS
        )

    async def missing(self) -> dict[str, MissingCount]:
        """Per store, chunks (and documents) without a vector."""
        return await missing_counts(self.missing_stores)

    async def close(self) -> None:
        """Stop the worker: running jobs go back to the queue."""
        await self.maintenance.close()
        if self.worker is not None:
            await self.worker.stop()


def build_jobs(
    settings: Settings,
    *,
    dsn: str,
    pool: asyncpg.Pool,
    info: StoreInfo,
    embedder: Embedder,
    blobs: BlobStore,
    ingest: IngestService,
    search: SearchService,
    maintenance: Maintenance,
) -> JobSystem:
    """Build the registry with every kind this service runs, the worker and the service."""
    warning = stale_timeout_warning(settings.indexer_stale_timeout_s, settings.indexer_job_timeout_ms)
    if warning:
        logger.warning(warning)
    registry = JobRegistry()
    policy = retry_policy(settings)
    worker = None
    if settings.indexer_concurrency > 0:
        worker = JobWorker(
            dsn=dsn,
            queue=info.collection_name,
            registry=registry,
            policy=policy,
            concurrency=settings.indexer_concurrency,
            job_timeout_s=settings.indexer_job_timeout_ms / 1000,
            stale_timeout_s=settings.indexer_stale_timeout_s,
        )
    service = JobService(pool, info.collection_name, registry, policy, worker)
    system = JobSystem(service, registry, worker, QueuedMaintenance(maintenance, service))

    UploadJobs(settings, ingest, blobs, search).install(registry)
    system.maintenance.install(registry)
    # Self-healing: rag_api's table here; the V2 index adds its chunk table to `missing_stores`
    # (a ChunkTableMissingVectors) when it registers its kinds.
    system.missing_stores.append(RagApiMissingVectors(pool, info))
    model = model_identity(settings)

    async def reembed(payload: dict[str, Any], progress: Progress) -> JobResult:
        report = await sweep_missing_vectors(system.missing_stores, embedder, model=model, progress=progress)
        if report.stored:
            logger.info("Self-healing sweep stored %d vectors", report.stored)
        return JobResult(result=report.as_dict())

    registry.register(REEMBED_MISSING, reembed, payload=ReembedMissing, priority=-5)
    # V2 index: register_v2(registry, index_file=..., backfill=...) and append its chunk store to
    # system.missing_stores here, once app/ingest/v2's index run exists (see app/jobs/kinds.py).
    return system
