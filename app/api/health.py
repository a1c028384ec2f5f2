"""`GET /health`: UP only when the database answers."""

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
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with resources.pool.acquire() as conn:
                await conn.fetchval(queries.HEALTH)
    except Exception:  # any failure to reach the database means DOWN; the reason goes to the log only
        logger.warning("Health check failed: database unreachable")
        return JSONResponse({"status": "DOWN"}, status_code=503)
    return JSONResponse({"status": "UP"})
