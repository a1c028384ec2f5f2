"""The validator's probe planning and checks on recorded replies (no sockets: httpx.MockTransport)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.operator.test_validate_e2e import validate

SECRET = "unit-secret-0123456789abcdef0123456789abcdef"
OWN, FOREIGN = {"a1", "a2"}, "b1"


def reply(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


def doc(file_id: str, owner: str = "agent_a", text: str = "text") -> dict[str, Any]:
    return {
        "id": None,
        "page_content": text,
        "metadata": {"file_id": file_id, "user_id": owner},
        "type": "Document",
    }


def test_nothing_foreign_on_recorded_replies() -> None:
    check = validate.nothing_foreign(OWN, {"agent_a", "u1"})
    assert check(reply(200, [[doc("a1"), 0.1]])) is None
    assert check(reply(200, [])) is None
    assert check(reply(404, {"detail": "No documents found for the given query"})) is None
    assert check(reply(400, {"detail": "entity_id must look like an Agent id"})) is None
    assert "foreign" in check(reply(200, [[doc("a1"), 0.1], [doc(FOREIGN, "agent_b"), 0.2]]))
    assert "owned by agent_b" in check(reply(200, [[doc("a2", "agent_b"), 0.1]]))
    assert "foreign" in check(
        reply(200, [{"page_content": "x", "metadata": {"file_id": FOREIGN}}])
    )  # /documents
    assert "foreign" in check(reply(200, ["a1", FOREIGN]))  # /ids
    assert check(reply(401, {"detail": "Invalid token"})) == "unexpected HTTP 401"  # proves nothing
    assert check(reply(500, {"detail": "boom"})) == "unexpected HTTP 500"


def test_reach_grounded_and_refused() -> None:
    assert validate.reaches(OWN)(reply(200, [[doc("a1"), 0.1]])) is None
    assert "no results" in validate.reaches(OWN)(reply(200, []))
    assert "HTTP 404" in validate.reaches(OWN)(reply(404, {}))
    check = validate.grounded("a1", "Nine Days")
    assert check(reply(200, [[doc("a1", text="a storm of nine days"), 0.2]])) is None
    assert "not among" in check(reply(200, [[doc("a2", text="nine days"), 0.2]]))
    assert "contains" in check(reply(200, [[doc("a1", text="a short storm"), 0.2]]))
    assert validate.refused(401)(reply(401, {})) is None
    assert validate.refused(401)(reply(200, [])) == "HTTP 200, expected 401"


V2_REFUSAL = {
    "route": "v2",
    "index_version": "v2-2026-01",
    "results": [],
    "degraded": False,
    "safe_refusal": "I could not find this in the documents available to this assistant.",
}


def v2_result(file_id: str) -> dict[str, Any]:
    return {
        "citation_id": "V2-1",
        "file_id": file_id,
        "filename": "x.pdf",
        "content": "...",
        "score": 0.8,
        "page": 1,
        "section": [],
        "chunk_kind": "prose",
        "channels": ["dense"],
    }


def test_v2_safe_refusal_on_recorded_replies() -> None:
    check = validate.v2_safe_refusal(OWN)
    assert check(reply(200, V2_REFUSAL)) is None
    assert "result(s)" in check(
        reply(200, {**V2_REFUSAL, "results": [v2_result("a1")], "safe_refusal": None})
    )
    assert "foreign" in check(reply(200, {**V2_REFUSAL, "results": [v2_result(FOREIGN)]}))
    assert "safe_refusal" in check(reply(200, {**V2_REFUSAL, "safe_refusal": None}))
    assert "safe_refusal" in check(reply(200, {**V2_REFUSAL, "safe_refusal": "  "}))
    assert "not a V2 answer" in check(reply(200, [[doc("a1"), 0.1]]))
    assert check(reply(503, {"detail": "V2 is not enabled"})) == "HTTP 503: V2 is not enabled"
    assert check(reply(403, {"detail": "namespace not enabled"})).startswith("HTTP 403")


def namespaces() -> list[Any]:
    return [
        validate.Namespace("agent_a", "agent", ["a1", "a2"]),
        validate.Namespace("agent_b", "agent", ["b1"]),
        validate.Namespace("u1", "user", ["u1f"]),
        validate.Namespace("u2", "user", ["u2f"]),
    ]


def test_v2_probes_through_a_recorded_service() -> None:
    """The V2 probes send the contract's request shape and judge the recorded answers."""
    seen: list[dict[str, Any]] = []
    answers = {
        "agent_a": V2_REFUSAL,
        "agent_b": {**V2_REFUSAL, "results": [v2_result("a1")], "safe_refusal": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        assert request.url.path == "/query_v2" and request.headers["authorization"].startswith("Bearer ")
        return httpx.Response(200, json=answers[body["entity_id"]])

    tokens = validate.Tokens(SECRET)
    probes = validate.plan_v2_probes(namespaces(), tokens, "probe-user")
    with httpx.Client(base_url="http://rag.test", transport=httpx.MockTransport(handler)) as client:
        results = validate.run_probes(client, probes, concurrency=1)
    assert [(r.kind, r.error is None) for r in results] == [
        ("v2_unanswerable", True),
        ("v2_foreign", True),  # agent_a: refused safely both times
        ("v2_unanswerable", False),
        ("v2_foreign", False),  # agent_b leaks a1: caught
    ]
    foreign_bodies = [b for b in seen if b["file_ids"] != ["a1", "a2"] and b["entity_id"] == "agent_a"]
    assert foreign_bodies and all(set(b["file_ids"]).isdisjoint({"a1", "a2"}) for b in foreign_bodies)
    assert all(1 <= b["k"] <= 10 and len(b["query"]) <= 4000 for b in seen)


def test_isolation_plan_shape() -> None:
    tokens = validate.Tokens(SECRET)
    probes = validate.plan_isolation_probes(namespaces(), tokens, "probe-user", ["q1", "q2"])
    for p in probes:
        body = p.json_body or {}
        entity = body.get("entity_id") or (p.params or {}).get("entity_id")
        if p.kind == "user_as_entity":
            assert entity in {"u1", "u2"}
        elif "agent " in p.description:
            assert entity and entity.startswith("agent_")  # Agent readers always name their Agent
        else:
            assert entity is None  # user readers never send entity_id
    foreign_for_a = {
        p.json_body["file_id"]
        for p in probes
        if p.kind == "foreign_query" and p.description.startswith("agent agent_a")
    }
    assert foreign_for_a == {"b1", "u1f", "u2f"}
    assert sum(p.kind == "reach" for p in probes) == 4
    # per question: one /query per foreign file (agent_a 3, agent_b 4, u1 4, u2 4) + 2 batches per reader
    per_question = (3 + 4 + 4 + 4) + 4 * 2
    one = validate.plan_isolation_probes(namespaces(), tokens, "probe-user", ["q1"])
    assert len(probes) - len(one) == per_question
    assert validate.queries_for(100, fixed=30, per_query=22) == list(
        validate.PROBE_QUERIES[:4]
    )  # 30 + 88 >= 100
    assert len(validate.queries_for(1000, fixed=0, per_query=10)) == 100  # questions repeat with a suffix


def test_ready_tokens_only_skip_namespaces_without_a_token() -> None:
    tokens = validate.Tokens(None, {"probe-user": "t0", "u1": "t1"})
    probes = validate.plan_isolation_probes(namespaces(), tokens, "probe-user", ["q"])
    readers = {p.description.split(":")[0].split(" reads")[0] for p in probes if p.kind == "reach"}
    assert readers == {"agent agent_a", "agent agent_b", "user u1"}  # no token for u2
    token_probes = validate.plan_token_probes(tokens, "probe-user", "a1")
    assert {p.description.split(" token")[0] for p in token_probes} >= {"forged (wrong secret)", "alg none"}
    assert not any("expired" in p.description for p in token_probes)  # meaningless without the secret
    with pytest.raises(validate.UsageError):
        validate.Tokens(None, {})


def test_a_leaky_service_fails_the_run(tmp_path: Any) -> None:
    """A service that answers every query with every file must fail isolation (the check can fail)."""
    everything = [[doc(f, owner), 0.1] for f, owner in (("a1", "agent_a"), ("b1", "agent_b"))]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "UP"})
        if request.url.path.startswith("/documents/"):
            return httpx.Response(200, json="whole file")
        return httpx.Response(200, json=everything)

    inventory = tmp_path / "inv.json"
    inventory.write_text(
        json.dumps(
            {
                "namespaces": [
                    {"id": "agent_a", "kind": "agent", "file_ids": ["a1"]},
                    {"id": "agent_b", "kind": "agent", "file_ids": ["b1"]},
                ]
            }
        )
    )
    report = tmp_path / "r.json"
    code = validate.main(
        [
            "--rag-url",
            "http://rag.test",
            "--inventory",
            str(inventory),
            "--min-probes",
            "10",
            "--json",
            str(report),
        ],
        environ={"JWT_SECRET": SECRET},
        transport=httpx.MockTransport(handler),
    )
    assert code == validate.EXIT_FAILED
    failed = {k for k, v in json.loads(report.read_text())["probes"]["by_kind"].items() if v["failed"]}
    assert {"foreign_query", "mixed_batch", "foreign_context", "bad_token", "limits", "reach"} <= failed


def test_seed_and_v2_exclude_each_other_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    """The seeded Agents' random ids cannot be in RAG_V2_NAMESPACE_IDS: refused before any request."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be sent: {request.url}")

    code = validate.main(
        ["--rag-url", "http://rag.invalid", "--seed", "--v2"],
        environ={"JWT_SECRET": "s" * 32},
        transport=httpx.MockTransport(refuse),
    )
    assert code == validate.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--seed and --v2 exclude each other" in err and "RAG_V2_NAMESPACE_IDS" in err
