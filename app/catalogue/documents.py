"""LibreChat's catalogue documents as this service reads them (CONTRACT.md section 7).

The names and bits of `users`, `groups`, `agents`, `aclentries` and `files` documents, and small pure
readers of their fields, shared by the MongoDB readers (`mongo`), the deployment audit (`audit`)
and LibreChat's access rule (`app/access/librechat_rule.py`). Ids may be bson `ObjectId`s or
strings: they are compared by their string form, as LibreChat does with `toString()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

VIEW = 1
EDIT = 2
DELETE = 4
SHARE = 8

AGENT_RESOURCE = "agent"
PRINCIPAL_USER = "user"
PRINCIPAL_GROUP = "group"
PRINCIPAL_ROLE = "role"
PRINCIPAL_PUBLIC = "public"

Document = Mapping[str, Any]


def id_text(value: Any) -> str | None:
    """The string form of an ObjectId or string id; None for a missing one."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


@dataclass(frozen=True)
class Principal:
    """One identity an ACL entry can name: (`user`, id), (`group`, id), (`role`, name), (`public`, None)."""

    type: str
    id: str | None


def entry_principal(entry: Document) -> Principal:
    """The principal an ACL entry grants to (`public` entries carry no id)."""
    kind = str(entry.get("principalType") or "")
    if kind == PRINCIPAL_PUBLIC:
        return Principal(PRINCIPAL_PUBLIC, None)
    return Principal(kind, id_text(entry.get("principalId")))


def entry_active(entry: Document, now: datetime) -> bool:
    """False once an entry's `expiredAt` has passed."""
    expired_at = entry.get("expiredAt")
    if not isinstance(expired_at, datetime):
        return True
    if expired_at.tzinfo is None:  # pymongo returns naive UTC datetimes by default
        expired_at = expired_at.replace(tzinfo=UTC)
    return expired_at > now


def attached_file_ids(agent: Document) -> set[str]:
    """Every file id attached to an Agent, over all of its `tool_resources`."""
    found: set[str] = set()
    resources = agent.get("tool_resources") or {}
    if not isinstance(resources, Mapping):
        return found
    for resource in resources.values():
        ids = resource.get("file_ids") if isinstance(resource, Mapping) else None
        if isinstance(ids, list):
            found.update(str(i) for i in ids if i is not None)
    return found


def file_search_ids(agent: Document) -> list[str]:
    """The Agent's knowledge base: `tool_resources.file_search.file_ids`, in order."""
    resources = agent.get("tool_resources") or {}
    resource = resources.get("file_search") if isinstance(resources, Mapping) else None
    ids = resource.get("file_ids") if isinstance(resource, Mapping) else None
    return [str(i) for i in ids if i is not None] if isinstance(ids, list) else []
