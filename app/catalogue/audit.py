"""Checks of a deployment's knowledge bases in LibreChat's catalogue: pure, on plain documents.

Used by `scripts/validate_deployment.py --mongo-uri`: knowledge-base file sets pairwise disjoint, no
file attached to two Agents, every knowledge-base file embedded, no Agent shared publicly unless the
plan allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

from app.catalogue.documents import (
    AGENT_RESOURCE,
    PRINCIPAL_PUBLIC,
    VIEW,
    Document,
    attached_file_ids,
    entry_active,
    file_search_ids,
    id_text,
)


@dataclass(frozen=True)
class Finding:
    """One failed catalogue check, with the ids an operator needs to fix it."""

    check: str
    message: str
    ids: tuple[str, ...] = ()


@dataclass
class AuditResult:
    """What the catalogue checks looked at and what they found."""

    knowledge_bases: int = 0
    files_checked: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was found."""
        return not self.findings


def knowledge_bases(agents: Iterable[Document], only: set[str] | None = None) -> dict[str, list[str]]:
    """Agent id -> its file_search file ids, for Agents with a knowledge base (or those in `only`)."""
    result: dict[str, list[str]] = {}
    for agent in agents:
        agent_id = id_text(agent.get("id"))
        if not agent_id or (only is not None and agent_id not in only):
            continue
        ids = file_search_ids(agent)
        if ids or only is not None:
            result[agent_id] = ids
    return result


def audit_catalogue(
    *,
    agents: Iterable[Document],
    files: Iterable[Document],
    acl_entries: Iterable[Document],
    public_allowed: set[str] = frozenset(),  # type: ignore[assignment]
    only_agents: set[str] | None = None,
    now: datetime | None = None,
) -> AuditResult:
    """Run every catalogue check; `only_agents` limits it to a plan's Agents (by `id`)."""
    agent_list = [a for a in agents if only_agents is None or id_text(a.get("id")) in only_agents]
    kbs = knowledge_bases(agent_list, only_agents)
    result = AuditResult(knowledge_bases=len(kbs))
    if only_agents is not None:
        result.findings += _missing_agents(agent_list, only_agents)
    result.findings += _shared_files(kbs)
    result.findings += _files_attached_twice(agent_list)
    result.files_checked, unembedded = _unembedded_files(kbs, {str(f.get("file_id")): f for f in files})
    result.findings += unembedded
    result.findings += _public_agents(agent_list, acl_entries, public_allowed, now or datetime.now(UTC))
    return result


def _missing_agents(agent_list: list[Document], only_agents: set[str]) -> list[Finding]:
    """The plan's Agents that the catalogue does not hold."""
    found = {id_text(a.get("id")) for a in agent_list}
    return [
        Finding("agent_missing", f"Agent {missing} is not in the catalogue", (missing,))
        for missing in sorted(only_agents - found)
    ]


def _shared_files(kbs: Mapping[str, list[str]]) -> list[Finding]:
    """Pairs of knowledge bases that hold a file in common."""
    findings = []
    for (a, a_ids), (b, b_ids) in combinations(sorted(kbs.items()), 2):
        shared = sorted(set(a_ids) & set(b_ids))
        if shared:
            findings.append(
                Finding(
                    "kb_disjoint",
                    f"knowledge bases of {a} and {b} share {len(shared)} file(s)",
                    (a, b, *shared),
                )
            )
    return findings


def _files_attached_twice(agent_list: list[Document]) -> list[Finding]:
    """Files attached (in any tool) to more than one Agent."""
    holders: dict[str, list[str]] = {}
    for agent in agent_list:
        agent_id = id_text(agent.get("id")) or "?"
        for fid in attached_file_ids(agent):
            holders.setdefault(fid, []).append(agent_id)
    return [
        Finding(
            "file_attached_twice",
            f"file {fid} is attached to {', '.join(sorted(owners))}",
            (fid, *sorted(owners)),
        )
        for fid, owners in sorted(holders.items())
        if len(owners) > 1
    ]


def _unembedded_files(
    kbs: Mapping[str, list[str]], records: Mapping[str, Document]
) -> tuple[int, list[Finding]]:
    """(files checked, findings): knowledge-base files without a record or not embedded."""
    checked, findings = 0, []
    for agent_id, ids in sorted(kbs.items()):
        for fid in ids:
            checked += 1
            record = records.get(fid)
            if record is None:
                findings.append(
                    Finding(
                        "file_missing", f"{agent_id}: file {fid} has no record in `files`", (agent_id, fid)
                    )
                )
            elif record.get("embedded") is not True:
                name = record.get("filename") or "?"
                findings.append(
                    Finding(
                        "not_embedded", f"{agent_id}: file {fid} ({name}) is not embedded", (agent_id, fid)
                    )
                )
    return checked, findings


def _public_agents(
    agent_list: list[Document], acl_entries: Iterable[Document], public_allowed: set[str], moment: datetime
) -> list[Finding]:
    """Agents an active ACL entry shares publicly for viewing, unless the plan allows it."""
    by_db_id = {id_text(a.get("_id")): id_text(a.get("id")) for a in agent_list}
    findings = []
    for entry in acl_entries:
        if entry.get("resourceType") != AGENT_RESOURCE or entry.get("principalType") != PRINCIPAL_PUBLIC:
            continue
        if not entry_active(entry, moment) or not _bits(entry) & VIEW:
            continue
        public_agent = by_db_id.get(id_text(entry.get("resourceId")))
        if public_agent is None or public_agent in public_allowed:
            continue
        findings.append(
            Finding(
                "public_agent",
                f"Agent {public_agent} is shared publicly and the plan does not allow it",
                (public_agent,),
            )
        )
    return findings


def _bits(entry: Mapping[str, Any]) -> int:
    try:
        return int(entry.get("permBits") or 0)
    except (TypeError, ValueError):
        return 0
