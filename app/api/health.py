"""`GET /health`: UP only when the database answers.

Consistent with every other route: while the database supervisor (app/runtime/supervisor.py) knows
the database is down, /health says DOWN at once, exactly when the other routes answer 503; otherwise
it asks the database through the pool, and a failure wakes the supervisor.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.schemas import HealthResponse
from app.store import queries

router = APIRouter(tags=["health"])
logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0


@router.get(
    "/health",
    response_model=HealthResponse,
    responses={503: {"model": HealthResponse, "description": "The database is unreachable (DOWN)"}},
)
async def health(request: Request) -> JSONResponse:
    """200 `{"status": "UP"}`, or 503 `{"status": "DOWN"}` when the database is unreachable."""
    resources = getattr(request.app.state, "resources", None)
    if resources is None:
        return JSONResponse({"status": "DOWN"}, status_code=503)
    supervisor = getattr(resources, "database", None)
    if supervisor is not None and not supervisor.up:
        return JSONResponse({"status": "DOWN"}, status_code=503)
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with resources.pool.acquire(timeout=HEALTH_TIMEOUT_S) as conn:
                await conn.fetchval(queries.HEALTH)
    except Exception as exc:  # any failure to reach the database means DOWN; the reason goes to the log only
        logger.warning("Health check failed: database unreachable (%s)", type(exc).__name__)
        if supervisor is not None:
            supervisor.report_failure()
        return JSONResponse({"status": "DOWN"}, status_code=503)
    return JSONResponse({"status": "UP"})
