"""scripts/validate_deployment.py against our own service (scripts/serve, embedded defaults, a JWT secret)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import jwt
import pytest
from pymongo.database import Database

from tests.fixtures.patience import ceiling, wait_until
from tests.operator.catalogue_seed import Catalogue
from tests.operator.conftest import V2_AGENTS, RagService

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "validate_deployment.py"

pytestmark = [pytest.mark.e2e]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_deployment", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["validate_deployment"] = module
    spec.loader.exec_module(module)
    return module


validate = load_script()


def token(rag: RagService, user_id: str) -> dict[str, str]:
    claims = {"id": user_id, "exp": int(time.time()) + 300}
    return {"Authorization": f"Bearer {jwt.encode(claims, rag.jwt_secret, 'HS256')}"}


def embed(rag: RagService, file_id: str, text: str, *, entity_id: str | None, user: str) -> None:
    data = {"file_id": file_id, **({"entity_id": entity_id} if entity_id else {})}
    r = httpx.post(
        f"{rag.url}/embed",
        data=data,
        files={"file": (f"{file_id}.txt", text.encode(), "text/plain")},
        headers=token(rag, user),
        timeout=ceiling(120),
    )
    assert r.status_code == 200, r.text


def test_seeded_run_with_at_least_500_probes(
    rag_service: RagService, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a knowledge base of our own, with a grounded-queries file, next to the seeded corpus
    agent = "agent_validator_inventory"
    embed(
        rag_service,
        "inv-lighthouse",
        "The lighthouse keeper logged a storm of nine days.",
        entity_id=agent,
        user="507f191e810c19729de860ea",
    )
    embed(
        rag_service,
        "inv-orchard",
        "The orchard yields forty baskets of pears each autumn.",
        entity_id=agent,
        user="507f191e810c19729de860ea",
    )
    inventory = tmp_path / "inventory.json"
    inventory.write_text(
        json.dumps(
            {"namespaces": [{"id": agent, "kind": "agent", "file_ids": ["inv-lighthouse", "inv-orchard"]}]}
        )
    )
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        json.dumps(
            {
                "query": "How long did the storm last?",
                "file_ids": ["inv-lighthouse", "inv-orchard"],
                "entity_id": agent,
                "expect_file": "inv-lighthouse",
                "expect_text": "nine days",
                "k": 1,
            }
        )
        + "\n"
    )
    report_path = tmp_path / "report.json"
    code = validate.main(
        [
            "--rag-url",
            rag_service.url,
            "--seed",
            "--inventory",
            str(inventory),
            "--queries",
            str(queries),
            "--json",
            str(report_path),
        ],
        environ={"JWT_SECRET": rag_service.jwt_secret},
    )
    report = json.loads(report_path.read_text())
    probes = report["probes"]
    print(
        f"validate_deployment.py ran {probes['total']} probes: {probes['passed']} passed, "
        f"{probes['failed']} failed",
        file=sys.__stderr__,
    )
    assert probes["total"] >= 500
    kinds = probes["by_kind"]
    for kind in (
        "reach",
        "foreign_query",
        "foreign_batch",
        "mixed_batch",
        "foreign_documents",
        "foreign_context",
        "ids_listing",
        "user_as_entity",
        "bad_token",
        "limits",
        "grounded",
    ):
        assert kinds[kind]["run"] > 0, kind
    assert kinds["grounded"]["run"] == 13  # 12 seeded + 1 from the file
    assert report["seed_left_behind"] == []
    failed = {k for k, v in kinds.items() if v["failed"]}
    # a user id named as entity_id is refused (ENTITY_ID_PATTERN), so every probe passes; that the
    # validator does catch a leaky service is shown by test_validate_unit's leaky fake
    assert code == 0 and failed == set(), probes["failures"][:5]
    assert "probes run:" in capsys.readouterr().out


def test_catalogue_checks_with_probes_on_its_knowledge_bases(
    rag_service: RagService, mongo_uri: str, mongo_db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    cat = Catalogue(mongo_db)
    admin = cat.user("ADMIN")
    a_files = [cat.file(admin, name=f"a{i}.txt") for i in range(2)]
    b_files = [cat.file(admin, name=f"b{i}.txt") for i in range(2)]
    a = cat.agent(admin, a_files)
    b = cat.agent(admin, b_files)
    for agent, ids in ((a, a_files), (b, b_files)):
        for fid in ids:
            embed(
                rag_service, fid, f"Knowledge base {agent} document {fid}.", entity_id=agent, user=str(admin)
            )
    group = cat.group("readers", [])
    cat.share(a, "group", group)
    uri = mongo_uri.rsplit("/", 1)[0] + "/" + mongo_db.name
    args = [
        "--rag-url",
        rag_service.url,
        "--mongo-uri",
        uri,
        "--min-probes",
        "50",
        "--json",
        str(tmp_path / "r.json"),
    ]
    env = {"JWT_SECRET": rag_service.jwt_secret}
    assert validate.main(args, environ=env) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["catalogue"] == {"knowledge_bases": 2, "files_checked": 4, "findings": [], "ok": True}
    assert report["probes"]["by_kind"]["reach"] == {"run": 2, "failed": 0}  # both KBs read their own files

    # now break it: B also holds one of A's files, one file is not embedded, A is public
    mongo_db["agents"].update_one({"id": b}, {"$push": {"tool_resources.file_search.file_ids": a_files[0]}})
    mongo_db["files"].update_one({"file_id": b_files[1]}, {"$set": {"embedded": False}})
    cat.share(a, "public", None)
    assert validate.main(args, environ=env) == validate.EXIT_FAILED
    findings = json.loads((tmp_path / "r.json").read_text())["catalogue"]["findings"]
    assert sorted(f["check"] for f in findings) == [
        "file_attached_twice",
        "kb_disjoint",
        "not_embedded",
        "public_agent",
    ]
    # a plan that makes A public accepts the sharing
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps({"knowledge_bases": [{"name": a, "public": True}, {"name": b}]}))
    assert validate.main([*args, "--plan", str(plan)], environ=env) == validate.EXIT_FAILED
    findings = json.loads((tmp_path / "r.json").read_text())["catalogue"]["findings"]
    assert "public_agent" not in {f["check"] for f in findings}


def test_unreachable_service_and_mongo(tmp_path: Path) -> None:
    env = {"JWT_SECRET": "x" * 40}
    assert (
        validate.main(["--rag-url", "http://127.0.0.1:9", "--timeout", "2"], environ=env)
        == validate.EXIT_UNREACHABLE
    )
    assert validate.main(["--rag-url", "http://127.0.0.1:9"], environ={}) == validate.EXIT_USAGE  # no secret


def test_v2_probes_pass_against_the_real_query_v2(rag_service: RagService, tmp_path: Path) -> None:
    """--v2: an unanswerable question and a foreign file id, per V2 Agent, refused by our /query_v2."""
    uploader = "507f191e810c19729de860eb"
    texts = {
        V2_AGENTS[0]: [
            "The ferry to the island leaves at 07:40 from pier 3.",
            "Tickets cost 12 EUR per adult.",
        ],
        V2_AGENTS[1]: ["The glacier retreated 40 m in 2021.", "Ice cores are stored at -30 degrees."],
    }
    namespaces = []
    for agent, docs in texts.items():
        ids = [f"{agent}-doc{i}" for i in range(len(docs))]
        for file_id, text in zip(ids, docs, strict=True):
            embed(rag_service, file_id, text, entity_id=agent, user=uploader)
        namespaces.append({"id": agent, "kind": "agent", "file_ids": ids})
        # the first upload queued the Agent's V2 backfill: wait until /query_v2 finds each file by its text
        for file_id, text in zip(ids, docs, strict=True):

            def found(
                file_id: str = file_id, text: str = text, ids: list[str] = ids, agent: str = agent
            ) -> bool:
                r = httpx.post(
                    f"{rag_service.url}/query_v2",
                    json={"query": text, "file_ids": ids, "entity_id": agent},
                    headers=token(rag_service, uploader),
                    timeout=ceiling(60),
                )
                return r.status_code == 200 and file_id in {item["file_id"] for item in r.json()["results"]}

            wait_until(found, what=f"/query_v2 to find {file_id} by its text", within_s=180, every_s=0.5)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"namespaces": namespaces}))
    report_path = tmp_path / "report.json"
    code = validate.main(
        ["--rag-url", rag_service.url, "--inventory", str(inventory), "--v2", "--json", str(report_path)],
        environ={"JWT_SECRET": rag_service.jwt_secret},
    )
    report = json.loads(report_path.read_text())
    kinds = report["probes"]["by_kind"]
    assert kinds["v2_unanswerable"]["run"] == 2 and kinds["v2_foreign"]["run"] == 2
    assert code == 0 and not any(v["failed"] for v in kinds.values()), report["probes"]["failures"][:5]
