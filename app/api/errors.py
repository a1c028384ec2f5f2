"""The HTTP side of the error tree: every exception as the contract's shapes (`install_error_handlers`).

`app/errors.py` says what went wrong; this module says how it is answered: a `RagError` with its
status and `detail`; a lost database 503 with `Retry-After` (and the supervisor told); a statement
past its client-side timeout 503; a malformed request 422 in the validation shape, a well-typed
value out of its bounds 400 with a sentence; a 405 with the full `Allow`. Server errors carry the
request id; no exception text reaches a body. Unhandled exceptions are answered by
`RequestContextMiddleware` (`app/logs.py`), which knows the request id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.api.body_limits import not_json_errors
from app.errors import DatabaseUnavailable, InvalidInput, RagError, database_unavailable
from app.logs import request_id_var
from app.validation import bounds_detail

logger = logging.getLogger(__name__)

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


async def rag_error(request: Request, exc: Exception) -> JSONResponse:
    """A `RagError`: its status and detail (an `InvalidInput` in the validation shape or as a 400)."""
    assert isinstance(exc, RagError)
    if isinstance(exc, DatabaseUnavailable):
        return await database_error(request, exc)
    if isinstance(exc, InvalidInput):
        # the multipart routes check their fields themselves: the same rule as `validation_error`
        out_of_bounds = bounds_detail(exc.errors)
        if out_of_bounds is not None:
            return JSONResponse(_error_body(out_of_bounds, 400), status_code=400)
        return JSONResponse({"detail": exc.errors, "message": "Request validation failed"}, status_code=422)
    if exc.status_code >= 500:
        logger.warning(
            "%s (%s) on %s %s", type(exc).__name__, exc.status_code, request.method, request.url.path
        )
    return JSONResponse(
        _error_body(exc.detail, exc.status_code), status_code=exc.status_code, headers=exc.headers
    )


async def database_error(request: Request, exc: Exception) -> JSONResponse:
    """A lost database: 503 with `Retry-After`, and the supervisor told (the one place that does it)."""
    if isinstance(exc, asyncpg.QueryCanceledError):  # DB_STATEMENT_TIMEOUT_MS ran out
        return await timeout_error(request, exc)
    if not database_unavailable(exc):  # app/errors.py decides what counts
        raise exc
    services = getattr(request.app.state, "services", None)
    if services is not None:
        services.database.report_failure(exc)
    logger.warning("Database unavailable (%s) on %s %s", type(exc).__name__, request.method, request.url.path)
    detail = exc.detail if isinstance(exc, DatabaseUnavailable) else DatabaseUnavailable.default_detail
    return JSONResponse(
        _error_body(detail, 503), status_code=503, headers={"Retry-After": str(RETRY_AFTER_DB_S)}
    )


async def timeout_error(request: Request, exc: Exception) -> JSONResponse:
    """A statement past its client-side timeout (QUERY_TIMEOUT_MS): the database is slow right now."""
    logger.warning("Timed out on %s %s", request.method, request.url.path)
    return JSONResponse(
        _error_body(
            "The database did not answer in time (it is slow or overloaded right now); try again shortly", 503
        ),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_DB_S)},
    )


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """A well-typed value out of its bounds is 400 with a sentence, a malformed request 422."""
    assert isinstance(exc, RequestValidationError)
    if (out_of_bounds := bounds_detail(exc.errors())) is not None:
        return JSONResponse(_error_body(out_of_bounds, 400), status_code=400)
    errors = _clean_validation_errors(exc.errors())
    # JSON sent as a form (curl -d) or without a type: say to send the header, not "a dictionary"
    errors = not_json_errors(errors, request.headers.get("content-type")) or errors
    return JSONResponse({"detail": errors, "message": "Request validation failed"}, status_code=422)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (404, 405 with the full `Allow`, the body guard's 422) in our shape."""
    assert isinstance(exc, StarletteHTTPException)
    body = _error_body(exc.detail, exc.status_code)
    if exc.status_code == 422:  # the body guard's "not UTF-8": the contract's validation shape
        body["message"] = "Request validation failed"
    headers = getattr(exc, "headers", None)
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request.app.router.routes, request.scope)}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the contract's shapes (unhandled ones: RequestContextMiddleware)."""
    app.add_exception_handler(RagError, rag_error)
    for kind in DATABASE_ERROR_TYPES:
        app.add_exception_handler(kind, database_error)
    app.add_exception_handler(TimeoutError, timeout_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
