"""LibreChat's rule for which of an Agent's files a user may search (CONTRACT.md section 7).

Pure functions on plain mappings shaped like LibreChat's MongoDB documents (`users`, `groups`,
`agents`, `aclentries`, `files`; their names and fields in `app/catalogue/documents.py`), so the
rule is tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from app.catalogue.documents import (
    AGENT_RESOURCE,
    DELETE,
    EDIT,
    PRINCIPAL_GROUP,
    PRINCIPAL_PUBLIC,
    PRINCIPAL_ROLE,
    PRINCIPAL_USER,
    SHARE,
    VIEW,
    Document,
    Principal,
    attached_file_ids,
    entry_active,
    entry_principal,
    id_text,
)

# LibreChat names the per-chat agent it builds from the chat's own settings "ephemeral"
# (Constants.EPHEMERAL_AGENT_ID); it has no catalogue record, so nothing is checked for it.
EPHEMERAL_AGENT_PREFIX = "ephemeral"


def is_ephemeral_agent_id(agent_id: str | None) -> bool:
    """True for LibreChat's per-chat ephemeral agent ids, which have no catalogue record."""
    return bool(agent_id) and str(agent_id).startswith(EPHEMERAL_AGENT_PREFIX)


def user_principals(
    user_id: str,
    *,
    role: str | None = None,
    groups: Iterable[Document] = (),
    id_on_the_source: str | None = None,
) -> frozenset[Principal]:
    """Every principal a user acts as: themselves, their role, their groups, and `public`.

    A group counts when its `memberIds` holds the user's id or, for Entra users, their
    `idOnTheSource`.
    """
    member_keys = {user_id} | ({id_on_the_source} if id_on_the_source else set())
    principals = {Principal(PRINCIPAL_USER, user_id), Principal(PRINCIPAL_PUBLIC, None)}
    if role:
        principals.add(Principal(PRINCIPAL_ROLE, role))
    for group in groups:
        members = {id_text(m) for m in group.get("memberIds") or ()}
        group_id = id_text(group.get("_id"))
        if group_id and members & member_keys:
            principals.add(Principal(PRINCIPAL_GROUP, group_id))
    return frozenset(principals)


def permission_bits(
    entries: Iterable[Document],
    principals: frozenset[Principal],
    *,
    resource_id: Any,
    resource_type: str = AGENT_RESOURCE,
    now: datetime | None = None,
) -> int:
    """The union of permission bits the principals hold on one resource."""
    moment = now or datetime.now(UTC)
    wanted = id_text(resource_id)
    bits = 0
    for entry in entries:
        if entry.get("resourceType") != resource_type or id_text(entry.get("resourceId")) != wanted:
            continue
        if not entry_active(entry, moment) or entry_principal(entry) not in principals:
            continue
        try:
            bits |= int(entry.get("permBits") or 0)
        except (TypeError, ValueError):
            continue
    return bits


def searchable_file_ids(
    *,
    user_id: str,
    requested: Iterable[str],
    files: Iterable[Document],
    agent_id: str | None,
    agent: Document | None,
    acl_entries: Iterable[Document] = (),
    principals: frozenset[Principal] | None = None,
    now: datetime | None = None,
) -> frozenset[str]:
    """The requested file ids this user may search through this Agent, by LibreChat's rule.

    - A file must have a catalogue record (`files`); unknown ids are denied.
    - Files the user owns (`files.user`) are always allowed.
    - An ephemeral agent is not checked: every known requested file is allowed.
    - An unknown Agent denies everything else.
    - The Agent's author may use every attached file (any `tool_resources.*.file_ids`) whose owner is set.
    - Anyone else needs the VIEW bit on the Agent (`aclentries.resourceId` is the Agent's `_id`)
      for one of their principals, and then gets the attached files.
    """
    wanted = {str(r) for r in requested}
    records = {str(f.get("file_id")): f for f in files if str(f.get("file_id")) in wanted}
    known = set(records)
    owned = {fid for fid, f in records.items() if id_text(f.get("user")) == user_id}
    if agent_id is None or is_ephemeral_agent_id(agent_id):
        return frozenset(known if agent_id else owned)
    if agent is None:
        return frozenset(owned)
    attached = attached_file_ids(agent) & known
    if id_text(agent.get("author")) == user_id:
        with_owner = {fid for fid in attached if id_text(records[fid].get("user"))}
        return frozenset(owned | with_owner)
    who = principals if principals is not None else user_principals(user_id)
    bits = permission_bits(acl_entries, who, resource_id=agent.get("_id"), now=now)
    if bits & VIEW:
        return frozenset(owned | attached)
    return frozenset(owned)


def agent_bits(
    *,
    user_id: str,
    agent: Document | None,
    acl_entries: Iterable[Document],
    principals: frozenset[Principal],
    now: datetime | None = None,
) -> int:
    """The permission bits this user holds on an Agent: every bit for its author, else the ACL's union."""
    if agent is None:
        return 0
    if id_text(agent.get("author")) == user_id:
        return VIEW | EDIT | DELETE | SHARE
    return permission_bits(acl_entries, principals, resource_id=agent.get("_id"), now=now)


def editable_agent_ids(
    *,
    user_id: str,
    agents: Iterable[Document],
    acl_entries: Iterable[Document],
    principals: frozenset[Principal],
    now: datetime | None = None,
) -> frozenset[str]:
    """The `id`s of the Agents this user may edit: those they authored or hold the EDIT bit on."""
    entries = list(acl_entries)
    found: set[str] = set()
    for agent in agents:
        agent_id = id_text(agent.get("id"))
        bits = agent_bits(user_id=user_id, agent=agent, acl_entries=entries, principals=principals, now=now)
        if agent_id and bits & EDIT:
            found.add(agent_id)
    return frozenset(found)
