"""The provisioning plan (YAML or JSON), checked, and the files of each knowledge base's folder."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EMAIL_ENV, PASSWORD_ENV = "LIBRECHAT_ADMIN_EMAIL", "LIBRECHAT_ADMIN_PASSWORD"
# keys that would put a secret into a plan file, which is meant to be committed and shared
FORBIDDEN_PLAN_KEYS = frozenset({"password", "token", "secret", "api_key", "apikey", "credentials", "email"})
AGENT_SETTING_KEYS = ("provider", "model", "description", "instructions", "category", "model_parameters")


class PlanError(Exception):
    """The plan, the state file or the arguments cannot be used (exit 2)."""


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
