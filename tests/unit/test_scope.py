"""The caller's scope as a value (pure): what the API layer hands down to every read and delete."""

from __future__ import annotations

import re
import uuid

import pytest

from app.store.scope import SCOPE_PARAMS, SCOPE_SQL, Scope, ScopeError

COLLECTION = uuid.uuid4()


def test_of_deduplicates_and_keeps_order() -> None:
    s = Scope.of(COLLECTION, ["me", "agent_x", "me"], file_ids=["b", "a", "b"])
    assert s.owners == ("me", "agent_x") and s.file_ids == ("b", "a")
    assert Scope.of(COLLECTION, ["me"]).file_ids is None  # every file: listings only
    assert Scope.of(COLLECTION, ["me"], file_ids=[]).file_ids == ()  # no file, never "every file"


def test_the_uploader_is_one_of_the_owners() -> None:
    s = Scope.of(COLLECTION, ["agent_x"], uploader="me")
    assert s.owners == ("agent_x", "me") and s.uploader == "me"
    assert Scope.of(COLLECTION, ["me"], uploader="").uploader is None


def test_a_scope_needs_an_owner_and_reads_refuse_any_owner() -> None:
    with pytest.raises(ScopeError):
        Scope.of(COLLECTION, [])
    anyone = Scope.of(COLLECTION, [], file_ids=["a"], any_owner=True)
    with pytest.raises(ScopeError):
        anyone.for_reading()
    s = Scope.of(COLLECTION, ["me"], uploader="me", file_ids=["a"], legacy_unowned=True)
    assert s.for_reading() is s
    narrowed = s.with_files(["c", "c"])
    assert (narrowed.file_ids, narrowed.owners, narrowed.uploader, narrowed.legacy_unowned) == (
        ("c",),
        ("me",),
        "me",
        True,
    )


def test_sql_args_follow_the_constructor_call() -> None:
    s = Scope.of(COLLECTION, ["me"], uploader="me", file_ids=["a"], legacy_unowned=True)
    args = s.sql_args()
    assert len(args) == SCOPE_PARAMS
    positions = {name: int(n) for name, n in re.findall(r"(p_\w+) => \$(\d+)", SCOPE_SQL)}
    assert positions == {
        "p_collection": 1,
        "p_owners": 2,
        "p_files": 3,
        "p_uploader": 4,
        "p_legacy_unowned": 5,
        "p_any_owner": 6,
    }
    assert args == (COLLECTION, ["me"], ["a"], "me", True, False)
    assert Scope.of(COLLECTION, ["me"]).sql_args()[2] is None
