"""Per-client rate limits on search, embed and reindex: 429 with `Retry-After` once a budget is spent.

Each limit is N requests per minute per client (`SEARCH_RATE_PER_MINUTE`, `EMBED_RATE_PER_MINUTE`,
`REINDEX_RATE_PER_MINUTE`; 0 turns it off), counted by `app.ratelimit.RateLimiter` (the MCP tools
count against the same budgets). The client is the token's user id, or the remote address without
authentication.

Routes opt in with the `enforce_rate_limit` dependency; it finds the route's limit by its path
template (`LIMITED_ROUTES`). A router of admin routes adds it, and documents its 429, like this:

    router = APIRouter(dependencies=[Depends(enforce_rate_limit)])   # /admin/reindex -> "reindex"
    document_rate_limits(router)                                      # before include_router
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute

from app import metrics
from app.errors import RateLimited
from app.ratelimit import RateLimiter

# route template -> the limit it counts against
LIMITED_ROUTES: dict[str, str] = {
    "/query": "search",
    "/query_multiple": "search",
    "/query_v2": "search",
    "/embed": "embed",
    "/embed-upload": "embed",
    "/local/embed": "embed",
    "/admin/reindex": "reindex",
}
SETTING_OF: dict[str, str] = {
    "search": "SEARCH_RATE_PER_MINUTE",
    "embed": "EMBED_RATE_PER_MINUTE",
    "reindex": "REINDEX_RATE_PER_MINUTE",
}


def client_key(request: Request) -> str:
    """Who counts: the token's user id, else the remote address (behind a trusted proxy, its client)."""
    principal = getattr(request.state, "principal", None)
    user_id = getattr(principal, "user_id", None)
    if user_id:
        return f"user:{user_id}"
    client = request.client
    return f"addr:{client.host}" if client is not None else "addr:unknown"


async def enforce_rate_limit(request: Request) -> None:
    """FastAPI dependency: refuse (429) a request over its client's budget for this route's limit."""
    route = request.scope.get("route")
    limit = LIMITED_ROUTES.get(getattr(route, "path", ""), "")
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if not limit or limiter is None:
        return
    wait = limiter.check(limit, client_key(request))
    if wait > 0:
        metrics.RATE_LIMITED.labels(limit).inc()
        retry_after = max(1, math.ceil(wait))
        raise RateLimited(
            f"Too many {limit} requests from this client: {SETTING_OF[limit]} allows "
            f"{limiter.per_minute[limit]} per minute; retry after {retry_after} s",
            retry_after_s=retry_after,
        )


RATE_LIMITED_RESPONSE: dict[str, Any] = {
    "description": "Too many requests from this client for this route's per-minute limit "
    "(SEARCH_RATE_PER_MINUTE, EMBED_RATE_PER_MINUTE or REINDEX_RATE_PER_MINUTE); wait `Retry-After` "
    "seconds",
    "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["detail"],
                "properties": {"detail": {"type": "string"}},
            }
        }
    },
}


def document_rate_limits(*routers: APIRouter) -> None:
    """Add the 429 answer to the OpenAPI responses of every rate-limited route of `routers`.

    Call it before the routers are included (FastAPI builds each included route's answers once).
    """
    for router in routers:
        for route in router.routes:
            inner = getattr(route, "original_router", None)  # a router included in this one
            if isinstance(inner, APIRouter):
                document_rate_limits(inner)
            elif isinstance(route, APIRoute) and route.path in LIMITED_ROUTES:
                route.responses.setdefault(429, RATE_LIMITED_RESPONSE)
