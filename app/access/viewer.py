"""What LibreChat's rule needs about one user and one Agent, read from its catalogue (pymongo, read-only).

`read_viewer` and `user_editable_agents` put the readers of `app/catalogue/mongo.py` and the rule of
`librechat_rule` together; the allow-list (`allowlist`) calls them in its thread pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.database import Database

from app.access.librechat_rule import editable_agent_ids, searchable_file_ids, user_principals
from app.catalogue.documents import Document, Principal
from app.catalogue.mongo import (
    read_agent_acl,
    read_agents,
    read_agents_by_db_id,
    read_authored_agents,
    read_groups_of,
    read_principal_agent_acl,
    read_user,
)


@dataclass(frozen=True)
class Viewer:
    """One user looking through one Agent (or none): what the access rule needs besides file records.

    Read once per (user, Agent) and reusable for many requests: the rule is evaluated on it with
    `searchable`, at the moment of each request (an ACL entry that expires in between stops counting).
    """

    user_id: str
    agent_id: str | None
    principals: frozenset[Principal]
    agent: Document | None
    acl_entries: tuple[Document, ...]

    def searchable(
        self, requested: Iterable[str], files: Iterable[Document], now: datetime | None = None
    ) -> frozenset[str]:
        """The requested file ids this user may search through this Agent (LibreChat's rule)."""
        return searchable_file_ids(
            user_id=self.user_id,
            requested=requested,
            files=files,
            agent_id=self.agent_id,
            agent=self.agent,
            acl_entries=self.acl_entries,
            principals=self.principals,
            now=now,
        )


def read_principals(
    db: Database[dict[str, Any]], user_id: str, role: str | None = None
) -> frozenset[Principal]:
    """Every principal the user acts as: themselves, their role (from `users`), their groups, `public`."""
    user = read_user(db, user_id)
    source_id = str(user["idOnTheSource"]) if user and user.get("idOnTheSource") else None
    groups = read_groups_of(db, [user_id, source_id or ""])
    return user_principals(
        user_id,
        role=role or (str(user["role"]) if user and user.get("role") else None),
        groups=groups,
        id_on_the_source=source_id,
    )


def read_viewer(
    db: Database[dict[str, Any]], *, user_id: str, agent_id: str | None, role: str | None = None
) -> Viewer:
    """The user's principals, the Agent (None when unknown or not asked) and the ACL entries on it."""
    agents = read_agents(db, [agent_id]) if agent_id else []
    agent = agents[0] if agents else None
    entries = read_agent_acl(db, [agent["_id"]]) if agent is not None else []
    return Viewer(user_id, agent_id, read_principals(db, user_id, role), agent, tuple(entries))


def user_editable_agents(
    db: Database[dict[str, Any]],
    *,
    user_id: str,
    principals: frozenset[Principal] | None = None,
    now: datetime | None = None,
) -> frozenset[str]:
    """The `id`s of the Agents this user authored or holds the EDIT bit on, read from the catalogue."""
    who = principals if principals is not None else read_principals(db, user_id)
    entries = read_principal_agent_acl(db, who)
    agents = {str(a["_id"]): a for a in read_authored_agents(db, user_id)}
    shared = [e.get("resourceId") for e in entries if str(e.get("resourceId")) not in agents]
    for agent in read_agents_by_db_id(db, shared):
        agents[str(agent["_id"])] = agent
    return editable_agent_ids(
        user_id=user_id, agents=agents.values(), acl_entries=entries, principals=who, now=now
    )
