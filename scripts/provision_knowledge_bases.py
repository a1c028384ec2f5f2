#!/usr/bin/env python3
"""Provision LibreChat knowledge bases from a plan, through LibreChat's own HTTP API only.

Usage:
    provision_knowledge_bases.py PLAN [--state PATH] [--skip-uploads] [--json PATH]
                                 [--max-attempts N] [--backoff-base S] [--backoff-cap S]

For each knowledge base of the plan (YAML or JSON): find or create the group and the Agent by exact
name, share the Agent with the group as viewer, upload every file of the folder into the Agent's
`file_search` resource (requiring `embedded: true`), then verify: per knowledge base the expected
file count, every file embedded, sharing as planned, and knowledge bases pairwise disjoint.

A state file, rewritten atomically after every upload and bound to the plan's base URL, remembers
each file by name and SHA-256: a re-run uploads only new or changed files, and a run that crashed
resumes without uploading anything twice (an upload that may have landed is looked up first).
`--skip-uploads` changes nothing in LibreChat and only verifies.

Credentials come from LIBRECHAT_ADMIN_EMAIL and LIBRECHAT_ADMIN_PASSWORD, or a prompt; never from
the plan.

Exit codes: 0 provisioned and verified; 1 verification found a problem; 2 bad plan, arguments,
state file or credentials; 3 LibreChat unreachable, login or preflight refused, or a request failed
after its retries.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import getpass
import hashlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a file from any folder
    sys.path.insert(0, str(REPO_ROOT))


def _use_project_venv() -> None:
    """Started by another Python that lacks our dependencies: re-run with the project's .venv."""
    venv = REPO_ROOT / ".venv"
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        # a fresh clone: say how to get the .venv, instead of ending in ModuleNotFoundError
        name = Path(__file__).name
        sys.exit(
            f"{name} needs ragoverlay's dependencies, which this Python ({sys.executable}) lacks, and "
            f"{venv} does not exist yet: run scripts/serve or scripts/test once (either creates it), "
            f"then run {name} again"
        )
    if Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606


try:
    import httpx
    import yaml
except ImportError:  # pragma: no cover - depends on how the script was started
    _use_project_venv()
    raise  # .venv exists and was used, yet lacks them: the import error is the honest answer

from tenacity import (  # noqa: E402
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
)

from app.clients.embeddings.http import parse_retry_after  # noqa: E402
from app.terminal import ProgressDisplay, write_line  # noqa: E402

EXIT_OK, EXIT_VERIFY, EXIT_USAGE, EXIT_LIBRECHAT = 0, 1, 2, 3
STATE_VERSION = 1
EMAIL_ENV, PASSWORD_ENV = "LIBRECHAT_ADMIN_EMAIL", "LIBRECHAT_ADMIN_PASSWORD"
VIEWER_ROLE = "agent_viewer"
FILE_SEARCH = "file_search"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# keys that would put a secret into a plan file, which is meant to be committed and shared
FORBIDDEN_PLAN_KEYS = frozenset({"password", "token", "secret", "api_key", "apikey", "credentials", "email"})
AGENT_SETTING_KEYS = ("provider", "model", "description", "instructions", "category", "model_parameters")


class PlanError(Exception):
    """The plan, the state file or the arguments cannot be used (exit 2)."""


class LibreChatError(Exception):
    """LibreChat refused or failed a request (exit 3)."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RetryableError(LibreChatError):
    """A 429/5xx answer or a transport failure: worth another attempt."""


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class KnowledgeBasePlan:
    """One knowledge base: an Agent, its folder of files, who may use it."""

    name: str
    folder: Path
    agent: Mapping[str, Any]
    group: str | None = None
    group_description: str | None = None
    include: tuple[str, ...] = ("*",)
    public: bool = False


@dataclass(frozen=True)
class Plan:
    """The whole plan: LibreChat's base URL and the knowledge bases."""

    base_url: str
    knowledge_bases: tuple[KnowledgeBasePlan, ...]
    state_file: Path | None = None


def normalise_url(url: str) -> str:
    """A base URL without trailing slashes, so one deployment has one spelling."""
    return url.strip().rstrip("/")


def _forbidden_keys(value: Any, where: str = "plan") -> list[str]:
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if str(key).lower() in FORBIDDEN_PLAN_KEYS:
                found.append(f"{where}.{key}")
            found.extend(_forbidden_keys(item, f"{where}.{key}"))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_forbidden_keys(item, f"{where}[{i}]"))
    return found


def load_plan(path: Path) -> Plan:
    """Read and check a YAML or JSON plan; folders are relative to the plan's own folder."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is valid YAML
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"cannot read plan {path}: {exc}") from None
    if not isinstance(raw, Mapping):
        raise PlanError("the plan must be a mapping with `base_url` and `knowledge_bases`")
    secrets = _forbidden_keys(raw)
    if secrets:
        raise PlanError(
            f"the plan must not hold credentials ({', '.join(secrets)}); "
            f"set {EMAIL_ENV} and {PASSWORD_ENV} in the environment instead"
        )
    base_url = raw.get("base_url")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise PlanError("`base_url` must be LibreChat's URL, e.g. https://chat.example.com")
    entries = raw.get("knowledge_bases")
    if not isinstance(entries, list) or not entries:
        raise PlanError("`knowledge_bases` must be a non-empty list")
    root = path.resolve().parent
    kbs: list[KnowledgeBasePlan] = []
    for i, entry in enumerate(entries):
        kbs.append(_knowledge_base(entry, i, root))
    names = [kb.name for kb in kbs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(f"knowledge base names must be unique: {', '.join(duplicates)}")
    state = raw.get("state_file")
    return Plan(
        base_url=normalise_url(base_url),
        knowledge_bases=tuple(kbs),
        state_file=(root / state) if isinstance(state, str) and state else None,
    )


def _knowledge_base(entry: Any, index: int, root: Path) -> KnowledgeBasePlan:
    where = f"knowledge_bases[{index}]"
    if not isinstance(entry, Mapping):
        raise PlanError(f"{where} must be a mapping")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PlanError(f"{where}.name must be a non-empty string (the Agent's exact name)")
    folder = entry.get("folder")
    if not isinstance(folder, str) or not folder:
        raise PlanError(f"{where}.folder must name a folder of files")
    folder_path = (root / folder).resolve()
    if not folder_path.is_dir():
        raise PlanError(f"{where}.folder {folder_path} is not a folder")
    agent = entry.get("agent") or {}
    if not isinstance(agent, Mapping) or not agent.get("provider") or not agent.get("model"):
        raise PlanError(
            f"{where}.agent needs at least `provider` and `model` (used when the Agent is created)"
        )
    unknown = sorted(set(agent) - set(AGENT_SETTING_KEYS))
    if unknown:
        raise PlanError(
            f"{where}.agent: unknown setting(s) {', '.join(unknown)}; allowed: {AGENT_SETTING_KEYS}"
        )
    group = entry.get("group")
    group_name: str | None = None
    group_description: str | None = None
    if isinstance(group, Mapping):
        group_name, group_description = group.get("name"), group.get("description")
    elif group is not None:
        group_name = group
    if group_name is not None and (not isinstance(group_name, str) or not group_name.strip()):
        raise PlanError(f"{where}.group must be a group name or {{name, description}}")
    include = entry.get("include", ["*"])
    if isinstance(include, str):
        include = [include]
    if not isinstance(include, list) or not all(isinstance(p, str) and p for p in include):
        raise PlanError(f"{where}.include must be a list of glob patterns")
    public = entry.get("public", False)
    if not isinstance(public, bool):
        raise PlanError(f"{where}.public must be true or false")
    return KnowledgeBasePlan(
        name=name.strip(),
        folder=folder_path,
        agent=dict(agent),
        group=group_name.strip() if group_name else None,
        group_description=group_description,
        include=tuple(include),
        public=public,
    )


@dataclass(frozen=True)
class LocalFile:
    """A file of a knowledge base's folder, identified by its relative name and content hash."""

    name: str
    path: Path
    sha256: str
    size: int


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(kb: KnowledgeBasePlan) -> list[LocalFile]:
    """The folder's files matching `include` (hidden files skipped), sorted by relative name."""
    found: list[LocalFile] = []
    for path in sorted(kb.folder.rglob("*")):
        rel = path.relative_to(kb.folder).as_posix()
        if not path.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        if not any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(path.name, p) for p in kb.include):
            continue
        found.append(LocalFile(name=rel, path=path, sha256=sha256_of(path), size=path.stat().st_size))
    return found


# --------------------------------------------------------------------------- state


class State:
    """What earlier runs did, per knowledge base: ids and the uploaded files by name and SHA-256."""

    def __init__(self, path: Path, base_url: str, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.base_url = base_url
        self.data: dict[str, Any] = data or {
            "version": STATE_VERSION,
            "base_url": base_url,
            "knowledge_bases": {},
        }

    @classmethod
    def load(cls, path: Path, base_url: str) -> State:
        """Read the state file, refusing one written for another LibreChat."""
        if not path.exists():
            return cls(path, base_url)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PlanError(f"cannot read state file {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise PlanError(f"state file {path} is not a version-{STATE_VERSION} provisioning state")
        if normalise_url(str(data.get("base_url", ""))) != base_url:
            raise PlanError(
                f"state file {path} belongs to {data.get('base_url')!r}, not {base_url!r}; "
                "pass --state with another path for this deployment"
            )
        data.setdefault("knowledge_bases", {})
        return cls(path, base_url, data)

    def kb(self, name: str) -> dict[str, Any]:
        """The mutable state of one knowledge base."""
        entry: dict[str, Any] = self.data["knowledge_bases"].setdefault(name, {})
        entry.setdefault("files", {})
        entry.setdefault("pending", {})
        return entry

    def save(self) -> None:
        """Write the state atomically: a temp file in the same folder, fsync, rename, fsync the folder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.data, fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # not every platform can open a folder
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def now_iso() -> str:
    """The current UTC time as ISO-8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- LibreChat client


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry 429/5xx answers and transport failures."""

    attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 30.0

    def wait(self, state: RetryCallState) -> float:
        """Capped exponential backoff; a longer `Retry-After` from the server wins (up to the cap)."""
        delay = float(min(self.cap_s, self.base_s * (2 ** (state.attempt_number - 1))))
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, LibreChatError) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.cap_s))
        return delay

    def retrying(self, log: Callable[[str], None]) -> Retrying:
        """A tenacity loop for this policy, logging each retry."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log(f"  retry {state.attempt_number}/{self.attempts - 1} after: {exc}")

        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=self.wait,
            retry=retry_if_exception_type(RetryableError),
            before_sleep=before_sleep,
            reraise=True,
        )


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, Mapping):
        for key in ("message", "error", "detail"):
            if body.get(key):
                return str(body[key])[:300]
    return str(body)[:200]


class LibreChat:
    """The slice of LibreChat's HTTP API provisioning needs, with retries on 429/5xx."""

    def __init__(
        self,
        base_url: str,
        *,
        policy: RetryPolicy,
        log: Callable[[str], None],
        timeout_s: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self.policy = policy
        self.log = log
        self.token: str | None = None
        self.client = httpx.Client(base_url=base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    # -- plumbing

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            response = self.client.request(method, path, headers=headers, **kwargs)
        except httpx.TransportError as exc:
            raise RetryableError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(
                f"{method} {path}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        return response

    def call(self, method: str, path: str, *, expect: Sequence[int] = (200,), **kwargs: Any) -> Any:
        """One idempotent request with retries; the JSON body of an expected status, else an error."""
        for attempt in self.policy.retrying(self.log):
            with attempt:
                response = self._send(method, path, **kwargs)
        if response.status_code not in expect:
            raise LibreChatError(
                f"{method} {path}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError:
            return response.text

    # -- routes

    def health(self) -> None:
        """GET /health must answer 200."""
        self.call("GET", "/health")

    def login(self, email: str, password: str) -> dict[str, Any]:
        """POST /api/auth/login; keeps the token for every later request."""
        body = self.call("POST", "/api/auth/login", json={"email": email, "password": password})
        if not isinstance(body, Mapping) or not body.get("token"):
            if isinstance(body, Mapping) and body.get("twoFAPending"):
                raise LibreChatError("this admin account uses two-factor login; use an account without it")
            raise LibreChatError("login answered without a token")
        self.token = str(body["token"])
        return dict(body.get("user") or {})

    def preflight(self) -> None:
        """Agents enabled (/api/config) and `file_search` among the agents' capabilities (/api/endpoints)."""
        config = self.call("GET", "/api/config")
        interface = config.get("interface") if isinstance(config, Mapping) else None
        agents_ui = interface.get("agents") if isinstance(interface, Mapping) else None
        if agents_ui is False or (isinstance(agents_ui, Mapping) and agents_ui.get("use") is False):
            raise LibreChatError("Agents are disabled in LibreChat (/api/config interface.agents)")
        endpoints = self.call("GET", "/api/endpoints")
        agents = endpoints.get("agents") if isinstance(endpoints, Mapping) else None
        if not isinstance(agents, Mapping):
            raise LibreChatError(
                "the agents endpoint is not enabled in LibreChat (/api/endpoints has no `agents`)"
            )
        capabilities = agents.get("capabilities") or []
        if FILE_SEARCH not in capabilities:
            raise LibreChatError(
                f"`file_search` is not among the agents' capabilities (/api/endpoints: {list(capabilities)})"
            )

    def find_group(self, name: str) -> dict[str, Any] | None:
        """The group with exactly this name (admin API), or None."""
        offset, limit = 0, 100
        while True:
            body = self.call(
                "GET", "/api/admin/groups", params={"search": name, "limit": limit, "offset": offset}
            )
            groups = body.get("groups") or []
            for group in groups:
                if group.get("name") == name:
                    return dict(group)
            offset += len(groups)
            if not groups or offset >= int(body.get("total") or 0):
                return None

    def create_group(self, name: str, description: str | None) -> dict[str, Any]:
        """POST /api/admin/groups (a local group, no members)."""
        payload: dict[str, Any] = {"name": name, "source": "local"}
        if description:
            payload["description"] = description
        body = self.call("POST", "/api/admin/groups", json=payload, expect=(201,))
        return dict(body["group"])

    def find_agents(self, name: str) -> list[dict[str, Any]]:
        """Agents the admin can see whose name is exactly `name`."""
        matches: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"search": name, "limit": 100}
            if cursor:
                params["cursor"] = cursor
            body = self.call("GET", "/api/agents", params=params)
            matches.extend(dict(a) for a in body.get("data") or [] if a.get("name") == name)
            cursor = body.get("after")
            if not body.get("has_more") or not cursor:
                return matches

    def create_agent(self, name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """POST /api/agents with the plan's settings and the file_search tool."""
        payload = {"name": name, **settings, "tools": [FILE_SEARCH]}
        return dict(self.call("POST", "/api/agents", json=payload, expect=(201,)))

    def update_agent(self, agent_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH /api/agents/:id."""
        return dict(self.call("PATCH", f"/api/agents/{agent_id}", json=dict(changes)))

    def agent_expanded(self, agent_id: str) -> dict[str, Any]:
        """GET /api/agents/:id/expanded: the full Agent, tool resources included (EDIT permission)."""
        return dict(self.call("GET", f"/api/agents/{agent_id}/expanded"))

    def agent_files(self, agent_id: str) -> list[dict[str, Any]]:
        """GET /api/files/agent/:id: file records attached to the Agent (author or editor)."""
        return [dict(f) for f in self.call("GET", f"/api/files/agent/{agent_id}")]

    def permissions(self, agent_db_id: str) -> dict[str, Any]:
        """GET /api/permissions/agent/:_id: principals and public flag."""
        return dict(self.call("GET", f"/api/permissions/agent/{agent_db_id}"))

    def share(self, agent_db_id: str, group_id: str | None, public: bool) -> None:
        """PUT /api/permissions/agent/:_id: the group as viewer; public only when the plan says so."""
        updated = [{"type": "group", "id": group_id, "accessRoleId": VIEWER_ROLE}] if group_id else []
        payload: dict[str, Any] = {"updated": updated, "removed": [], "public": public}
        if public:
            payload["publicAccessRoleId"] = VIEWER_ROLE
        self.call("PUT", f"/api/permissions/agent/{agent_db_id}", json=payload)

    def delete_file(self, agent_id: str, file_id: str, filepath: str) -> None:
        """DELETE /api/files: remove a file from the Agent and from LibreChat."""
        body = {
            "files": [{"file_id": file_id, "filepath": filepath}],
            "agent_id": agent_id,
            "tool_resource": FILE_SEARCH,
        }
        self.call("DELETE", "/api/files", json=body)

    def upload(self, agent_id: str, local: LocalFile, temp_file_id: str) -> dict[str, Any]:
        """POST /api/files once (multipart); the reply must say `embedded: true`.

        LibreChat assigns its own `file_id` and keeps ours as `temp_file_id`, which is how a retry
        recognises an upload that landed although its answer was lost.
        """
        fields = {
            "file_id": temp_file_id,
            "agent_id": agent_id,
            "tool_resource": FILE_SEARCH,
            "endpoint": "agents",
        }
        with local.path.open("rb") as fh:
            # text fields first: LibreChat's multer reads the body in order and needs them before the file
            files = {"file": (local.path.name, fh, "application/octet-stream")}
            response = self._send("POST", "/api/files", data=fields, files=files)
        if response.status_code != 200:
            raise LibreChatError(
                f"upload of {local.name}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
            )
        body = response.json()
        if not isinstance(body, Mapping) or body.get("embedded") is not True:
            raise LibreChatError(
                f"upload of {local.name} was stored but not embedded (`embedded` is not true)"
            )
        return dict(body)


# --------------------------------------------------------------------------- provisioning


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


# --------------------------------------------------------------------------- command line


def credentials(environ: Mapping[str, str], *, interactive: bool) -> tuple[str, str]:
    """Admin email and password from the environment, else a prompt (never from the plan)."""
    email, password = environ.get(EMAIL_ENV, "").strip(), environ.get(PASSWORD_ENV, "")
    if (not email or not password) and not interactive:
        raise PlanError(f"set {EMAIL_ENV} and {PASSWORD_ENV} (no terminal to prompt on)")
    if not email:
        email = input("LibreChat admin email: ").strip()
    if not password:
        password = getpass.getpass("LibreChat admin password: ")
    if not email or not password:
        raise PlanError("an admin email and password are needed")
    return email, password


def print_report(report: RunReport, out: Callable[[str], None]) -> None:
    """The human summary."""
    mode = "verify only" if report.skip_uploads else "provision + verify"
    out(f"\nLibreChat {report.base_url} ({mode})")
    for kb in report.knowledge_bases:
        status = "OK" if not kb.problems else "PROBLEM"
        out(
            f"  [{status}] {kb.name} ({kb.agent_id or 'no Agent'}): "
            f"{kb.attached_files}/{kb.expected_files} files; "
            f"uploaded {len(kb.uploaded)}, unchanged {len(kb.skipped)}, recovered {len(kb.recovered)}, "
            f"replaced {len(kb.replaced)}"
        )
        for problem in kb.problems:
            out(f"      - {problem}")
    for problem in report.problems:
        out(f"  [PROBLEM] {problem}")
    out("All knowledge bases verified." if report.ok else "Verification FAILED.")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("plan", type=Path, help="plan file (YAML or JSON)")
    parser.add_argument(
        "--state",
        type=Path,
        help="state file (default: the plan's state_file, else <plan>.state.json next to the plan)",
    )
    parser.add_argument("--skip-uploads", action="store_true", help="change nothing; only verify")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the report as JSON here")
    parser.add_argument(
        "--max-attempts", type=int, default=5, help="attempts per request on 429/5xx (default 5)"
    )
    parser.add_argument(
        "--backoff-base", type=float, default=1.0, help="first retry delay in seconds (default 1)"
    )
    parser.add_argument(
        "--backoff-cap", type=float, default=30.0, help="longest retry delay in seconds (default 30)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per request (uploads embed synchronously)"
    )
    args = parser.parse_args(argv)
    if args.max_attempts < 1 or args.backoff_base < 0 or args.backoff_cap < 0:
        parser.error("--max-attempts must be at least 1 and the backoff values non-negative")
    return args


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run the command; returns the exit code."""
    args = parse_args(argv)
    env = os.environ if environ is None else environ

    def log(message: str) -> None:
        write_line(message, sys.stdout)

    try:
        plan = load_plan(args.plan)
        state_path = args.state or plan.state_file or args.plan.with_name(args.plan.stem + ".state.json")
        state = State.load(state_path, plan.base_url)
        email, password = credentials(env, interactive=sys.stdin.isatty())
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    policy = RetryPolicy(attempts=args.max_attempts, base_s=args.backoff_base, cap_s=args.backoff_cap)
    api = LibreChat(plan.base_url, policy=policy, log=log, timeout_s=args.timeout, transport=transport)
    try:
        api.health()
        api.login(email, password)
        api.preflight()
        report = Provisioner(plan, api, state, log=log).run(skip_uploads=args.skip_uploads)
    except LibreChatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LIBRECHAT
    finally:
        api.close()
    print_report(report, log)
    if args.json_path:
        args.json_path.write_text(
            json.dumps(asdict(report) | {"ok": report.ok}, indent=2) + "\n", encoding="utf-8"
        )
    return EXIT_OK if report.ok else EXIT_VERIFY


if __name__ == "__main__":
    sys.exit(main())
