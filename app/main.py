"""The FastAPI application: `create_app()` and the lifespan that opens and closes every resource."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any

import asyncpg
from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app import metrics
from app.access.principal import TokenCache
from app.api import admin, documents, embed, health, jobs, v2_admin, v2_query
from app.api import metrics as metrics_route
from app.api.guards import BodyGuardMiddleware, not_json_errors
from app.api.openapi import install_openapi
from app.api.ratelimit import document_rate_limits, enforce_rate_limit
from app.clients.embeddings import WarmsUp
from app.config import Settings, get_settings
from app.config_sections import McpSettings
from app.deps import get_principal
from app.errors import (
    DatabaseUnavailable,
    InvalidInput,
    RagError,
    database_unavailable,
)
from app.ingest.limits import ParseLimits
from app.ingest.loaders.ocr import startup_note as ocr_startup_note
from app.logs import RequestContextMiddleware, configure_logging, request_id_var
from app.mcp.http import SESSION_LIMIT, mcp_route, open_sessions
from app.mcp.server import build_server as build_mcp_server
from app.ratelimit import RateLimiter
from app.runtime.stalls import BodyTimeoutMiddleware
from app.services import build_services
from app.text import vocabulary
from app.validation import bounds_detail

logger = logging.getLogger(__name__)

UNAUTHENTICATED_WARNING = (
    "JWT_SECRET is not set: the service runs WITHOUT authentication (every caller is 'public'). "
    "Set JWT_SECRET to LibreChat's secret for any shared deployment."
)


def _warm_up(embedder: object, v2_enabled: bool, stack: contextlib.AsyncExitStack) -> None:
    """Load the local model, and with V2 on the refusal's word lists, in the background, so /health
    answers at once and no question waits for them."""
    loads: list[Coroutine[Any, Any, None]] = []
    if isinstance(embedder, WarmsUp):
        loads.append(embedder.warmup())
    if v2_enabled:
        loads.append(asyncio.to_thread(vocabulary.warm_up))
    for load in loads:
        task = asyncio.create_task(load)
        stack.callback(task.cancel)


def _startup_warnings(settings: Settings) -> None:
    if not settings.auth_enabled:
        logger.warning(UNAUTHENTICATED_WARNING)
    level, note = ocr_startup_note(ParseLimits.from_settings(settings).ocr, settings.pdf_extract_images)
    logger.log(level, note)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open every service (app/services.py), serve, then close them in reverse."""
    settings: Settings = app.state.settings
    _startup_warnings(settings)
    async with contextlib.AsyncExitStack() as stack:
        services = await build_services(settings, stack, attach_database=app.state.attach_database)
        app.state.services = services
        try:
            if app.state.mcp_http:
                # inside the app's lifespan: sessions end before the services they use close
                server = build_mcp_server(services, limiter=app.state.rate_limiter)
                sessions = open_sessions(app, server, McpSettings.from_settings(settings))
                await stack.enter_async_context(sessions)
            _warm_up(services.embedder, bool(settings.v2_namespace_ids), stack)
            logger.info(
                "ragoverlay ready: collection=%s provider=%s model=%s blobs=%s auth=%s",
                *(services.info.collection_name, settings.provider, settings.model, services.blobs.kind),
                "on" if settings.auth_enabled else "OFF",
            )
            yield
        finally:
            app.state.services = None


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


# the methods a 405's Allow may name, in the order it names them
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> str:
    """A 405's `Allow`: every method some route answers on this path (RFC 9110 wants the full set).

    Starlette names only the methods of the first route whose path matched, and each method of a
    path is a route of its own here (`GET /documents` and `DELETE /documents`). Each route is asked
    whether it would take the request with each method, so routers included in routers count too.
    """
    routes = list(routes)
    allowed = [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in routes)
    ]
    return ", ".join(allowed)


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the contract's shapes."""

    @app.exception_handler(RagError)
    async def rag_error(request: Request, exc: RagError) -> JSONResponse:
        if isinstance(exc, DatabaseUnavailable):
            return await database_error(request, exc)
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
            _error_body(exc.detail, exc.status_code), status_code=exc.status_code, headers=exc.headers
        )

    async def database_error(request: Request, exc: Exception) -> JSONResponse:
        # the one place that turns a lost database into 503 (app/errors.py decides what counts)
        if isinstance(exc, asyncpg.QueryCanceledError):  # DB_STATEMENT_TIMEOUT_MS ran out
            return await timeout_error(request, exc)
        if not database_unavailable(exc):
            raise exc
        services = getattr(request.app.state, "services", None)
        if services is not None:
            services.database.report_failure(exc)
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
        errors = _clean_validation_errors(exc.errors())
        # JSON sent as a form (curl -d) or without a type: say to send the header, not "a dictionary"
        errors = not_json_errors(errors, request.headers.get("content-type")) or errors
        return JSONResponse({"detail": errors, "message": "Request validation failed"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = _error_body(exc.detail, exc.status_code)
        if exc.status_code == 422:  # the body guard's "not UTF-8": the contract's validation shape
            body["message"] = "Request validation failed"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed_methods(request.app.router.routes, request.scope)}
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

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
    app.state.services = None
    app.state.rate_limiter = RateLimiter(
        {
            "search": settings.search_rate_per_minute,
            "embed": settings.embed_rate_per_minute,
            "reindex": settings.reindex_rate_per_minute,
            SESSION_LIMIT: settings.mcp_session_create_rate_per_minute,
        }
    )
    app.state.attach_database = attach_database
    app.state.token_cache = TokenCache()  # tokens whose signature was verified (app/access/principal.py)
    app.state.mcp_sessions = None
    app.state.mcp_http = settings.mcp_enabled and not attach_database
    if app.state.mcp_http:
        app.router.routes.append(mcp_route(McpSettings.from_settings(settings), app.state.rate_limiter))
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
