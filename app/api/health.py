"""`GET /health`: UP only when the database answers.

Consistent with every other route: while the database supervisor (app/runtime/supervisor.py) knows
the database is down, /health says DOWN at once, exactly when the other routes answer 503; otherwise
the supervisor asks the database through the pool, and a failure wakes it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.schemas import HealthResponse

router = APIRouter(tags=["health"])

HEALTH_TIMEOUT_S = 2.0


@router.get(
    "/health",
    response_model=HealthResponse,
    responses={503: {"model": HealthResponse, "description": "The database is unreachable (DOWN)"}},
)
async def health(request: Request) -> JSONResponse:
    """200 `{"status": "UP"}`, or 503 `{"status": "DOWN"}` when the database is unreachable."""
    # not a dependency: a service that is not running yet is DOWN, not 503 with a detail
    services = getattr(request.app.state, "services", None)
    if services is None or not await services.database.healthy(HEALTH_TIMEOUT_S):
        return JSONResponse({"status": "DOWN"}, status_code=503)
    return JSONResponse({"status": "UP"})
