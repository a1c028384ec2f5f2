"""`/mcp`: the MCP server over streamable HTTP, inside the service's own FastAPI app.

    app.router.routes.append(mcp_route(mcp, limiter))    # create_app; mcp = McpSettings.from_settings(...)
    async with open_sessions(app, server, mcp):          # lifespan, after the resources are open
        ...

Every request is authenticated before the SDK sees it (`app/mcp/auth.py`); the caller rides on the
ASGI scope for the tools to read, and as the scope's `user` so the SDK binds each session to the
principal that opened it (a later request of another principal gets 404, as for an unknown session).
The SDK's session manager enforces the idle TTL (MCP_SESSION_TTL_SECONDS) and the session cap
(MCP_SESSION_MAX, 503 beyond); opening a session is limited per client address
(MCP_SESSION_CREATE_RATE_PER_MINUTE, 429 with Retry-After). With MCP_STATELESS (on by default for a
worker of several, `RAG_WORKERS` > 1) no session is kept: every request is served on its own, by
whichever process or replica receives it, and the session settings do not apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.config_sections import McpSettings
from app.errors import InvalidInput, RagError, Unauthorized
from app.mcp.auth import McpAuthenticator
from app.mcp.server import CALLER_SCOPE_KEY
from app.metrics import MCP_SESSIONS_REFUSED
from app.ratelimit import RateLimiter
from app.safe_text import unsafe_in_json

PATH = "/mcp"
SESSION_LIMIT = "mcp_session"  # the RateLimiter budget new sessions count against
UNAUTHORISED_CODE = -32001  # a JSON-RPC server error code: the request proved no caller


async def _answer(send: Send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    """A JSON-RPC error body (no id: it answers the HTTP request, not one message)."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": UNAUTHORISED_CODE if status == 401 else -32000, "message": message},
        }
    ).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    """A JSON answer."""
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes:
    # bounded: BodyGuardMiddleware has refused anything past MAX_JSON_BODY_BYTES on the way in
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once, then the connection's own messages (the SDK watches them for a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _unsafe_message(body: bytes) -> dict[str, Any] | None:
    """A JSON-RPC error for a message holding NUL or a lone surrogate anywhere (as the HTTP edge refuses).

    The SDK's parser would refuse a lone surrogate with a bare "Parse error", and NUL would reach
    the tools; this names the field and what to send instead. Unparseable bodies are the SDK's.
    """
    try:
        value = json.loads(body)
    except ValueError:
        return None
    where = unsafe_in_json(value)
    if where is None:
        return None
    request_id = value.get("id") if isinstance(value, dict) else None
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": INVALID_PARAMS, "message": f"Invalid params: {where}"},
    }


def client_address(scope: Scope) -> str:
    """The client's address as the server saw it (behind a proxy: uvicorn's --proxy-headers decide)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class McpEndpoint:
    """The ASGI app behind `/mcp`: authenticate, limit new sessions, hand over to the SDK."""

    def __init__(self, settings: McpSettings, limiter: RateLimiter) -> None:
        self.auth = McpAuthenticator(settings)
        self.limiter = limiter
        self.user_header = settings.gateway_user_header
        self.stateless = settings.stateless

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request to /mcp."""
        app = scope.get("app")
        manager: StreamableHTTPSessionManager | None = getattr(
            getattr(app, "state", None), "mcp_sessions", None
        )
        if manager is None:
            await _answer(
                send, 503, "The MCP server is starting or disabled (MCP_ENABLED); try again shortly"
            )
            return
        headers = Headers(scope=scope)
        try:
            caller = self.auth.authenticate(
                headers.getlist("authorization"), headers.getlist(self.user_header)
            )
        except Unauthorized as exc:
            MCP_SESSIONS_REFUSED.labels(reason="unauthorised").inc()
            await _answer(send, 401, str(exc.detail), {"WWW-Authenticate": "Bearer"})
            return
        except InvalidInput as exc:
            await _answer(send, 401, "; ".join(str(e.get("msg", "")) for e in exc.errors))
            return
        except RagError as exc:
            await _answer(send, exc.status_code, str(exc.detail))
            return
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        opens_session = version is None or version in HANDSHAKE_PROTOCOL_VERSIONS
        if (
            scope["method"] == "POST"
            and MCP_SESSION_ID_HEADER not in headers
            and opens_session
            and not self.stateless  # nothing is kept: a request is a request, the search budget counts it
        ):
            # a handshake-era request without a session id opens one (only `initialize` can succeed);
            # the sessionless protocol revisions open none and count as plain requests
            wait = self.limiter.check(SESSION_LIMIT, client_address(scope))
            if wait > 0:
                MCP_SESSIONS_REFUSED.labels(reason="rate").inc()
                await _answer(
                    send,
                    429,
                    "Too many new MCP sessions from this address (MCP_SESSION_CREATE_RATE_PER_MINUTE); "
                    "reuse the session you have, or retry later",
                    {"Retry-After": str(math.ceil(wait))},
                )
                return
        if scope["method"] == "POST":
            body = await _read_body(receive)
            refusal = _unsafe_message(body)
            if refusal is not None:
                await send_json(send, 400, refusal)
                return
            receive = _replay(body, receive)
        scope = dict(scope)
        scope[CALLER_SCOPE_KEY] = caller
        # the SDK refuses a session's requests from any other principal than the one that opened it
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=caller.identity, scopes=[]))
        await manager.handle_request(scope, receive, send)


def mcp_route(settings: McpSettings, limiter: RateLimiter) -> Route:
    """The `/mcp` route (GET for the event stream, POST for messages, DELETE to end a session)."""
    return Route(
        PATH,
        endpoint=McpEndpoint(settings, limiter),
        methods=["GET", "POST", "DELETE"],
        include_in_schema=False,
    )


@contextlib.asynccontextmanager
async def open_sessions(app: FastAPI, server: MCPServer[Any], settings: McpSettings) -> AsyncIterator[None]:
    """Run the SDK's session manager for the app's life (its sessions end before the resources close)."""
    # the Starlette app it returns is not used: /mcp is our route; this builds the session manager.
    # `host` is not a loopback name, so the SDK adds no Host allow-list of its own (the service
    # authenticates every request instead, and may run behind any proxy name)
    server.streamable_http_app(
        host="0.0.0.0",
        stateless_http=settings.stateless,
        session_idle_timeout=settings.session_ttl_s,
        max_sessions=settings.session_max,
        max_request_body_size=settings.max_body_bytes,
    )
    manager = server.session_manager
    # The manager's task group must be left by the task that entered it, and a lifespan may be
    # entered and left by different tasks (test fixtures are): so one task of its own runs it.
    ready, stop = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        async with manager.run():
            ready.set()
            await stop.wait()

    task = asyncio.create_task(run(), name="mcp-sessions")
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiter.cancel()
        await task  # it failed before it was ready: raise its error
    app.state.mcp_sessions = manager
    try:
        yield
    finally:
        app.state.mcp_sessions = None
        stop.set()
        await task
