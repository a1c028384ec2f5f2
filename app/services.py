"""The composition root: `build_services` opens every long-lived service and wires them together.

    async with contextlib.AsyncExitStack() as stack:
        services = await build_services(settings, stack)

Read it top to bottom for the start-up order: the database (embedded or external), its schema, the
pool and its supervisor; the HTTP client, the embedder and the blob store; the job queue, the
maintenance tasks, evidence search, ingestion and search built on them; then the background work
starts. Every service gets what it reports to in its constructor (the pool its failure alarm, the
maintenance registry its job schedule, ingestion evidence search), so nothing is attached after
construction and no service is missing once this returns. Each close
goes on `stack`, which unwinds in reverse: the job worker first, the embedded server last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import asyncpg
import httpx

from app import metrics
from app.access.allowlist import build_allowlist, describe
from app.access.scope import Access
from app.clients.blobs import BlobStore, build_blob_store
from app.clients.embeddings import Embedder, KnowsStoredDimensions, build_embedder, model_identity
from app.clients.http import build_http_client
from app.config import Settings
from app.config_sections import (
    AccessSettings,
    AllowlistSettings,
    BlobSettings,
    ContextualSettings,
    JobSettings,
    SearchSettings,
    VectorIndexSettings,
)
from app.errors import BlobStoreError
from app.evidence.service import Evidence, build_evidence
from app.ingest.contextual import Contextualizer, build_contextualizer
from app.ingest.parse_cache import parse_cache
from app.ingest.pipeline import IngestService
from app.ingest.tempfiles import sweep_stale_uploads
from app.jobs.maintenance import MaintenanceSchedule, QueuedMaintenance
from app.jobs.setup import JobSystem, build_jobs, build_queue
from app.jobs.uploads import Uploads
from app.maintenance.registry import MaintenanceRegistry
from app.maintenance.tasks import Maintenance
from app.runtime.postgres import EmbeddedPostgres, attach_running
from app.runtime.supervisor import DatabaseSupervisor, FailureAlarm
from app.search.service import SearchService
from app.search.state import SearchState
from app.store.db import StoreInfo, bootstrap, create_pool, stored_dimension
from app.store.maintenance import MaintenanceStore
from app.store.standby import ReadPools, open_read_pools

logger = logging.getLogger(__name__)


@dataclass
class Services:
    """Every long-lived service of one running app (`app.state.services`), all of them open."""

    settings: Settings
    pool: asyncpg.Pool
    info: StoreInfo
    database: DatabaseSupervisor  # app/runtime/supervisor.py: up/down, restarts
    http: httpx.AsyncClient
    embedder: Embedder
    blobs: BlobStore
    search: SearchService
    ingest: IngestService
    maintenance: Maintenance
    evidence: Evidence  # evidence search (/query_v2, its index runs): app/evidence/
    jobs: JobSystem
    # every door's Scope, with LibreChat's catalogue narrowing file ids first (ALLOWLIST_VERIFY)
    access: Access
    admin_ids: frozenset[str]


@dataclass(frozen=True)
class _Database:
    dsn: str
    info: StoreInfo
    pool: asyncpg.Pool
    supervisor: DatabaseSupervisor
    reads: ReadPools | None  # read standbys (DATABASE_READ_URLS)


async def build_services(
    settings: Settings, stack: contextlib.AsyncExitStack, *, attach_database: bool = False
) -> Services:
    """Open and wire every service; each close goes on `stack` (see the module's docstring)."""
    await asyncio.to_thread(ensure_upload_dir, settings)
    db = await _open_database(settings, stack, attach=attach_database)
    pool, info = db.pool, db.info
    http, embedder = await _open_embedder(settings, stack, pool, info)
    blobs = await _open_blobs(settings, stack)
    queue = build_queue(JobSettings.from_settings(settings), dsn=db.dsn, pool=pool, info=info)
    schedule = MaintenanceSchedule(queue.service)
    # the job queue runs the maintenance passes (app/jobs/maintenance.py), not loops
    tasks = MaintenanceRegistry(run_loops=False, on_add=schedule.task_added)
    indexes = VectorIndexSettings.from_settings(settings)
    maintenance = Maintenance(indexes, MaintenanceStore(db.dsn, info), SearchState(), tasks)
    situate = _contextualizer(settings, stack)  # one chat client situates the chunks of both indexes
    evidence = build_evidence(
        settings,
        stack,
        dsn=db.dsn,
        pool=pool,
        info=info,
        embedder=embedder,
        blobs=blobs,
        queue=queue.service,
        tasks=tasks,
        contextualizer=situate,
        reads=db.reads,
    )
    # each stored file: V1's search statistics count it; evidence search stages it in the upload
    ingest = IngestService(
        settings,
        pool,
        info,
        embedder,
        blobs,
        listeners=[maintenance.state],
        derived=[evidence],
        contextualizer=situate,
    )
    stack.callback(ingest.close)
    stack.push_async_callback(maintenance.close)
    searching = SearchSettings.from_settings(settings)
    reading = db.reads or pool  # searches and reads: a caught-up standby, else the primary
    search = SearchService(searching, reading, info, embedder, maintenance.state, maintenance.want_index)
    stack.push_async_callback(search.aclose)
    jobs = build_jobs(
        queue,
        uploads=Uploads(settings, ingest, blobs, queue.service),
        model=model_identity(settings),
        pool=pool,
        info=info,
        embedder=embedder,
        maintenance=QueuedMaintenance(tasks, schedule),
        kinds=[evidence],
        missing_stores=[evidence.missing_vectors],
    )
    stack.push_async_callback(jobs.close)  # first to close: running jobs go back to the queue
    await _start_background_work(maintenance, evidence, jobs, embedder.dimensions)
    return Services(
        settings=settings,
        pool=pool,
        info=info,
        database=db.supervisor,
        http=http,
        embedder=embedder,
        blobs=blobs,
        search=search,
        ingest=ingest,
        maintenance=maintenance,
        evidence=evidence,
        jobs=jobs,
        access=_access(settings, info, stack),
        admin_ids=frozenset(settings.admin_user_ids),
    )


def ensure_upload_dir(settings: Settings) -> None:
    """Create RAG_UPLOAD_DIR (the folder `/local/embed` reads from) if it is missing."""
    folder = settings.upload_dir
    if folder.is_dir():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # uploads over HTTP and searches do not need it: start anyway, /local/embed answers 404
        logger.error("Could not create RAG_UPLOAD_DIR %s (%s)", folder, exc.strerror or type(exc).__name__)
        return
    logger.info("Created RAG_UPLOAD_DIR %s", folder)


async def _database_dsn(settings: Settings, *, attach: bool) -> tuple[str, EmbeddedPostgres | None]:
    if not settings.use_embedded_postgres:
        return settings.external_dsn(), None
    if attach:
        # a client of the running service's embedded server (scripts/mcp): never a second server
        attached = await asyncio.to_thread(attach_running, settings.postgres_data_dir)
        return attached.dsn, None
    server = EmbeddedPostgres(settings.postgres_data_dir)
    info = await asyncio.to_thread(server.start)
    return info.dsn, server


async def _open_database(settings: Settings, stack: contextlib.AsyncExitStack, *, attach: bool) -> _Database:
    """The server (started when embedded), the schema, the pool and the supervisor watching them."""
    dsn, embedded = await _database_dsn(settings, attach=attach)
    if embedded is not None:
        stack.callback(embedded.stop)
    info = await bootstrap(dsn, settings.collection_name)
    await asyncio.to_thread(sweep_stale_uploads, settings.data_dir.resolve() / "tmp")
    await asyncio.to_thread(parse_cache(settings.data_dir).prune)  # cached parses past their hour
    alarm = FailureAlarm()  # made before both: the pool rings it, the supervisor built after it listens
    pool = await create_pool(
        dsn,
        min_size=settings.db_pool_min_size,
        max_size=settings.db_pool_max_size,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        command_timeout_s=settings.db_statement_timeout_ms / 1000 + 5,
        on_failure=alarm.report,
    )
    stack.push_async_callback(pool.close)
    supervisor = DatabaseSupervisor(
        dsn, pool, embedded=embedded, interval_s=settings.db_check_interval_s, alarm=alarm
    )
    supervisor.start()
    stack.callback(metrics.bind_runtime(supervisor, pool))
    # closed before the pool and the embedded server (the stack unwinds in reverse)
    stack.push_async_callback(supervisor.close)
    return _Database(dsn, info, pool, supervisor, await _open_read_standbys(settings, stack, pool))


async def _open_read_standbys(
    settings: Settings, stack: contextlib.AsyncExitStack, pool: asyncpg.Pool
) -> ReadPools | None:
    """DATABASE_READ_URLS' standbys beside the primary's pool; None without any (one pool, as ever)."""
    if not settings.database_read_urls:
        return None
    reads = await open_read_pools(
        pool,
        settings.database_read_urls,
        max_size=settings.db_pool_max_size,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        wait_s=settings.read_standby_wait_ms / 1000,
        retry_s=settings.read_standby_retry_s,
    )
    stack.push_async_callback(reads.close)
    return reads


async def _open_embedder(
    settings: Settings, stack: contextlib.AsyncExitStack, pool: asyncpg.Pool, info: StoreInfo
) -> tuple[httpx.AsyncClient, Embedder]:
    """The shared HTTP client and the embedder on it, told the stored vectors' dimension."""
    http = _http_client(settings, stack)
    embedder = build_embedder(settings, http_client=http)
    stack.push_async_callback(embedder.aclose)
    await _trust_stored_dimensions(embedder, pool, info, settings)
    return http, embedder


async def _trust_stored_dimensions(
    embedder: Embedder, pool: asyncpg.Pool, info: StoreInfo, settings: Settings
) -> None:
    """Before any reply is trusted: the dimension of the vectors already stored for this model."""
    if not isinstance(embedder, KnowsStoredDimensions) or embedder.trusted_dimensions:
        return  # EMBEDDINGS_DIMENSIONS or the model itself decides: nothing to read
    model_id = model_identity(settings)

    async def lookup() -> int | None:
        return await stored_dimension(pool, info, model_id)

    # read once here; ingests of this process keep it current (never read per request)
    embedder.use_stored_dimensions(lookup, await lookup(), looked_up=True)


def _http_client(settings: Settings, stack: contextlib.AsyncExitStack) -> httpx.AsyncClient:
    """The embedding provider's HTTP client, closed with the stack."""
    http = build_http_client(
        timeout_s=settings.embedding_timeout_s,
        # rag_api sends only OpenAI traffic through RAG_OPENAI_PROXY
        proxy=settings.openai_proxy if settings.provider == "openai" else None,
    )
    stack.push_async_callback(http.aclose)
    return http


def _contextualizer(settings: Settings, stack: contextlib.AsyncExitStack) -> Contextualizer | None:
    """CONTEXTUAL_CHUNKING_ENABLED: the chat client that situates new chunks, closed with the stack."""
    contextualizer = build_contextualizer(ContextualSettings.from_settings(settings))
    if contextualizer is not None:
        stack.push_async_callback(contextualizer.aclose)
    return contextualizer


async def _open_blobs(settings: Settings, stack: contextlib.AsyncExitStack) -> BlobStore:
    blobs = build_blob_store(BlobSettings.from_settings(settings))
    stack.push_async_callback(blobs.aclose)
    try:
        await blobs.check()
    except BlobStoreError as exc:
        # searches do not need the blob store: start anyway, uploads answer 502/503 until fixed
        logger.error("Blob store check failed at start-up: %s", exc.detail)
    return blobs


async def _start_background_work(
    maintenance: Maintenance, evidence: Evidence, jobs: JobSystem, dims: int | None
) -> None:
    """The maintenance tasks (as periodic jobs), evidence search's index tasks, the refresh and the worker."""
    maintenance.start(dims)
    try:
        await evidence.start()  # the vector index of the dimensions already stored
    except (OSError, asyncpg.PostgresError) as exc:
        logger.error("V2 index tasks could not start (%s); they start with the next stored vector", exc)
    maintenance.start_refresh()
    await jobs.start()


def _access(settings: Settings, info: StoreInfo, stack: contextlib.AsyncExitStack) -> Access:
    """Every door's scope rules, with LibreChat's catalogue narrowing file ids first (ALLOWLIST_VERIFY)."""
    checking = AllowlistSettings.from_settings(settings)
    # lazy: start-up does not wait for LibreChat's MongoDB (a request that needs it may 503)
    allowlist = build_allowlist(checking)
    stack.push_async_callback(allowlist.aclose)
    if allowlist.enabled:
        logger.info("Allow-lists re-checked against LibreChat's catalogue: %s", describe(checking))
    return Access.of(AccessSettings.from_settings(settings), info.collection_id, allowlist)
