"""`GET /metrics`: the Prometheus text format (app/metrics.py says what is in it).

Who may read it: an admin (CONTRACT.md section 2: a token whose id is in RAG_ADMIN_USER_IDS, or with
`role: "ADMIN"`), or a scraper sending `Authorization: Bearer <METRICS_TOKEN>` when that setting is
set. Prometheus sends a static bearer token (`authorization: {credentials: ...}` in its scrape
config) and cannot mint LibreChat's 5-minute JWTs, so METRICS_TOKEN is what a scraper uses. Without
JWT_SECRET nobody is an admin, so only METRICS_TOKEN opens it (else 403).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app import metrics
from app.access.principal import Principal, single_authorization
from app.deps import ServicesDep, get_admin, get_principal
from app.errors import Forbidden
from app.schemas import AUTHED_ERRORS, error_responses

router = APIRouter(tags=["operations"])


async def metrics_reader(request: Request, services: ServicesDep) -> None:
    """METRICS_TOKEN as a bearer token, else an admin's JWT (401/403 otherwise)."""
    token = services.settings.metrics_token
    if token:
        header = single_authorization(request.headers.getlist("authorization")) or ""
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode()):
            return
    try:
        await _admin(request, services)
    except Forbidden as exc:
        # the scraper's way in is METRICS_TOKEN: name it, whether it is set or not
        hint = (
            "or send METRICS_TOKEN as `Authorization: Bearer <METRICS_TOKEN>`"
            if token
            else "or set METRICS_TOKEN and send it as `Authorization: Bearer <METRICS_TOKEN>`"
        )
        raise Forbidden(f"{exc.detail}; {hint}") from None


async def _admin(request: Request, services: ServicesDep) -> Principal:
    # the same checks (and 401s) as every other route
    return await get_admin(await get_principal(request, services))


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format (version 0.0.4)",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **error_responses(403, *AUTHED_ERRORS),
    },
)
async def prometheus_metrics(_: Annotated[None, Depends(metrics_reader)]) -> Response:
    """Request, search-stage, ingest-stage and embedding metrics, database state, job gauges."""
    return Response(await metrics.render(), media_type=metrics.CONTENT_TYPE_LATEST)
