"""Who owns which files in the service (namespaces), the grounded questions to ask, and bearer tokens."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jwt

AGENT, USER = "agent", "user"


class UsageError(Exception):
    """Arguments or input files cannot be used (exit 2)."""


@dataclass
class Namespace:
    """Who owns a set of files in the service: an Agent (`agent_…`) or a user id."""

    id: str
    kind: str
    file_ids: list[str] = field(default_factory=list)


@dataclass
class GroundedQuery:
    """A question whose answer must come from `expect_file` and contain `expect_text`."""

    query: str
    file_ids: list[str]
    expect_file: str
    expect_text: str
    entity_id: str | None = None
    user_id: str | None = None
    k: int = 3


class Tokens:
    """Bearer tokens per user id: minted with the shared secret, or given ready-made."""

    def __init__(self, secret: str | None, ready: Mapping[str, str] | None = None) -> None:
        self.secret = secret
        self.ready = dict(ready or {})
        if not secret and not self.ready:
            raise UsageError("give the JWT secret (--jwt-secret-env) or ready tokens (--tokens)")

    def can_mint(self) -> bool:
        """True when any user id can get a token."""
        return bool(self.secret)

    def has(self, user_id: str) -> bool:
        """True when a token for this user is available."""
        return self.can_mint() or user_id in self.ready

    def token(self, user_id: str, *, ttl_s: int = 300) -> str:
        """A LibreChat-like token `{id, iat, exp}` for this user."""
        if self.secret:
            now = int(time.time())
            return jwt.encode({"id": user_id, "iat": now, "exp": now + ttl_s}, self.secret, algorithm="HS256")
        if user_id not in self.ready:
            raise UsageError(f"no token for user {user_id}; add one to --tokens or give the JWT secret")
        return self.ready[user_id]

    def header(self, user_id: str) -> dict[str, str]:
        """The Authorization header for this user."""
        return {"Authorization": f"Bearer {self.token(user_id)}"}

    def any_user(self) -> str:
        """A user id to probe with when the namespace does not matter."""
        if self.ready:
            return next(iter(self.ready))
        return random_user_id()


def random_user_id() -> str:
    """A fresh id shaped like a LibreChat user id (24 hex digits, an ObjectId)."""
    return secrets.token_hex(12)


def load_inventory(path: Path) -> list[Namespace]:
    """Namespaces from a JSON file: {"namespaces": [{"id", "kind": "agent"|"user", "file_ids"}]}."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inventory {path}: {exc}") from None
    entries = raw.get("namespaces") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list):
        raise UsageError(f"{path}: expected {{'namespaces': [...]}}")
    found: list[Namespace] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("kind") not in (AGENT, USER) or not entry.get("id"):
            raise UsageError(f"{path}: each namespace needs `id` and `kind` ('agent' or 'user')")
        found.append(
            Namespace(str(entry["id"]), str(entry["kind"]), [str(f) for f in entry.get("file_ids") or []])
        )
    return found


def load_state(path: Path) -> list[Namespace]:
    """Agent namespaces from scripts/provision_knowledge_bases.py's state file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read state file {path}: {exc}") from None
    found: list[Namespace] = []
    for kb in (raw.get("knowledge_bases") or {}).values():
        if kb.get("agent_id"):
            ids = [str(f["file_id"]) for f in (kb.get("files") or {}).values() if f.get("file_id")]
            found.append(Namespace(str(kb["agent_id"]), AGENT, ids))
    return found


def load_queries(path: Path) -> list[GroundedQuery]:
    """Grounded queries from a JSON list or JSON lines."""
    text = path.read_text(encoding="utf-8")
    try:
        items = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
    except ValueError as exc:
        raise UsageError(f"cannot read queries {path}: {exc}") from None
    queries: list[GroundedQuery] = []
    for i, item in enumerate(items):
        try:
            queries.append(
                GroundedQuery(
                    query=str(item["query"]),
                    file_ids=[str(f) for f in item["file_ids"]],
                    expect_file=str(item["expect_file"]),
                    expect_text=str(item["expect_text"]),
                    entity_id=item.get("entity_id") or None,
                    user_id=item.get("user_id") or None,
                    k=int(item.get("k", 3)),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"{path}: query {i} needs query, file_ids, expect_file, expect_text "
                "(entity_id, k, user_id optional)"
            ) from None
    return queries
