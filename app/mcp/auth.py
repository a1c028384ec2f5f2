"""Who is calling the MCP server and how it proved it (CONTRACT.md section 9); what it reads: `Caller`.

Four ways in, each failing closed:

- `jwt`: LibreChat's token as `Authorization: Bearer`, verified by `app.access.principal.verify_token`
  (the code every HTTP route uses), with the same `ENTITY_ID_PATTERN` and allow-list re-check;
- `api_key`: a key listed in `MCP_API_KEYS` as `sha256hex:principal[:ns1|ns2]`; only its hash is
  configured, compared in constant time; it reads exactly its namespace set (the principal's own
  when none is listed);
- `gateway`: LibreChat's MCP gateway, one shared key (`MCP_GATEWAY_KEY_SHA256`) plus the user id
  LibreChat sends in `MCP_GATEWAY_USER_HEADER`. The header proves nothing by itself, so Settings
  refuses this mode without `ALLOWLIST_VERIFY=mongo`: every file id is re-checked in LibreChat's
  catalogue for that user;
- `stdio`: one principal and namespace set named on the command line (`scripts/mcp`).

With no JWT_SECRET, no API key and no gateway key configured, callers are `public`, exactly as
the HTTP routes treat them (the service then binds to loopback); once anything is configured, a
request that proves none of it is refused.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.access.namespaces import Caller
from app.access.principal import PUBLIC_NAMESPACE, Principal, anonymous, single_authorization, verify_token
from app.config_sections import McpSettings
from app.errors import Unauthorized
from app.safe_text import unsafe_reason

Mode = Literal["jwt", "api_key", "gateway", "stdio", "anonymous"]
MAX_GATEWAY_USER_CHARS = 200


@dataclass(frozen=True)
class ApiKey:
    """One `MCP_API_KEYS` entry: the key's sha256, the principal it acts as, its namespaces."""

    digest: bytes
    principal: str
    namespaces: tuple[str, ...]


def parse_api_keys(entries: Sequence[str]) -> list[ApiKey]:
    """`sha256hex:principal[:ns1|ns2]` entries (Settings has checked their shape)."""
    keys = []
    for entry in entries:
        digest, principal, *rest = entry.split(":")
        namespaces = tuple(dict.fromkeys(rest[0].split("|"))) if rest else (principal,)
        keys.append(ApiKey(bytes.fromhex(digest), principal, namespaces))
    return keys


def key_digest(key: str) -> bytes:
    """The sha256 of a presented key (what MCP_API_KEYS and MCP_GATEWAY_KEY_SHA256 hold, as hex)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, kw_only=True)
class McpCaller(Caller):
    """The caller of one MCP request: a principal, what it may read (`Caller`), and how it proved itself.

    `namespaces` is the fixed set of an API key or of stdio (None: the HTTP rules, the caller's own
    namespace plus a checked `entity_id`).
    """

    mode: Mode

    @property
    def identity(self) -> str:
        """What an MCP session is bound to: the mode and the principal (a new JWT keeps its session)."""
        return f"{self.mode}:{self.principal.namespace}"


class McpAuthenticator:
    """Turns the headers of one HTTP request into an `McpCaller`, or raises Unauthorized (401)."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self.admin_ids = settings.admin_ids
        self.keys = parse_api_keys(settings.api_keys)
        gateway = settings.gateway_key_sha256
        self.gateway_digest = bytes.fromhex(gateway) if gateway else None
        self.user_header = settings.gateway_user_header.lower()

    @property
    def open(self) -> bool:
        """True when nothing at all is configured: every caller is `public`, as on the HTTP routes."""
        return not (self.settings.auth_enabled or self.keys or self.gateway_digest)

    def authenticate(self, authorizations: Sequence[str], user_headers: Sequence[str]) -> McpCaller:
        """The caller behind these `Authorization` and gateway user id header values."""
        authorization = single_authorization(authorizations)
        if self.open:
            return McpCaller(anonymous(), mode="anonymous")
        if not authorization:
            raise Unauthorized("Missing or invalid Authorization header")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Missing or invalid Authorization header")
        digest = key_digest(token)
        if self.gateway_digest is not None and hmac.compare_digest(digest, self.gateway_digest):
            return self._gateway(user_headers)
        matched: ApiKey | None = None
        for key in self.keys:  # every entry is compared: the time does not tell which one matched
            if hmac.compare_digest(digest, key.digest) and matched is None:
                matched = key
        if matched is not None:
            principal = Principal(user_id=matched.principal, is_admin=matched.principal in self.admin_ids)
            return McpCaller(principal, matched.namespaces, mode="api_key")
        if not self.settings.auth_enabled:
            raise Unauthorized("Invalid token: not a configured MCP key")
        assert self.settings.jwt_secret is not None
        principal = verify_token(
            authorization,
            secret=self.settings.jwt_secret,
            audience=self.settings.jwt_audience,
            admin_user_ids=self.admin_ids,
        )
        return McpCaller(principal, mode="jwt")

    def _gateway(self, user_headers: Sequence[str]) -> McpCaller:
        name = self.settings.gateway_user_header
        if len(user_headers) != 1 or not user_headers[0].strip():
            raise Unauthorized(f"The gateway key needs exactly one {name} header with the LibreChat user id")
        user = user_headers[0].strip()
        if len(user) > MAX_GATEWAY_USER_CHARS or unsafe_reason(user) is not None or user == PUBLIC_NAMESPACE:
            raise Unauthorized(f"The {name} header does not hold a LibreChat user id")
        return McpCaller(Principal(user_id=user, is_admin=user in self.admin_ids), mode="gateway")


def stdio_caller(admin_ids: frozenset[str], principal: str, namespaces: Sequence[str]) -> McpCaller:
    """The one caller of a stdio server: `principal`, reading `namespaces` (its own when empty)."""
    if not principal.strip() or unsafe_reason(principal) is not None:
        raise ValueError("--principal must name a user or service (never empty)")
    for namespace in namespaces:
        if not namespace.strip() or unsafe_reason(namespace) is not None:
            raise ValueError("every --namespace must be a non-empty name")
    chosen = tuple(dict.fromkeys(namespaces)) or (principal,)
    is_admin = principal in admin_ids
    return McpCaller(Principal(user_id=principal, is_admin=is_admin), chosen, mode="stdio")
