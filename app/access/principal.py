"""Who is calling: the principal behind a LibreChat token, or nobody (CONTRACT.md section 2).

Pure functions: no FastAPI here, so the rules are tested without HTTP.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from app.errors import Forbidden, InvalidInput, Unauthorized
from app.safe_text import UNSAFE_ERROR_TYPE, unsafe_reason

PUBLIC_NAMESPACE = "public"
_ALGORITHMS = ["HS256"]
LEEWAY_S = 5
_TIME_CLAIMS = ("exp", "iat", "nbf")
# string claims we read: each must be storable (it becomes an owner / uploader in SQL)
_STRING_CLAIMS = ("id", "role")


@dataclass(frozen=True)
class Principal:
    """The caller: a LibreChat user id from the token, or nobody (auth disabled)."""

    user_id: str | None
    is_admin: bool = False
    claims: Mapping[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        """The caller's own namespace: the user id, or `public` without auth."""
        return self.user_id or PUBLIC_NAMESPACE


def anonymous(*, local_operator: bool = False) -> Principal:
    """The principal of every request when JWT_SECRET is unset (rag_api's behaviour).

    `local_operator`: the service listens on loopback only (JWT_SECRET unset and ALLOW_UNAUTHENTICATED
    not set), so whoever calls is on this machine: the operator, who may read what admins read (the
    evidence index's status, the job queue, debug output). With ALLOW_UNAUTHENTICATED=true nobody is.
    """
    return Principal(user_id=None, is_admin=local_operator)


def single_authorization(values: Sequence[str]) -> str | None:
    """The one `Authorization` header of a request; two or more are refused (which one would count?)."""
    if len(values) > 1:
        raise Unauthorized("Missing or invalid Authorization header")
    return values[0] if values else None


TOKEN_CACHE_SIZE = 1024


class TokenCache:
    """Claims of tokens whose signature (and audience) were verified, by token, secret and audience.

    LibreChat signs a token per tool call and its stock `file_search` sends the same one with every
    per-file `/query` (hundreds at once), so a repeat skips PyJWT's ~25 µs. Only what cannot change
    for the same text is skipped: the time claims, the string claims and the user id are checked
    again on every use. Bounded; the oldest entry is forgotten first.
    """

    def __init__(self, size: int = TOKEN_CACHE_SIZE) -> None:
        self.size = size
        self._claims: dict[tuple[str, str, str | None], dict[str, Any]] = {}

    def get(self, token: str, secret: str, audience: str | None) -> dict[str, Any] | None:
        """The verified claims of `token` under `secret` and `audience`, or None when not known."""
        return self._claims.get((token, secret, audience))

    def put(self, token: str, secret: str, audience: str | None, claims: dict[str, Any]) -> None:
        """Remember the claims of a token whose signature `secret` verified (for `audience`)."""
        key = (token, secret, audience)
        if len(self._claims) >= self.size and key not in self._claims:
            del self._claims[next(iter(self._claims))]
        self._claims[key] = claims

    def __len__(self) -> int:
        return len(self._claims)


def verify_token(
    authorization: str | None,
    *,
    secret: str,
    audience: str | None,
    admin_user_ids: frozenset[str] | set[str] = frozenset(),
    now: float | None = None,
    cache: TokenCache | None = None,
) -> Principal:
    """Check `Authorization: Bearer <jwt>` (HS256, `exp` required) and return the principal.

    `cache` spares the signature check of a token seen before (see `TokenCache`).
    """
    if not authorization:
        raise Unauthorized("Missing or invalid Authorization header")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Missing or invalid Authorization header")
    claims = cache.get(token, secret, audience) if cache is not None else None
    if claims is None:
        claims = _decode(token, secret, audience)
        if cache is not None:
            cache.put(token, secret, audience, claims)
    check_time_claims(claims, time.time() if now is None else now)
    check_string_claims(claims)
    user_id = claims.get("id")
    if not isinstance(user_id, str) or not user_id.strip():
        raise Unauthorized("Invalid token: token has no user 'id'")
    is_admin = user_id in admin_user_ids or str(claims.get("role", "")).upper() == "ADMIN"
    return Principal(user_id=user_id, is_admin=is_admin, claims=claims)


SIGNED_ELSEWHERE_DETAIL = (
    "Invalid token: it was not signed with this service's JWT_SECRET; JWT_SECRET must be the same "
    "secret LibreChat signs its tokens with (LibreChat's JWT_SECRET)"
)


def _decode(token: str, secret: str, audience: str | None) -> dict[str, Any]:
    """The claims of `token` once its signature, algorithm and audience are verified (401 otherwise)."""
    # PyJWT would accept `"exp": "1999999999"` or `true` (it calls int()); we check the times ourselves
    options: jwt.types.Options = {
        "require": ["exp"],
        "verify_aud": audience is not None,
        "verify_exp": False,
        "verify_iat": False,
        "verify_nbf": False,
    }
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            secret,
            algorithms=_ALGORITHMS,  # fixed list: `alg: none` and RS/HS confusion are refused
            audience=audience,
            options=options,
        )
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthorized(f"Invalid token: token has no '{exc.claim}' claim") from None
    except jwt.InvalidAudienceError:
        raise Unauthorized("Invalid token: audience does not match") from None
    except jwt.InvalidSignatureError:
        # the usual cause is a JWT_SECRET that differs from LibreChat's; neither secret is named
        raise Unauthorized(SIGNED_ELSEWHERE_DETAIL) from None
    except jwt.InvalidAlgorithmError:
        raise Unauthorized("Invalid token: algorithm not allowed (use HS256)") from None
    except jwt.InvalidTokenError:
        raise Unauthorized("Invalid token: malformed token") from None
    return claims


def check_time_claims(claims: Mapping[str, Any], now: float, leeway: float = LEEWAY_S) -> None:
    """`exp`, `iat` and `nbf` are JSON numbers (RFC 7519 NumericDate), and the token is valid at `now`."""
    for name in _TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        # bool is an int in Python; a string is not a NumericDate even when it holds digits
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Unauthorized(f"Invalid token: '{name}' must be a number (seconds since the epoch)")
    if "exp" not in claims:
        raise Unauthorized("Invalid token: token has no 'exp' claim")
    if claims["exp"] <= now - leeway:
        raise Unauthorized("Invalid token: token has expired")
    if "nbf" in claims and claims["nbf"] > now + leeway:
        raise Unauthorized("Invalid token: token is not valid yet ('nbf' is in the future)")
    if "iat" in claims and claims["iat"] > now + leeway:
        raise Unauthorized("Invalid token: token was issued in the future ('iat')")


def check_string_claims(claims: Mapping[str, Any]) -> None:
    """Refuse (422) a string claim we use that holds NUL or invalid Unicode: it would reach SQL."""
    for name in _STRING_CLAIMS:
        value = claims.get(name)
        if isinstance(value, str) and (reason := unsafe_reason(value)) is not None:
            raise InvalidInput(
                [
                    {
                        "type": UNSAFE_ERROR_TYPE,
                        "loc": ["header", "Authorization", name],
                        "msg": f"Token claim '{name}' {reason}",
                    }
                ]
            )


ADMIN_NEEDED = "This route needs an admin token (RAG_ADMIN_USER_IDS or role ADMIN)"
# without JWT_SECRET every caller is anonymous, so no token can make anyone an admin: say what can
ADMIN_NEEDS_AUTH = (
    "This route needs an admin, and without JWT_SECRET every caller is anonymous, so nobody is one: "
    "set JWT_SECRET (LibreChat's) and RAG_ADMIN_USER_IDS, then send an admin's token"
)


def require_admin(principal: Principal) -> None:
    """Refuse non-admins (403), saying what would make the caller one."""
    if not principal.is_admin:
        raise Forbidden(ADMIN_NEEDS_AUTH if principal.user_id is None else ADMIN_NEEDED)
