"""Which namespaces a caller may touch: `entity_id`, reads, deletes and uploads (CONTRACT.md section 3).

Pure functions: no FastAPI here, so the rules are tested without HTTP.
"""

from __future__ import annotations

import re

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
