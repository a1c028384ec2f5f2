"""LibreChat's file access rule and the catalogue audit, as pure functions (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bson import ObjectId

from app.access.librechat_rule import (
    is_ephemeral_agent_id,
    permission_bits,
    searchable_file_ids,
    user_principals,
)
from app.catalogue.audit import audit_catalogue
from app.catalogue.documents import EDIT, VIEW, Principal, attached_file_ids, file_search_ids

AUTHOR, ALICE, BOB = ObjectId(), ObjectId(), ObjectId()
GROUP = ObjectId()
AGENT_DB_ID = ObjectId()
AGENT = {
    "_id": AGENT_DB_ID,
    "id": "agent_kb",
    "author": AUTHOR,
    "tool_resources": {
        "file_search": {"file_ids": ["kb1", "kb2", "orphan"]},
        "execute_code": {"file_ids": ["code1"]},
    },
}
FILES = [
    {"file_id": "kb1", "user": AUTHOR, "embedded": True},
    {"file_id": "kb2", "user": AUTHOR, "embedded": True},
    {"file_id": "orphan", "embedded": True},  # attached, but no owner recorded
    {"file_id": "code1", "user": AUTHOR},
    {"file_id": "alice1", "user": ALICE},
    {"file_id": "bob1", "user": BOB},
]
NOW = datetime(2026, 7, 1, tzinfo=UTC)


def allowed(
    user: ObjectId,
    requested: list[str],
    *,
    entries=(),
    groups=(),
    role=None,
    agent=AGENT,
    agent_id="agent_kb",
) -> set[str]:
    principals = user_principals(str(user), role=role, groups=groups)
    return set(
        searchable_file_ids(
            user_id=str(user),
            requested=requested,
            files=FILES,
            agent_id=agent_id,
            agent=agent,
            acl_entries=entries,
            principals=principals,
            now=NOW,
        )
    )


def acl(kind: str, principal, bits: int = VIEW, **extra) -> dict:
    entry = {
        "principalType": kind,
        "resourceType": "agent",
        "resourceId": AGENT_DB_ID,
        "permBits": bits,
        **extra,
    }
    if principal is not None:
        entry["principalId"] = principal
    return entry


def test_owner_always_allowed_even_without_agent_access() -> None:
    assert allowed(ALICE, ["alice1", "kb1"]) == {"alice1"}


def test_author_gets_attached_files_with_an_owner_only() -> None:
    # kb1, kb2, code1 are attached and owned; `orphan` has no owner; bob1 is not attached
    assert allowed(AUTHOR, ["kb1", "kb2", "code1", "orphan", "bob1"]) == {"kb1", "kb2", "code1"}


def test_view_through_each_principal_kind() -> None:
    wanted = ["kb1", "orphan", "bob1"]
    expected = {"kb1", "orphan"}  # attached files, any owner; never a file not attached
    assert allowed(ALICE, wanted, entries=[acl("user", ALICE)]) == expected
    assert allowed(ALICE, wanted, entries=[acl("role", "USER")], role="USER") == expected
    group = {"_id": GROUP, "memberIds": [str(ALICE)]}
    assert allowed(ALICE, wanted, entries=[acl("group", GROUP)], groups=[group]) == expected
    assert allowed(ALICE, wanted, entries=[acl("public", None)]) == expected


def test_no_view_bit_or_wrong_principal_denies() -> None:
    assert allowed(ALICE, ["kb1"], entries=[acl("user", BOB)]) == set()
    assert allowed(ALICE, ["kb1"], entries=[acl("role", "ADMIN")], role="USER") == set()
    assert allowed(ALICE, ["kb1"], entries=[acl("user", ALICE, bits=EDIT)]) == set()
    not_member = {"_id": GROUP, "memberIds": [str(BOB)]}
    assert allowed(ALICE, ["kb1"], entries=[acl("group", GROUP)], groups=[not_member]) == set()
    other_agent = acl("user", ALICE) | {"resourceId": ObjectId()}
    assert allowed(ALICE, ["kb1"], entries=[other_agent]) == set()


def test_expired_entry_denies() -> None:
    past = (NOW - timedelta(days=1)).replace(tzinfo=None)  # pymongo hands back naive UTC
    future = NOW + timedelta(days=1)
    assert allowed(ALICE, ["kb1"], entries=[acl("user", ALICE, expiredAt=past)]) == set()
    assert allowed(ALICE, ["kb1"], entries=[acl("user", ALICE, expiredAt=future)]) == {"kb1"}


def test_unknown_agent_and_unknown_files_deny() -> None:
    assert allowed(ALICE, ["kb1", "alice1"], agent=None, agent_id="agent_gone") == {"alice1"}
    assert allowed(AUTHOR, ["not-in-catalogue"]) == set()


def test_ephemeral_agent_is_not_checked() -> None:
    assert is_ephemeral_agent_id("ephemeral") and not is_ephemeral_agent_id("agent_x")
    assert allowed(ALICE, ["kb1", "bob1", "nope"], agent=None, agent_id="ephemeral") == {"kb1", "bob1"}


def test_no_agent_means_own_files_only() -> None:
    assert allowed(ALICE, ["alice1", "bob1"], agent=None, agent_id=None) == {"alice1"}


def test_entra_member_by_id_on_the_source() -> None:
    group = {"_id": GROUP, "memberIds": ["entra-object-id"]}
    principals = user_principals(str(ALICE), groups=[group], id_on_the_source="entra-object-id")
    assert Principal("group", str(GROUP)) in principals
    assert permission_bits([acl("group", GROUP)], principals, resource_id=AGENT_DB_ID, now=NOW) == VIEW


def test_attached_and_file_search_ids() -> None:
    assert attached_file_ids(AGENT) == {"kb1", "kb2", "orphan", "code1"}
    assert file_search_ids(AGENT) == ["kb1", "kb2", "orphan"]
    assert file_search_ids({"tool_resources": None}) == []


def _agent(agent_id: str, ids: list[str], **resources) -> dict:
    return {
        "_id": ObjectId(),
        "id": agent_id,
        "author": AUTHOR,
        "tool_resources": {"file_search": {"file_ids": ids}, **resources},
    }


def test_audit_clean_catalogue() -> None:
    a, b = _agent("agent_a", ["a1", "a2"]), _agent("agent_b", ["b1"])
    files = [{"file_id": f, "user": AUTHOR, "embedded": True} for f in ("a1", "a2", "b1")]
    entries = [
        {
            "principalType": "group",
            "principalId": GROUP,
            "resourceType": "agent",
            "resourceId": a["_id"],
            "permBits": VIEW,
        }
    ]
    result = audit_catalogue(agents=[a, b], files=files, acl_entries=entries)
    assert result.ok and result.knowledge_bases == 2 and result.files_checked == 3


def test_audit_finds_each_problem() -> None:
    a = _agent("agent_a", ["a1", "shared"])
    b = _agent("agent_b", ["shared", "b1"], execute_code={"file_ids": ["a1"]})
    c = _agent("agent_c", ["c1"])
    files = [
        {"file_id": "a1", "embedded": True},
        {"file_id": "shared", "embedded": True},
        {"file_id": "b1", "embedded": False},  # c1 has no record at all
    ]
    public = {"principalType": "public", "resourceType": "agent", "resourceId": c["_id"], "permBits": VIEW}
    result = audit_catalogue(agents=[a, b, c], files=files, acl_entries=[public])
    checks = sorted(f.check for f in result.findings)
    assert checks == [
        "file_attached_twice",
        "file_attached_twice",
        "file_missing",
        "kb_disjoint",
        "not_embedded",
        "public_agent",
    ]
    allowed_public = audit_catalogue(
        agents=[c],
        files=[{"file_id": "c1", "embedded": True}],
        acl_entries=[public],
        public_allowed={"agent_c"},
    )
    assert allowed_public.ok


def test_audit_limited_to_plan_agents_reports_missing() -> None:
    a = _agent("agent_a", ["a1"])
    result = audit_catalogue(
        agents=[a],
        files=[{"file_id": "a1", "embedded": True}],
        acl_entries=[],
        only_agents={"agent_a", "agent_gone"},
    )
    assert [f.check for f in result.findings] == ["agent_missing"]
