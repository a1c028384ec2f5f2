"""One run against one LibreChat: provision each knowledge base of the plan, then verify them all."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from app.progress_display import ProgressDisplay
from scripts.provisioning.librechat import FILE_SEARCH, VIEWER_ROLE, LibreChat, LibreChatError
from scripts.provisioning.plan import KnowledgeBasePlan, LocalFile, Plan, local_files
from scripts.provisioning.state import State, now_iso


@dataclass
class KbReport:
    """What happened to one knowledge base."""

    name: str
    agent_id: str | None = None
    expected_files: int = 0
    attached_files: int = 0
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class RunReport:
    """The run's outcome, printed and optionally written as JSON."""

    base_url: str
    skip_uploads: bool
    knowledge_bases: list[KbReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no knowledge base and no cross-check found a problem."""
        return not self.problems and not any(kb.problems for kb in self.knowledge_bases)


class Provisioner:
    """Runs a plan against one LibreChat."""

    def __init__(self, plan: Plan, api: LibreChat, state: State, *, log: Callable[[str], None]) -> None:
        self.plan = plan
        self.api = api
        self.state = state
        self.log = log

    def ensure_group(self, kb: KnowledgeBasePlan) -> str | None:
        """Find or create the plan's group; its `_id`."""
        if not kb.group:
            return None
        group = self.api.find_group(kb.group)
        if group is None:
            group = self.api.create_group(kb.group, kb.group_description)
            self.log(f"  created group {kb.group!r}")
        return str(group["_id"])

    def find_agent(self, kb: KnowledgeBasePlan) -> dict[str, Any] | None:
        """The Agent named exactly like the knowledge base; two of them is an error."""
        agents = self.api.find_agents(kb.name)
        if len(agents) > 1:
            ids = ", ".join(str(a.get("id")) for a in agents)
            raise LibreChatError(f"{len(agents)} Agents are named {kb.name!r} ({ids}); rename all but one")
        return agents[0] if agents else None

    def ensure_agent(self, kb: KnowledgeBasePlan) -> dict[str, Any]:
        """Find or create the Agent; bring its plan settings and the file_search tool up to date."""
        agent = self.find_agent(kb)
        if agent is None:
            agent = self.api.create_agent(kb.name, kb.agent)
            self.log(f"  created Agent {kb.name!r} ({agent['id']})")
            return agent
        full = self.api.agent_expanded(str(agent["id"]))
        changes = {k: v for k, v in kb.agent.items() if full.get(k) != v}
        tools = list(full.get("tools") or [])
        if FILE_SEARCH not in tools:
            changes["tools"] = [*tools, FILE_SEARCH]
        if changes:
            full = self.api.update_agent(str(agent["id"]), changes)
            self.log(f"  updated Agent {kb.name!r}: {', '.join(sorted(changes))}")
        return full

    def _landed(self, agent_id: str, temp_file_id: str) -> dict[str, Any] | None:
        for record in self.api.agent_files(agent_id):
            if record.get("temp_file_id") == temp_file_id and record.get("embedded") is True:
                return record
        return None

    def upload_with_retries(
        self, agent_id: str, local: LocalFile, temp_file_id: str
    ) -> tuple[dict[str, Any], bool]:
        """Upload once, retrying 429/5xx; before each retry, look for the upload having landed anyway."""
        for attempt in self.api.policy.retrying(self.log):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    landed = self._landed(agent_id, temp_file_id)
                    if landed is not None:
                        self.log(f"  {local.name}: the earlier attempt had landed; not sent again")
                        return landed, True
                return self.api.upload(agent_id, local, temp_file_id), False
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def sync_files(
        self, kb: KnowledgeBasePlan, kb_state: dict[str, Any], agent_id: str, report: KbReport
    ) -> None:
        """Upload new and changed files; resolve uploads a crashed run left pending."""
        files = local_files(kb)
        report.expected_files = len(files)
        attached = {str(f.get("file_id")): f for f in self.api.agent_files(agent_id)}
        by_temp = {str(f.get("temp_file_id")): f for f in attached.values() if f.get("temp_file_id")}
        known = {f.name: f for f in files}
        for name, pending in list(kb_state["pending"].items()):
            record = by_temp.get(str(pending.get("temp_file_id")))
            local = known.get(name)
            if (
                record is not None
                and record.get("embedded") is True
                and local
                and local.sha256 == pending["sha256"]
            ):
                self._record(kb_state, local, record, pending["temp_file_id"])
                report.recovered.append(name)
                self.log(f"  {name}: found the upload a crashed run had sent; recorded")
            del kb_state["pending"][name]
            self.state.save()
        # a bar of the folder's files on a terminal (the log lines above it); plain: the log lines only
        with ProgressDisplay(
            total=len(files), unit="files", label=f"  {kb.name}", stream=sys.stdout, lines=False
        ) as shown:
            for position, local in enumerate(files, 1):
                self._sync_file(kb_state, local, attached, agent_id, report)
                shown.update(position, local.name)

    def _sync_file(
        self,
        kb_state: dict[str, Any],
        local: LocalFile,
        attached: dict[str, dict[str, Any]],
        agent_id: str,
        report: KbReport,
    ) -> None:
        """Upload one file unless the state and LibreChat say it is there, unchanged and embedded."""
        done = kb_state["files"].get(local.name)
        if (
            done
            and done.get("sha256") == local.sha256
            and done.get("embedded") is True
            and done.get("file_id") in attached
        ):
            report.skipped.append(local.name)
            return
        temp_file_id = str(uuid.uuid4())
        kb_state["pending"][local.name] = {
            "sha256": local.sha256,
            "temp_file_id": temp_file_id,
            "started_at": now_iso(),
        }
        self.state.save()
        record, _ = self.upload_with_retries(agent_id, local, temp_file_id)
        self._record(kb_state, local, record, temp_file_id)
        del kb_state["pending"][local.name]
        self.state.save()
        report.uploaded.append(local.name)
        self.log(f"  uploaded {local.name} -> {record.get('file_id')}")
        # the new version is searchable now; only then drop the old one
        if done and done.get("file_id") and done.get("file_id") != record.get("file_id"):
            old = attached.get(str(done["file_id"]))
            if old is not None:
                self.api.delete_file(agent_id, str(done["file_id"]), str(old.get("filepath") or ""))
            report.replaced.append(local.name)
            self.log(f"  removed the previous version of {local.name} ({done['file_id']})")

    @staticmethod
    def _record(
        kb_state: dict[str, Any], local: LocalFile, record: Mapping[str, Any], temp_file_id: str
    ) -> None:
        kb_state["files"][local.name] = {
            "sha256": local.sha256,
            "size": local.size,
            "file_id": record.get("file_id"),
            "temp_file_id": temp_file_id,
            "filepath": record.get("filepath"),
            "embedded": record.get("embedded") is True,
            "uploaded_at": now_iso(),
        }

    def provision(self, kb: KnowledgeBasePlan, report: KbReport) -> None:
        """Group, Agent, sharing and uploads for one knowledge base."""
        kb_state = self.state.kb(kb.name)
        group_id = self.ensure_group(kb)
        agent = self.ensure_agent(kb)
        agent_id, agent_db_id = str(agent["id"]), str(agent["_id"])
        report.agent_id = agent_id
        kb_state.update({"agent_id": agent_id, "agent_db_id": agent_db_id, "group_id": group_id})
        self.state.save()
        self.api.share(agent_db_id, group_id, kb.public)
        self.sync_files(kb, kb_state, agent_id, report)

    def verify(self, report: RunReport) -> None:
        """Expected counts, every file embedded, sharing as planned, knowledge bases pairwise disjoint."""
        file_sets: dict[str, set[str]] = {}
        hashes: dict[str, dict[str, str]] = {}
        for kb, kb_report in zip(self.plan.knowledge_bases, report.knowledge_bases, strict=True):
            files = local_files(kb)
            kb_report.expected_files = len(files)
            hashes[kb.name] = {f.sha256: f.name for f in files}
            agent = self.find_agent(kb)
            if agent is None:
                kb_report.problems.append(f"no Agent named {kb.name!r}")
                continue
            agent_id = str(agent["id"])
            kb_report.agent_id = agent_id
            full = self.api.agent_expanded(agent_id)
            ids = [
                str(i)
                for i in ((full.get("tool_resources") or {}).get(FILE_SEARCH) or {}).get("file_ids") or []
            ]
            kb_report.attached_files = len(ids)
            file_sets[kb.name] = set(ids)
            if len(ids) != len(files):
                kb_report.problems.append(
                    f"{len(ids)} file(s) attached to {FILE_SEARCH}, the folder holds {len(files)}"
                )
            records = {str(r.get("file_id")): r for r in self.api.agent_files(agent_id)}
            for fid in ids:
                record = records.get(fid)
                if record is None:
                    kb_report.problems.append(f"attached file {fid} has no file record")
                elif record.get("embedded") is not True:
                    kb_report.problems.append(f"file {fid} ({record.get('filename')}) is not embedded")
            state_ids = {str(v.get("file_id")) for v in self.state.kb(kb.name)["files"].values()}
            missing = sorted(
                n for n, v in self.state.kb(kb.name)["files"].items() if str(v.get("file_id")) not in set(ids)
            )
            if state_ids and missing:
                kb_report.problems.append(f"uploaded earlier but no longer attached: {', '.join(missing)}")
            self._verify_sharing(kb, str(full["_id"]), kb_report)
        for (a, a_ids), (b, b_ids) in combinations(file_sets.items(), 2):
            shared = sorted(a_ids & b_ids)
            if shared:
                report.problems.append(f"knowledge bases {a!r} and {b!r} share file(s) {', '.join(shared)}")
        for (a, a_hashes), (b, b_hashes) in combinations(hashes.items(), 2):
            same = sorted(set(a_hashes) & set(b_hashes))
            if same:
                pairs = ", ".join(f"{a_hashes[h]} = {b_hashes[h]}" for h in same)
                report.problems.append(f"knowledge bases {a!r} and {b!r} hold the same content: {pairs}")

    def _verify_sharing(self, kb: KnowledgeBasePlan, agent_db_id: str, kb_report: KbReport) -> None:
        perms = self.api.permissions(agent_db_id)
        if bool(perms.get("public")) != kb.public:
            want = "public" if kb.public else "not public"
            kb_report.problems.append(
                f"the Agent should be {want}; LibreChat says public={perms.get('public')}"
            )
        if kb.group:
            groups = [
                p
                for p in perms.get("principals") or []
                if p.get("type") == "group" and p.get("name") == kb.group
            ]
            if not any(p.get("accessRoleId") == VIEWER_ROLE for p in groups):
                kb_report.problems.append(f"the Agent is not shared with group {kb.group!r} as viewer")

    def run(self, *, skip_uploads: bool) -> RunReport:
        """Provision (unless `skip_uploads`), then verify."""
        report = RunReport(base_url=self.plan.base_url, skip_uploads=skip_uploads)
        report.knowledge_bases = [KbReport(kb.name) for kb in self.plan.knowledge_bases]
        if not skip_uploads:
            for kb, kb_report in zip(self.plan.knowledge_bases, report.knowledge_bases, strict=True):
                self.log(f"{kb.name}:")
                self.provision(kb, kb_report)
        self.verify(report)
        return report
