"""The FastAPI application: `create_app()` and the lifespan that opens and closes every resource."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import metrics
from app.api import admin, documents, embed, health, jobs, v2_admin, v2_query
from app.api import metrics as metrics_route
from app.api.bounds import bounds_detail
from app.api.guards import BodyGuardMiddleware
from app.api.openapi import install_openapi
from app.api.ratelimit import RateLimiter, document_rate_limits, enforce_rate_limit
from app.clients.blobs import build_blob_store
from app.clients.embeddings import build_embedder, model_identity
from app.clients.http import build_http_client
from app.config import Settings, get_settings
from app.deps import Resources, get_principal
from app.errors import (
    BlobStoreError,
    DatabaseUnavailable,
    InvalidInput,
    RagError,
    RateLimited,
    Unauthorized,
    database_unavailable,
)
from app.ingest.pipeline import IngestService
from app.ingest.upload import sweep_stale_uploads
from app.ingest.v2.context import V2Context
from app.jobs.setup import build_jobs
from app.logs import RequestContextMiddleware, configure_logging, request_id_var
from app.maintenance.registry import MaintenanceRegistry
from app.maintenance.tasks import Maintenance
from app.maintenance.v2_tasks import V2Maintenance
from app.mcp.http import SESSION_LIMIT, mcp_route, open_sessions
from app.mcp.server import build_server as build_mcp_server
from app.runtime.postgres import EmbeddedPostgres, attach_running
from app.runtime.stalls import BodyTimeoutMiddleware
from app.runtime.supervisor import DatabaseSupervisor
from app.search.allowlist import build_allowlist, describe
from app.search.service import SearchService
from app.search.state import SearchState
from app.search.v2.service import V2SearchService, build_reranker
from app.store.db import StoreInfo, bootstrap, create_pool, stored_dimension
from app.store.maintenance import MaintenanceStore

logger = logging.getLogger(__name__)

UNAUTHENTICATED_WARNING = (
    "JWT_SECRET is not set: the service runs WITHOUT authentication (every caller is 'public'). "
    "Set JWT_SECRET to LibreChat's secret for any shared deployment."
)
PDF_EXTRACT_IMAGES_WARNING = (
    "PDF_EXTRACT_IMAGES is set, but reading text from images (OCR) is not supported: only the text "
    "layer of PDFs is indexed, and a PDF of scanned pages is refused (422)"
)


async def _database_dsn(settings: Settings, *, attach: bool = False) -> tuple[str, EmbeddedPostgres | None]:
    if not settings.use_embedded_postgres:
        return settings.external_dsn(), None
    if attach:
        # a client of the running service's embedded server (scripts/mcp): never a second server
        attached = await asyncio.to_thread(attach_running, settings.postgres_data_dir)
        return attached.dsn, None
    server = EmbeddedPostgres(settings.postgres_data_dir)
    info = await asyncio.to_thread(server.start)
    return info.dsn, server


async def _trust_stored_dimensions(embedder: Any, pool: Any, info: StoreInfo, settings: Settings) -> None:
    """Before any reply is trusted: the dimension of the vectors already stored for this model."""
    use = getattr(embedder, "use_stored_dimensions", None)
    if use is None or getattr(embedder, "trusted_dimensions", None):
        return  # EMBEDDINGS_DIMENSIONS or the model itself decides: nothing to read
    model_id = model_identity(settings)

    async def lookup() -> int | None:
        return await stored_dimension(pool, info, model_id)

    # read once here; ingests of this process keep it current (never read per request)
    use(lookup, await lookup(), looked_up=True)


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


def _warm_up(embedder: object, stack: contextlib.AsyncExitStack) -> None:
    """Load the local model in the background, so /health answers at once."""
    warmup = getattr(embedder, "warmup", None)
    if warmup is not None:
        task = asyncio.create_task(warmup())
        stack.callback(task.cancel)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the database (embedded or external), pool, HTTP client, embedder and blob store."""
    settings: Settings = app.state.settings
    if not settings.auth_enabled:
        logger.warning(UNAUTHENTICATED_WARNING)
    if settings.pdf_extract_images:
        logger.warning(PDF_EXTRACT_IMAGES_WARNING)
    await asyncio.to_thread(ensure_upload_dir, settings)
    dsn, embedded_pg = await _database_dsn(settings, attach=getattr(app.state, "attach_database", False))
    stack = contextlib.AsyncExitStack()
    try:
        if embedded_pg is not None:
            stack.callback(embedded_pg.stop)
        info = await bootstrap(dsn, settings.collection_name)
        await asyncio.to_thread(sweep_stale_uploads, settings.data_dir.resolve() / "tmp")
        watchers: list[DatabaseSupervisor] = []  # the pool reports to the supervisor built after it

        def report(exc: BaseException) -> None:
            for watcher in watchers:
                watcher.report_failure(exc)

        pool = await create_pool(
            dsn,
            min_size=settings.db_pool_min_size,
            max_size=settings.db_pool_max_size,
            statement_timeout_ms=settings.db_statement_timeout_ms,
            command_timeout_s=settings.db_statement_timeout_ms / 1000 + 5,
            on_failure=report,
        )
        stack.push_async_callback(pool.close)
        supervisor = DatabaseSupervisor(
            dsn, pool, embedded=embedded_pg, interval_s=settings.db_check_interval_s
        )
        watchers.append(supervisor)
        supervisor.start()
        stack.callback(metrics.bind_runtime(supervisor, pool))
        # closed before the pool and the embedded server (the stack unwinds in reverse)
        stack.push_async_callback(supervisor.close)
        http = build_http_client(
            timeout_s=settings.embedding_timeout_s,
            # rag_api sends only OpenAI traffic through RAG_OPENAI_PROXY
            proxy=settings.openai_proxy if settings.provider == "openai" else None,
        )
        stack.push_async_callback(http.aclose)
        embedder = build_embedder(settings, http_client=http)
        stack.push_async_callback(embedder.aclose)
        await _trust_stored_dimensions(embedder, pool, info, settings)
        blobs = build_blob_store(settings)
        stack.push_async_callback(blobs.aclose)
        try:
            await blobs.check()
        except BlobStoreError as exc:
            # searches do not need the blob store: start anyway, uploads answer 502/503 until fixed
            logger.error("Blob store check failed at start-up: %s", exc.detail)
        ingest = IngestService(settings, pool, info, embedder, blobs)
        stack.callback(ingest.close)
        search_state = SearchState()
        # the job queue runs the maintenance passes (app/jobs/maintenance.py), not loops
        maintenance = Maintenance(
            settings, MaintenanceStore(dsn, info), search_state, MaintenanceRegistry(run_loops=False)
        )
        stack.push_async_callback(maintenance.close)
        search = SearchService(settings, pool, info, embedder, search_state, maintenance.want_index)
        v2 = V2Context(settings, pool, info, embedder, blobs)
        tuning = settings.v2
        rerank_http: httpx.AsyncClient | None = None
        if tuning.rerank.backend == "http":
            # its own client: the embedding client may carry RAG_OPENAI_PROXY, which is for OpenAI only
            rerank_http = build_http_client(timeout_s=tuning.rerank.timeout_seconds)
            stack.push_async_callback(rerank_http.aclose)
        v2_search = V2SearchService(
            settings,
            pool,
            info,
            embedder,
            tuning,
            build_reranker(tuning, rerank_http, api_key=tuning.rerank.api_key),
        )
        jobs = build_jobs(
            settings,
            dsn=dsn,
            pool=pool,
            info=info,
            embedder=embedder,
            blobs=blobs,
            ingest=ingest,
            search=search,
            maintenance=maintenance,
            v2=v2,
        )
        stack.push_async_callback(jobs.close)  # first to close: running jobs go back to the queue
        maintenance.start(embedder.dimensions)
        v2_tasks = V2Maintenance(v2, dsn, maintenance.registry)
        # new uploads of RAG_V2_NAMESPACE_IDS: their V2 staging is a job of the queue
        ingest.on_stored = jobs.v2.note_upload
        try:
            await v2_tasks.start()  # the vector index of the dimensions already stored
        except (OSError, asyncpg.PostgresError) as exc:
            logger.error("V2 index tasks could not start (%s); they start with the next stored vector", exc)
        maintenance.start_refresh()
        await jobs.start()
        # lazy: start-up does not wait for LibreChat's MongoDB (a request that needs it may 503)
        allowlist = build_allowlist(settings)
        stack.push_async_callback(allowlist.aclose)
        if allowlist.enabled:
            logger.info("Allow-lists re-checked against LibreChat's catalogue: %s", describe(settings))
        app.state.resources = Resources(
            settings=settings,
            pool=pool,
            info=info,
            embedder=embedder,
            blobs=blobs,
            search=search,
            maintenance=maintenance,
            ingest=ingest,
            http=http,
            admin_ids=frozenset(settings.admin_user_ids),
            v2=v2,
            v2_tasks=v2_tasks,
            v2_search=v2_search,
            jobs=jobs,
            database=supervisor,
            allowlist=allowlist,
        )
        if settings.mcp_enabled and getattr(app.state, "mcp_http", False):
            # inside the app's lifespan: sessions end before the resources they use close
            server = build_mcp_server(lambda: app.state.resources, limiter=app.state.rate_limiter)
            await stack.enter_async_context(open_sessions(app, server, settings))
        _warm_up(embedder, stack)
        logger.info(
            "ragoverlay ready: collection=%s provider=%s model=%s blobs=%s auth=%s",
            *(info.collection_name, settings.provider, settings.model, blobs.kind),
            "on" if settings.auth_enabled else "OFF",
        )
        yield
    finally:
        app.state.resources = None
        await stack.aclose()


RETRY_AFTER_DB_S = 2  # what a 503 for a lost database tells the client to wait
# Exception types the database error handler sees; it answers only those `database_unavailable` accepts.
DATABASE_ERROR_TYPES: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)


def _error_body(detail: Any, status: int) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": detail}
    if status >= 500:
        body["request_id"] = request_id_var.get()
    return body


def _clean_validation_errors(errors: Any) -> list[dict[str, Any]]:
    """pydantic errors without `input` (it may hold a whole document or a secret)."""
    cleaned = []
    for err in errors:
        item = {k: v for k, v in err.items() if k not in ("input", "url")}
        cleaned.append(item)
    encoded: list[dict[str, Any]] = jsonable_encoder(cleaned)
    return encoded


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the contract's shapes."""

    @app.exception_handler(RagError)
    async def rag_error(request: Request, exc: RagError) -> JSONResponse:
        if isinstance(exc, DatabaseUnavailable):
            return await database_error(request, exc)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(exc.retry_after_s)}
        if isinstance(exc, InvalidInput):
            # the multipart routes check their fields themselves: the same rule as the handler below
            out_of_bounds = bounds_detail(exc.errors)
            if out_of_bounds is not None:
                return JSONResponse(_error_body(out_of_bounds, 400), status_code=400)
            return JSONResponse(
                {"detail": exc.errors, "message": "Request validation failed"}, status_code=422
            )
        if exc.status_code >= 500:
            logger.warning(
                "%s (%s) on %s %s", type(exc).__name__, exc.status_code, request.method, request.url.path
            )
        return JSONResponse(
            _error_body(exc.detail, exc.status_code), status_code=exc.status_code, headers=headers
        )

    async def database_error(request: Request, exc: Exception) -> JSONResponse:
        # the one place that turns a lost database into 503 (app/errors.py decides what counts)
        if isinstance(exc, asyncpg.QueryCanceledError):  # DB_STATEMENT_TIMEOUT_MS ran out
            return await timeout_error(request, exc)
        if not database_unavailable(exc):
            raise exc
        resources = getattr(request.app.state, "resources", None)
        supervisor = getattr(resources, "database", None)
        if supervisor is not None:
            supervisor.report_failure(exc)
        logger.warning(
            "Database unavailable (%s) on %s %s", type(exc).__name__, request.method, request.url.path
        )
        detail = exc.detail if isinstance(exc, DatabaseUnavailable) else DatabaseUnavailable.default_detail
        return JSONResponse(
            _error_body(detail, 503), status_code=503, headers={"Retry-After": str(RETRY_AFTER_DB_S)}
        )

    for kind in DATABASE_ERROR_TYPES:
        app.add_exception_handler(kind, database_error)

    @app.exception_handler(TimeoutError)
    async def timeout_error(request: Request, exc: Exception) -> JSONResponse:
        # a statement past its client-side timeout (QUERY_TIMEOUT_MS): the database is slow right now
        logger.warning("Timed out on %s %s", request.method, request.url.path)
        return JSONResponse(
            _error_body(
                "The database did not answer in time (it is slow or overloaded right now); try again shortly",
                503,
            ),
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_DB_S)},
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # a well-typed value out of its bounds is 400 with a sentence, a malformed request 422
        if (out_of_bounds := bounds_detail(exc.errors())) is not None:
            return JSONResponse(_error_body(out_of_bounds, 400), status_code=400)
        return JSONResponse(
            {"detail": _clean_validation_errors(exc.errors()), "message": "Request validation failed"},
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = _error_body(exc.detail, exc.status_code)
        if exc.status_code == 422:  # the body guard's "not UTF-8": the contract's validation shape
            body["message"] = "Request validation failed"
        return JSONResponse(
            body,
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    # Unhandled exceptions are answered by RequestContextMiddleware (it knows the request id).


def create_app(settings: Settings | None = None, *, attach_database: bool = False) -> FastAPI:
    """Build the application (resources open in the lifespan, not here).

    `attach_database`: with the embedded PostgreSQL, connect to the one a running service owns
    instead of starting it (the stdio MCP server; it then serves no HTTP).
    """
    settings = settings or get_settings()
    configure_logging(debug=settings.debug, console_json=settings.console_json)
    app = FastAPI(
        title="ragoverlay",
        version="0.1.0",
        description="A drop-in, faster and safer replacement for LibreChat's RAG API.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.resources = None
    app.state.rate_limiter = RateLimiter(
        {
            "search": settings.search_rate_per_minute,
            "embed": settings.embed_rate_per_minute,
            "reindex": settings.reindex_rate_per_minute,
            SESSION_LIMIT: settings.mcp_session_create_rate_per_minute,
        }
    )
    app.state.attach_database = attach_database
    app.state.mcp_sessions = None
    app.state.mcp_http = settings.mcp_enabled and not attach_database
    if app.state.mcp_http:
        app.router.routes.append(mcp_route(settings, app.state.rate_limiter))
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    # the limit runs after authentication: the client it counts is the token's user id
    authed = [Depends(get_principal), Depends(enforce_rate_limit)]
    routers = [embed.router, documents.router, v2_query.router, v2_admin.router, jobs.router, admin.router]
    # every authenticated router: a limited route (LIMITED_ROUTES) documents its 429 wherever it lives
    document_rate_limits(*routers)
    for router in routers:
        app.include_router(router, dependencies=authed)
    install_openapi(app, settings.entity_id_pattern)
    # innermost of the three: a refused body still gets CORS headers, a request id and an access line
    app.add_middleware(
        BodyGuardMiddleware,
        max_body_bytes=settings.max_json_body_bytes,
        exempt_paths=embed.STREAMED_UPLOAD_PATHS | v2_admin.STREAMED_UPLOAD_PATHS,
    )
    # outside the body guard: a body that stops arriving is answered 408 whoever was reading it
    app.add_middleware(BodyTimeoutMiddleware, timeout_s=settings.request_body_timeout_s)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["X-Request-ID"],
    )
    # inside the request context (its 500s are counted), outside everything that can answer
    app.add_middleware(metrics.MetricsMiddleware)
    app.add_middleware(RequestContextMiddleware)
    return app
