"""Who may use the console, and the CSRF token of its few actions.

The console is for admins only, as the admin routes are. A browser cannot send LibreChat's bearer
token on a page load, so an admin pastes an admin token once (`/console/login`): the service checks
it as every route does (signature, expiry, RAG_ADMIN_USER_IDS or role ADMIN) and keeps it in an
HttpOnly, SameSite=Strict cookie scoped to `/console` (Secure over HTTPS), until the token expires.
Without JWT_SECRET, on loopback only, the local operator needs no login (the admin routes' rule);
with ALLOW_UNAUTHENTICATED=true nobody is an admin, so the console stays shut.

Actions (retrying a parked job, logging out) are POST forms carrying a CSRF token: an HMAC of the
session's cookie value under a key derived from JWT_SECRET (or, without one, a random key kept in
DATA_DIR, so every worker process and restart agrees), compared in constant time, and the request's
Origin (when a browser sends one) must be this service's.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from fastapi import Request

from app.access.principal import Principal, anonymous, require_admin, verify_token
from app.errors import Forbidden
from app.services import Services

COOKIE = "ragoverlay_console"
COOKIE_PATH = "/console"
_KEY_FILE = "console-csrf.key"
_LOCAL = "local-operator"


def console_principal(request: Request, services: Services) -> Principal | None:
    """The admin using the console, or None (not logged in). Raises Forbidden for a non-admin token."""
    settings = services.settings
    if not settings.auth_enabled:
        principal = anonymous(local_operator=not settings.allow_unauthenticated)
        require_admin(principal)  # with ALLOW_UNAUTHENTICATED nobody is: 403 names what to set
        return principal
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    return admin_from_token(token, services)


def admin_from_token(token: str, services: Services) -> Principal:
    """The admin a pasted token names; the same checks as every route's (401/403 errors)."""
    settings = services.settings
    assert settings.jwt_secret is not None
    principal = verify_token(
        f"Bearer {token.strip()}",
        secret=settings.jwt_secret,
        audience=settings.jwt_audience,
        admin_user_ids=services.admin_ids,
        cache=None,
    )
    require_admin(principal)
    return principal


def _key(services: Services) -> bytes:
    settings = services.settings
    if settings.jwt_secret:
        return hashlib.sha256(b"ragoverlay console csrf\x00" + settings.jwt_secret.encode()).digest()
    return _folder_key(Path(settings.data_dir).resolve() / _KEY_FILE)


@functools.cache
def _folder_key(path: Path) -> bytes:
    """The key kept in DATA_DIR, read (or made) once per process: every page renders a token."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # created exclusively: two workers starting at once keep the first one's key
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def csrf_token(request: Request, services: Services) -> str:
    """The token this session's forms carry."""
    session = request.cookies.get(COOKIE) or _LOCAL
    return hmac.new(_key(services), session.encode(), hashlib.sha256).hexdigest()


def check_origin(request: Request) -> None:
    """Forbidden when a browser says the request comes from another origin than this service."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise Forbidden("The console's forms are accepted from its own pages only")


def check_csrf(request: Request, services: Services, submitted: str | None) -> None:
    """Forbidden unless `submitted` is this session's token and the request comes from this origin."""
    check_origin(request)
    if not submitted or not hmac.compare_digest(submitted, csrf_token(request, services)):
        raise Forbidden("The form's token is missing or stale: reload the page and try again")
