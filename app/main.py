"""The FastAPI application: `create_app()` and the lifespan that opens and closes every resource."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app import metrics
from app.access.principal import TokenCache
from app.api import admin, console, documents, embed, health, jobs, v2_admin, v2_query
from app.api import metrics as metrics_route
from app.api.body_limits import BodyGuardMiddleware
from app.api.errors import install_error_handlers
from app.api.openapi import install_openapi
from app.api.ratelimit import document_rate_limits, enforce_rate_limit
from app.clients.embeddings import WarmsUp
from app.config import Settings, get_settings, load_settings
from app.config_sections import McpSettings
from app.deps import get_principal
from app.ingest.limits import ParseLimits
from app.ingest.loaders.ocr import startup_note as ocr_startup_note
from app.logs import RequestContextMiddleware, configure_logging
from app.mcp.http import SESSION_LIMIT, mcp_route, open_sessions
from app.mcp.server import build_server as build_mcp_server
from app.ratelimit import RateLimiter, per_process_budgets
from app.runtime.request_timeouts import BodyTimeoutMiddleware
from app.runtime.workers import die_with_parent, worker_settings
from app.services import build_services
from app.text import vocabulary

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


def worker_app() -> FastAPI:
    """The app of one of several workers (uvicorn's factory): the parent owns the database, attach to it."""
    die_with_parent()  # no worker outlives its parent, however the parent ends
    settings = worker_settings(load_settings())
    return create_app(settings, attach_database=settings.use_embedded_postgres, serve_mcp=True)


def create_app(
    settings: Settings | None = None, *, attach_database: bool = False, serve_mcp: bool | None = None
) -> FastAPI:
    """Build the application (resources open in the lifespan, not here).

    `attach_database`: with the embedded PostgreSQL, connect to the one a running service owns
    instead of starting it (the stdio MCP server, which then serves no MCP over HTTP unless
    `serve_mcp`; a worker of several, app/runtime/workers.py, which does).
    """
    settings = settings or get_settings()
    configure_logging(
        debug=settings.debug, console_json=settings.console_json, redact="logs" in settings.pii_redact
    )
    app = FastAPI(
        title="ragoverlay",
        version="0.1.0",
        description="A drop-in, faster and safer replacement for LibreChat's RAG API.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.services = None
    app.state.rate_limiter = RateLimiter(
        per_process_budgets(
            {
                "search": settings.search_rate_per_minute,
                "embed": settings.embed_rate_per_minute,
                "reindex": settings.reindex_rate_per_minute,
                SESSION_LIMIT: settings.mcp_session_create_rate_per_minute,
            },
            settings.workers,
        )
    )
    app.state.attach_database = attach_database
    app.state.token_cache = TokenCache()  # tokens whose signature was verified (app/access/principal.py)
    app.state.mcp_sessions = None
    app.state.mcp_http = settings.mcp_enabled and (not attach_database if serve_mcp is None else serve_mcp)
    if app.state.mcp_http:
        app.router.routes.append(mcp_route(McpSettings.from_settings(settings), app.state.rate_limiter))
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    # the operator console: its own admin check (a cookie, or the local operator), not the bearer's
    console.install_console(app)
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
