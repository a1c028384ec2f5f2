"""Who is calling, and which namespaces they may touch (CONTRACT.md sections 2 and 3).

Pure functions: no FastAPI here, so the rules are tested without HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from app.errors import Forbidden, Unauthorized

PUBLIC_NAMESPACE = "public"
_ALGORITHMS = ["HS256"]


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


def anonymous() -> Principal:
    """The principal of every request when JWT_SECRET is unset (rag_api's behaviour)."""
    return Principal(user_id=None, is_admin=False)


def verify_token(
    authorization: str | None,
    *,
    secret: str,
    audience: str | None,
    admin_user_ids: frozenset[str] | set[str] = frozenset(),
) -> Principal:
    """Check `Authorization: Bearer <jwt>` (HS256, `exp` required) and return the principal."""
    if not authorization:
        raise Unauthorized("Missing or invalid Authorization header")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Missing or invalid Authorization header")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=_ALGORITHMS,  # fixed list: `alg: none` and RS/HS confusion are refused
            audience=audience,
            options={"require": ["exp"], "verify_aud": audience is not None},
            leeway=5,
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("Invalid token: token has expired") from None
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthorized(f"Invalid token: token has no '{exc.claim}' claim") from None
    except jwt.InvalidAudienceError:
        raise Unauthorized("Invalid token: audience does not match") from None
    except jwt.InvalidSignatureError:
        raise Unauthorized("Invalid token: signature verification failed") from None
    except jwt.InvalidAlgorithmError:
        raise Unauthorized("Invalid token: algorithm not allowed (use HS256)") from None
    except jwt.InvalidTokenError:
        raise Unauthorized("Invalid token: malformed token") from None
    user_id = claims.get("id")
    if not isinstance(user_id, str) or not user_id.strip():
        raise Unauthorized("Invalid token: token has no user 'id'")
    is_admin = user_id in admin_user_ids or str(claims.get("role", "")).upper() == "ADMIN"
    return Principal(user_id=user_id, is_admin=is_admin, claims=claims)


def clean_entity_id(entity_id: str | None) -> str | None:
    """An `entity_id` as LibreChat sends it: empty or blank means absent."""
    if entity_id is None:
        return None
    entity_id = entity_id.strip()
    return entity_id or None


def read_namespaces(principal: Principal, entity_id: str | None) -> list[str]:
    """Namespaces a read may touch: the caller's own, plus `entity_id` when given."""
    owners = [principal.namespace]
    entity = clean_entity_id(entity_id)
    if entity and entity not in owners:
        owners.append(entity)
    return owners


def write_owner(principal: Principal, entity_id: str | None) -> str:
    """Owner of an upload: `entity_id` if given, else the caller's id, else `public`."""
    return clean_entity_id(entity_id) or principal.namespace


def require_admin(principal: Principal) -> None:
    """Refuse non-admins (403)."""
    if not principal.is_admin:
        raise Forbidden("This route needs an admin token (RAG_ADMIN_USER_IDS or role ADMIN)")
