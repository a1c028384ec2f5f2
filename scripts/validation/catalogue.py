"""LibreChat's MongoDB catalogue: audited, and its knowledge bases as probe namespaces."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from scripts.validation.inventory import AGENT, Namespace, UsageError


def catalogue_checks(uri: str, plan_path: Path | None) -> tuple[dict[str, Any], list[Namespace]]:
    """Audit LibreChat's catalogue; also return its knowledge bases as probe namespaces."""
    from pymongo.errors import PyMongoError

    from app.catalogue import mongo
    from app.catalogue.audit import audit_catalogue

    names: set[str] | None = None
    public_names: set[str] = set()
    if plan_path is not None:
        try:
            plan = yaml.safe_load(plan_path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read plan {plan_path}: {exc}") from None
        kbs = plan.get("knowledge_bases") or []
        names = {str(kb.get("name")) for kb in kbs if isinstance(kb, Mapping)}
        public_names = {
            str(kb.get("name")) for kb in kbs if isinstance(kb, Mapping) and kb.get("public") is True
        }
    client = mongo.connect(uri)
    try:
        db = mongo.catalogue_database(client)
        agents = mongo.read_agents(db)
        only: set[str] | None = None
        if names is not None:
            by_name = [a for a in agents if a.get("name") in names]
            only = {str(a["id"]) for a in by_name}
            missing = sorted(names - {str(a.get("name")) for a in by_name})
        else:
            missing = []
        public_allowed = {str(a["id"]) for a in agents if a.get("name") in public_names}
        considered = [a for a in agents if only is None or str(a.get("id")) in only]
        file_ids = {
            str(f)
            for a in considered
            for r in (a.get("tool_resources") or {}).values()
            if isinstance(r, Mapping)
            for f in r.get("file_ids") or []
        }
        files = mongo.read_files(db, file_ids)
        entries = mongo.read_public_agent_acl(db)
    except PyMongoError as exc:
        raise ConnectionError(f"MongoDB: {type(exc).__name__}: {exc}") from None
    finally:
        client.close()
    result = audit_catalogue(
        agents=considered, files=files, acl_entries=entries, public_allowed=public_allowed, only_agents=only
    )
    findings = [{"check": f.check, "message": f.message, "ids": list(f.ids)} for f in result.findings]
    findings.extend(
        {"check": "agent_missing", "message": f"no Agent named {n!r} in the catalogue", "ids": []}
        for n in missing
    )
    namespaces = [
        Namespace(str(a["id"]), AGENT, ids)
        for a in considered
        if (
            ids := [
                str(f)
                for f in ((a.get("tool_resources") or {}).get("file_search") or {}).get("file_ids") or []
            ]
        )
    ]
    report = {
        "knowledge_bases": result.knowledge_bases,
        "files_checked": result.files_checked,
        "findings": findings,
        "ok": not findings,
    }
    return report, namespaces
