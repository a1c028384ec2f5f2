"""Which namespaces a caller may touch: `entity_id`, reads, deletes and uploads (CONTRACT.md section 3).

Pure functions: no FastAPI here, so the rules are tested without HTTP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.access.principal import Principal
from app.errors import BadRequest


def entity_id_refused_detail(pattern: str) -> str:
    """The 400 detail for an `entity_id` that is not an Agent id: names the setting and the fix."""
    return (
        f"entity_id must be a LibreChat Agent id matching ENTITY_ID_PATTERN ({pattern}); "
        "LibreChat sends only Agent ids (agent_...) as entity_id, and an empty value or none at all "
        "for the caller's own files. Leave entity_id out, or ask the operator to change ENTITY_ID_PATTERN"
    )


def check_entity_id(entity_id: str | None, pattern: re.Pattern[str]) -> str | None:
    """The `entity_id` a request may name: None when absent or blank, else it must match `pattern` (400).

    Nobody verifies an `entity_id` (it is a claim), so only the shape LibreChat sends is honoured:
    a user id can never be named to read, list or delete another user's files.
    """
    if entity_id is None or not entity_id.strip():
        return None  # LibreChat may send the field empty
    if pattern.fullmatch(entity_id) is None:
        raise BadRequest(entity_id_refused_detail(pattern.pattern))
    return entity_id


def read_namespaces(principal: Principal, entity_id: str | None) -> list[str]:
    """Namespaces a read may touch: the caller's own, plus a checked `entity_id` when given."""
    owners = [principal.namespace]
    if entity_id and entity_id.strip() and entity_id not in owners:
        owners.append(entity_id)
    return owners


def delete_namespaces(principal: Principal) -> list[str]:
    """Owners a delete may touch: the caller's own namespace only; `entity_id` never widens it."""
    return [principal.namespace]


def write_owner(principal: Principal, entity_id: str | None) -> str:
    """Owner of an upload: a checked `entity_id` if given, else the caller's id, else `public`."""
    return entity_id if entity_id and entity_id.strip() else principal.namespace


@dataclass(frozen=True)
class Caller:
    """A principal and the namespaces it reads: LibreChat's rules, or a fixed set the operator granted.

    `namespaces` is the fixed set of an MCP API key or of stdio. None means the HTTP rules of
    `read_namespaces`: the caller's own namespace plus a checked `entity_id`, the files it uploaded,
    and LibreChat's catalogue re-checking its file ids (ALLOWLIST_VERIFY).
    """

    principal: Principal
    namespaces: tuple[str, ...] | None = None

    @property
    def uses_catalogue(self) -> bool:
        """True when LibreChat's catalogue re-checks this caller's file ids (a LibreChat user)."""
        return self.namespaces is None

    def entity(self, entity_id: str | None, pattern: re.Pattern[str]) -> str | None:
        """The checked `entity_id` of a call: the HTTP shape rule, or membership of the fixed set."""
        if entity_id is None or not entity_id.strip():
            return None
        if self.namespaces is None:
            return check_entity_id(entity_id, pattern)
        if entity_id not in self.namespaces:
            raise BadRequest(
                f"entity_id must be one of this caller's namespaces ({', '.join(self.namespaces)}); "
                "leave it out to read all of them"
            )
        return entity_id

    def owners(self, entity: str | None) -> list[str]:
        """The namespaces a read may touch, for a checked `entity`."""
        if self.namespaces is None:
            return read_namespaces(self.principal, entity)
        return [entity] if entity else list(self.namespaces)

    @property
    def uploader(self) -> str | None:
        """The uploader a read scope honours: a LibreChat user's own id; none for a fixed namespace set."""
        # a fixed set is exactly what the operator granted: uploads elsewhere do not widen it
        return self.principal.namespace if self.namespaces is None else None

    def home(self, entity: str | None) -> str:
        """The namespace a V2 search asks for: `entity`, else the caller's own (first of a fixed set)."""
        if entity:
            return entity
        return self.namespaces[0] if self.namespaces else self.principal.namespace
