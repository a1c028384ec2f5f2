"""`/console`: the operator console, server-rendered pages for admins (app/console/ has the reads).

    GET  /console                       knowledge bases with their counts and health, the queue
    GET  /console/kb/{namespace}        one knowledge base's files: search, sort, pages of 50
    GET  /console/jobs                  jobs with live progress bars (console.js polls /console/api/jobs)
    GET  /console/runs                  evidence index runs: their files' states, chunks, failures
                                        (console.js polls /console/api/runs)
    POST /console/jobs/{id}/retry       a parked job back to the queue (CSRF token)
    GET  /console/search                a question as a chosen user: V1 beside evidence search, and why
    GET  /console/metrics               latency histogram, request counts, V2 outcomes, ingestion per hour
    GET|POST /console/login, POST /console/logout

Every answer carries a strict Content-Security-Policy (scripts and styles from /console/static only,
no inline code), `no-store` and `frame-ancestors 'none'`. Not in the OpenAPI document: these are pages.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from app.access.principal import Principal
from app.console.session import (
    COOKIE,
    COOKIE_PATH,
    admin_from_token,
    check_csrf,
    check_origin,
    console_principal,
    csrf_token,
)
from app.console.views import RUNS_SHOWN, ConsoleService, page_ranges
from app.deps import ServicesDep
from app.errors import RagError, Unauthorized
from app.services import Services

router = APIRouter(prefix="/console", include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"
_STATIC_TYPES = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_env = Environment(
    loader=PackageLoader("app.console", "templates"),
    autoescape=select_autoescape(default=True),
    enable_async=False,
)
_env.filters["pagelist"] = page_ranges


def _page(request: Request, services: Services, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A template rendered with the session's CSRF token, under the console's headers."""
    template = _env.get_template(name)
    html = template.render(
        csrf=csrf_token(request, services),
        auth=services.settings.auth_enabled,
        page=name.removesuffix(".html"),
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


class LoginNeeded(Exception):
    """A console page asked for without a session: answered with the login page's redirect."""


async def _page_admin(request: Request, services: ServicesDep) -> Principal:
    """The admin opening a page; no session: LoginNeeded (a non-admin's token: 403)."""
    principal = console_principal(request, services)
    if principal is None:
        raise LoginNeeded()
    return principal


async def _action_admin(request: Request, services: ServicesDep) -> Principal:
    """The admin behind a script's call or a form's action; no session: 401 (no page to send it to)."""
    principal = console_principal(request, services)
    if principal is None:
        raise Unauthorized("Log in to the console first")
    return principal


PageAdmin = Annotated[Principal, Depends(_page_admin)]
ActionAdmin = Annotated[Principal, Depends(_action_admin)]


async def _to_login(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/console/login", status_code=303, headers=_HEADERS)


def install_console(app: FastAPI) -> None:
    """The console's routes and the redirect of a page asked for without a session."""
    app.include_router(router)
    app.add_exception_handler(LoginNeeded, _to_login)


@router.get("")
async def overview(request: Request, services: ServicesDep, admin: PageAdmin) -> Response:
    """Every knowledge base with its files, chunks and health; the job queue."""
    data = await ConsoleService(services).overview()
    return _page(request, services, "overview.html", data=data)


@router.get("/kb/{namespace}")
async def knowledge_base(
    request: Request,
    services: ServicesDep,
    admin: PageAdmin,
    namespace: str,
    q: Annotated[str | None, Query(max_length=200)] = None,
    sort: Annotated[str, Query(max_length=20)] = "name",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> Response:
    """One knowledge base's files, 50 a page."""
    data = await ConsoleService(services).files(namespace, search=q, sort=sort, page=page)
    return _page(request, services, "files.html", data=data)


@router.get("/jobs")
async def jobs_page(request: Request, services: ServicesDep, admin: PageAdmin) -> Response:
    """Running jobs with progress bars, the newest jobs, the parked ones with their reasons."""
    data = await ConsoleService(services).jobs()
    return _page(request, services, "jobs.html", data=data)


@router.get("/runs")
async def runs_page(request: Request, services: ServicesDep, admin: PageAdmin) -> Response:
    """Evidence index runs, newest first: each one's files by state, chunks, and failures with reasons."""
    runs = await ConsoleService(services).runs()
    return _page(request, services, "runs.html", runs=runs, shown=len(runs), limit=RUNS_SHOWN)


@router.get("/api/runs")
async def runs_json(request: Request, services: ServicesDep, admin: ActionAdmin) -> Response:
    """The runs page's figures as JSON, for its progress bars (401 when not logged in)."""
    runs = await ConsoleService(services).runs(failures=0)  # the bars need counts, not the files
    body = [
        {
            "run_id": r.run_id,
            "status": r.status,
            "expected": r.expected,
            "staged": r.staged,
            "staging": r.staging,
            "pending": r.pending,
            "failed": r.failed,
            "chunks": r.chunks,
            "eta_s": None if r.eta_s is None else round(r.eta_s),
        }
        for r in runs
    ]
    return JSONResponse({"runs": body}, headers=_HEADERS)


@router.get("/api/jobs")
async def jobs_json(request: Request, services: ServicesDep, admin: ActionAdmin) -> Response:
    """The jobs page's figures as JSON, for its progress bars (401 when not logged in)."""
    data = await ConsoleService(services).jobs()
    body = {
        "running": [j.model_dump(mode="json", include=_JOB_FIELDS) for j in data.running],
        "recent": [j.model_dump(mode="json", include=_JOB_FIELDS) for j in data.recent],
    }
    return JSONResponse(body, headers=_HEADERS)


_JOB_FIELDS = {"id", "kind", "status", "attempts", "running_s", "progress", "error", "result"}


@router.post("/jobs/{job_id}/retry")
async def retry(
    request: Request,
    services: ServicesDep,
    admin: ActionAdmin,
    job_id: int,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Send a parked job back to the queue, then show the jobs page."""
    check_csrf(request, services, csrf)
    await ConsoleService(services).retry(job_id)
    return RedirectResponse("/console/jobs", status_code=303, headers=_HEADERS)


@router.get("/search")
async def search(
    request: Request,
    services: ServicesDep,
    admin: PageAdmin,
    namespace: Annotated[str | None, Query(max_length=512)] = None,
    user: Annotated[str | None, Query(max_length=512)] = None,
    q: Annotated[str | None, Query(max_length=4000)] = None,
) -> Response:
    """A question over a knowledge base as a chosen user: V1 beside V2 with channels, scores and why."""
    console = ConsoleService(services)
    kbs = (await console.overview()).knowledge_bases
    result = None
    if namespace and q and q.strip():
        result = await console.search(namespace, (user or namespace).strip(), q.strip())
    return _page(
        request, services, "search.html", kbs=kbs, result=result, namespace=namespace, user=user, q=q
    )


@router.get("/metrics")
async def metrics_page(request: Request, services: ServicesDep, admin: PageAdmin) -> Response:
    """Latency histogram, request counts per route, V2 outcomes, uploads since start."""
    data = await ConsoleService(services).metrics()
    return _page(request, services, "metrics.html", data=data)


@router.get("/login")
async def login_form(request: Request, services: ServicesDep) -> Response:
    """The form an admin pastes a token into (without JWT_SECRET: straight to the console)."""
    if not services.settings.auth_enabled:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    return _page(request, services, "login.html", error=None)


@router.post("/login")
async def login(
    request: Request, services: ServicesDep, token: Annotated[str, Form(max_length=8192)]
) -> Response:
    """Check the pasted token as every route does; keep it in the console's cookie until it expires."""
    if not services.settings.auth_enabled:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    check_origin(request)  # no session yet, so no CSRF token: the form must come from our page
    try:
        principal = admin_from_token(token, services)
    except RagError as exc:  # 401 for a bad token, 403 for a non-admin's: said on the form
        return _page(request, services, "login.html", status=exc.status_code, error=exc.detail)
    expires = principal.claims.get("exp")
    max_age = max(int(float(expires) - time.time()), 1) if isinstance(expires, (int, float)) else 3600
    response = RedirectResponse("/console", status_code=303, headers=_HEADERS)
    response.set_cookie(
        COOKIE,
        token.strip(),
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(
    request: Request, services: ServicesDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    """Forget the console's cookie."""
    check_csrf(request, services, csrf)
    response = RedirectResponse("/console/login", status_code=303, headers=_HEADERS)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The console's stylesheet and script (the only ones its policy allows)."""
    media = _STATIC_TYPES.get(name)
    if media is None:
        raise NotFoundPage()
    return Response(
        (STATIC / name).read_bytes(), media_type=media, headers={**_HEADERS, "Cache-Control": "max-age=300"}
    )


class NotFoundPage(RagError):
    """No such console file."""

    status_code = 404
    default_detail = "No such console file"
