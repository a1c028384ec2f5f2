"""scripts/provision_knowledge_bases.py against a LibreChat stand-in that embeds through our real service."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import jwt
import pytest
import yaml

from tests.fixtures.patience import ceiling
from tests.operator.conftest import RagService
from tests.operator.librechat_standin import ADMIN_EMAIL, ADMIN_PASSWORD, StandinState, librechat_standin

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "provision_knowledge_bases.py"
ENV = {"LIBRECHAT_ADMIN_EMAIL": ADMIN_EMAIL, "LIBRECHAT_ADMIN_PASSWORD": ADMIN_PASSWORD}
FAST = ["--backoff-base", "0.01", "--backoff-cap", "0.05"]

pytestmark = [pytest.mark.e2e]


def load_script() -> ModuleType:
    """Import the script as a module (dataclasses need it registered by name)."""
    spec = importlib.util.spec_from_file_location("provision_knowledge_bases", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["provision_knowledge_bases"] = module
    spec.loader.exec_module(module)
    return module


provision = load_script()


@pytest.fixture
def standin(rag_service: RagService) -> Iterator[tuple[str, StandinState]]:
    with librechat_standin(rag_service.url, rag_service.jwt_secret) as served:
        yield served


def write_kb(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def make_plan(tmp_path: Path, base_url: str, kbs: dict[str, dict[str, str]], **extra: Any) -> Path:
    plan = {
        "base_url": base_url + "/",  # a trailing slash is the same deployment
        "knowledge_bases": [
            {
                "name": name,
                "folder": f"kb/{i}",
                "group": f"{name} readers",
                "agent": {
                    "provider": "openAI",
                    "model": "gpt-4o-mini",
                    "instructions": f"Answer from {name}.",
                },
                **extra.get(name, {}),
            }
            for i, name in enumerate(kbs)
        ],
    }
    for i, docs in enumerate(kbs.values()):
        write_kb(tmp_path / "kb" / str(i), docs)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan), encoding="utf-8")
    return path


def run(plan: Path, *args: str) -> int:
    return provision.main([str(plan), *FAST, *args], environ=ENV)


def docs(prefix: str, n: int) -> dict[str, str]:
    return {
        f"{prefix}-{i}.txt": f"{prefix} document {i}. The {prefix} code word number {i} is {prefix}{i * 7}x."
        for i in range(n)
    }


def kb_files(state: StandinState, name: str) -> list[str]:
    agent = next(a for a in state.agents.values() if a["name"] == name)
    return list(agent["tool_resources"].get("file_search", {}).get("file_ids", []))


def rag_search(rag: RagService, agent_id: str, file_ids: list[str], query: str) -> list[Any]:
    token = jwt.encode({"id": "507f1f77bcf86cd799439011", "exp": 2**31 - 1}, rag.jwt_secret, "HS256")
    r = httpx.post(
        f"{rag.url}/query_multiple",
        json={"query": query, "file_ids": file_ids, "entity_id": agent_id, "k": 10},
        headers={"Authorization": f"Bearer {token}"},
        timeout=ceiling(60),
    )
    return r.json() if r.status_code == 200 else []


def test_first_run_then_rerun_uploads_nothing(
    standin: tuple[str, StandinState], rag_service: RagService, tmp_path: Path
) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 3), "Forest": docs("forest", 2)})
    report = tmp_path / "report.json"
    assert run(plan, "--json", str(report)) == 0
    assert state.upload_requests == 5 and state.landed == 5
    assert sorted(g["name"] for g in state.groups.values()) == ["Forest readers", "Harbour readers"]
    harbour = kb_files(state, "Harbour")
    assert len(harbour) == 3 and len(kb_files(state, "Forest")) == 2
    assert all(state.files[f]["embedded"] for f in harbour)
    agent = next(a for a in state.agents.values() if a["name"] == "Harbour")
    assert agent["tools"] == ["file_search"] and agent["instructions"] == "Answer from Harbour."
    viewers = [e for e in state.acl if e["resourceId"] == agent["_id"] and e["principalType"] == "group"]
    assert [e["accessRoleId"] for e in viewers] == ["agent_viewer"]
    assert not any(e["principalType"] == "public" for e in state.acl)
    # the chunks really are in our service, owned by the Agent
    hits = rag_search(rag_service, agent["id"], harbour, "harbour code word number 2")
    assert hits and {h[0]["metadata"]["file_id"] for h in hits} <= set(harbour)
    saved = json.loads((tmp_path / "plan.state.json").read_text())
    assert saved["base_url"] == url and len(saved["knowledge_bases"]["Harbour"]["files"]) == 3
    assert json.loads(report.read_text())["ok"] is True

    assert run(plan) == 0  # nothing changed: nothing is sent again
    assert state.upload_requests == 5 and len(state.agents) == 2 and len(state.groups) == 2


def test_changed_file_is_reuploaded_and_the_old_version_removed(
    standin: tuple[str, StandinState], rag_service: RagService, tmp_path: Path
) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 2)})
    assert run(plan) == 0
    before = kb_files(state, "Harbour")
    (tmp_path / "kb/0/harbour-1.txt").write_text("harbour document 1, second edition: the pier is blue.")
    assert run(plan) == 0
    after = kb_files(state, "Harbour")
    assert state.upload_requests == 3 and len(after) == 2
    assert before[0] in after and before[1] not in after and before[1] not in state.files
    # the old version's chunks are gone from our service, the new one answers
    agent_id = next(a for a in state.agents.values() if a["name"] == "Harbour")["id"]
    assert rag_search(rag_service, agent_id, [before[1]], "pier") == []
    assert rag_search(rag_service, agent_id, after, "what colour is the pier")


def test_503_is_retried_and_a_landed_upload_is_not_sent_twice(
    standin: tuple[str, StandinState], tmp_path: Path
) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 3)})
    # first file: refused with 503, then accepted; second: stored, but the answer is lost (502)
    state.faults = ["503", "ok", "502-after"]
    assert run(plan) == 0
    assert state.upload_requests == 4  # 503 + retry, 1, 502 (no re-send: the check found it), 1
    assert state.landed == 3 and len(kb_files(state, "Harbour")) == 3


def test_retries_give_up_after_max_attempts(standin: tuple[str, StandinState], tmp_path: Path) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 1)})
    state.faults = ["503"] * 3
    assert run(plan, "--max-attempts", "3") == provision.EXIT_LIBRECHAT
    assert state.upload_requests == 3 and state.landed == 0
    assert run(plan) == 0  # the next run finishes the job


def test_skip_uploads_verifies_only(standin: tuple[str, StandinState], tmp_path: Path) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 2)})
    assert run(plan, "--skip-uploads") == provision.EXIT_VERIFY  # nothing exists yet
    assert state.agents == {} and state.groups == {} and state.upload_requests == 0
    assert run(plan) == 0
    assert run(plan, "--skip-uploads") == 0
    assert state.upload_requests == 2
    (tmp_path / "kb/0/harbour-9.txt").write_text("a new file nobody uploaded yet")
    assert run(plan, "--skip-uploads") == provision.EXIT_VERIFY  # 2 attached, 3 expected
    assert state.upload_requests == 2


def test_non_disjoint_deployment_is_detected(
    standin: tuple[str, StandinState], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 2), "Forest": docs("forest", 2)})
    assert run(plan) == 0
    # someone attached one of Harbour's files to Forest by hand
    forest = next(a for a in state.agents.values() if a["name"] == "Forest")
    forest["tool_resources"]["file_search"]["file_ids"].append(kb_files(state, "Harbour")[0])
    capsys.readouterr()
    assert run(plan, "--skip-uploads") == provision.EXIT_VERIFY
    out = capsys.readouterr().out
    assert "'Harbour' and 'Forest' share file(s)" in out or "'Forest' and 'Harbour' share file(s)" in out


def test_same_content_in_two_knowledge_bases_is_detected(
    standin: tuple[str, StandinState], tmp_path: Path
) -> None:
    url, _ = standin
    same = {"policy.txt": "The one travel policy both teams follow."}
    plan = make_plan(tmp_path, url, {"Harbour": same, "Forest": dict(same)})
    assert run(plan) == provision.EXIT_VERIFY


def test_public_sharing_follows_the_plan(standin: tuple[str, StandinState], tmp_path: Path) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 1)}, Harbour={"public": True})
    assert run(plan) == 0
    assert any(e["principalType"] == "public" for e in state.acl)
    text = yaml.safe_load(plan.read_text())
    text["knowledge_bases"][0]["public"] = False
    plan.write_text(yaml.safe_dump(text))
    assert run(plan) == 0  # sharing is brought back in line with the plan
    assert not any(e["principalType"] == "public" for e in state.acl)


def test_crash_mid_run_resumes_without_duplicates(standin: tuple[str, StandinState], tmp_path: Path) -> None:
    url, state = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 4)})
    state.faults = ["ok", "hold"]  # the second upload lands, then its answer hangs until we kill the run
    state.hold_s = 5.0
    env = {**os.environ, **ENV}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(plan), *FAST],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert state.landed_event.wait(60), "the second upload never landed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    saved = json.loads((tmp_path / "plan.state.json").read_text())
    assert len(saved["knowledge_bases"]["Harbour"]["files"]) == 1
    assert len(saved["knowledge_bases"]["Harbour"]["pending"]) == 1
    assert run(plan) == 0
    assert state.landed == 4 and len(kb_files(state, "Harbour")) == 4
    assert state.upload_requests == 4  # the landed one was recovered, not sent again
    saved = json.loads((tmp_path / "plan.state.json").read_text())
    assert saved["knowledge_bases"]["Harbour"]["pending"] == {}


def test_plan_and_state_errors(standin: tuple[str, StandinState], tmp_path: Path) -> None:
    url, _ = standin
    plan = make_plan(tmp_path, url, {"Harbour": docs("harbour", 1)})
    data = yaml.safe_load(plan.read_text())
    data["knowledge_bases"][0]["agent"]["password"] = "hunter2"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert run(bad) == provision.EXIT_USAGE  # credentials never live in a plan
    assert provision.main([str(plan), *FAST], environ={}) == provision.EXIT_USAGE  # no credentials at all
    wrong = {**ENV, "LIBRECHAT_ADMIN_PASSWORD": "wrong"}
    assert provision.main([str(plan), *FAST], environ=wrong) == provision.EXIT_LIBRECHAT
    state_file = tmp_path / "plan.state.json"
    state_file.write_text(
        json.dumps({"version": 1, "base_url": "https://other.example", "knowledge_bases": {}})
    )
    assert run(plan) == provision.EXIT_USAGE  # a state file of another deployment is refused
