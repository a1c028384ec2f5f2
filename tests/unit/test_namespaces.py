"""Namespace indexes, without a database: which to build and drop, and when the planner walks one."""

from __future__ import annotations

import uuid

import numpy as np

from app.config_sections import SearchSettings
from app.search.namespaces import NamespaceWalk, plan_namespace_indexes, usable_walks
from app.search.planner import (
    CatalogueStats,
    NamespaceChoice,
    SearchKnowledge,
    plan_vector_search,
    walk_beats_memory,
)
from app.store.namespace_index import (
    NamespaceSize,
    collection_prefix,
    namespace_index_name,
    namespace_walk_name,
)

C = uuid.UUID("00000000-0000-0000-0000-0000000000c1")
OTHER = uuid.UUID("00000000-0000-0000-0000-0000000000c2")


def name(owner: str, dims: int = 384) -> str:
    return namespace_index_name(C, owner, dims)


def plan(sizes: list[NamespaceSize], existing: list[str] = (), **kw: int) -> object:  # type: ignore[assignment]
    opts = {"min_rows": 1000, "max_indexes": 3, "max_dims": 4000, **kw}
    return plan_namespace_indexes(C, sizes, existing, **opts)


def test_names_are_per_collection_owner_and_dimension_and_safe_identifiers() -> None:
    names = {
        namespace_index_name(C, "a", 384),
        namespace_index_name(C, "a", 1536),
        namespace_index_name(C, "b", 384),
        namespace_index_name(OTHER, "a", 384),
        namespace_index_name(C, "a'; DROP TABLE x; --", 384),
    }
    assert len(names) == 5
    for n in names:
        assert len(n) <= 63 and n.replace("_", "").isalnum() and n.isascii()
    assert name("a").startswith(collection_prefix(C)) and not name("a").startswith(collection_prefix(OTHER))
    assert namespace_walk_name(384) == "ragoverlay_vec_ns_walk_384"


def test_builds_the_largest_namespaces_first_up_to_the_limit() -> None:
    sizes = [
        NamespaceSize(o, 384, r) for o, r in [("s", 999), ("a", 5000), ("b", 1000), ("c", 3000), ("d", 2000)]
    ]
    p = plan(sizes)
    assert [s.owner for s in p.build] == ["a", "c", "d"]  # at most 3; 999 rows is below the line
    assert p.drop == () and p.keep == ()


def test_keeps_an_index_down_to_half_the_threshold_and_drops_below() -> None:
    sizes = [NamespaceSize("a", 384, 600), NamespaceSize("b", 384, 499), NamespaceSize("c", 384, 600)]
    p = plan(sizes, [name("a"), name("b")])
    assert [s.owner for s in p.keep] == ["a"]
    assert p.drop == (name("b"),)
    assert p.build == ()  # 600 rows without an index: not enough to build one


def test_drops_indexes_of_vanished_namespaces_and_everything_when_turned_off() -> None:
    gone = name("gone")
    assert plan([NamespaceSize("a", 384, 5000)], [name("a"), gone]).drop == (gone,)
    off = plan([NamespaceSize("a", 384, 5000)], [name("a")], max_indexes=0)
    assert off.drop == (name("a"),) and off.build == () and off.keep == ()


def test_unindexable_dimensions_and_unowned_rows_get_none() -> None:
    p = plan([NamespaceSize("a", 8000, 9000), NamespaceSize("", 384, 9000)])
    assert p.build == ()


def test_usable_walks_are_the_valid_ones() -> None:
    sizes = [NamespaceSize("a", 384, 5000), NamespaceSize("b", 1536, 4000)]
    walks = usable_walks(C, sizes, [name("a")])
    assert walks == {("a", 384): NamespaceWalk("ragoverlay_vec_ns_walk_384", 5000)}


# the planner: a 1,000-file knowledge base of 50 rows per file in namespace "agent", plus one file
# of the caller's own
FILES = [f"f{i}" for i in range(1000)]
STATS = CatalogueStats(
    files=1001,
    chunks=50_020,
    uniform_dims=384,
    file_chunks={**{f: {"agent": 50} for f in FILES}, "mine": {"user": 20}},
    table_rows=1_000_000,
)
WALKS = {("agent", 384): NamespaceWalk("ragoverlay_vec_ns_walk_384", 50_000)}
SETTINGS = SearchSettings(exact_max_rows=4000, memory_max_rows=0)


def decide(files: list[str], owners: tuple[str, ...], **kw: object):  # type: ignore[no-untyped-def]
    knowledge = SearchKnowledge(
        STATS, use_copy=True, walks={384: "ragoverlay_vec_walk_384"}, namespaces=WALKS
    )
    settings = kw.pop("settings", SETTINGS)
    return plan_vector_search(
        dims=384,
        k=10,
        file_ids=files,
        owners=owners,
        uploader=None,
        knowledge=knowledge,
        settings=settings,  # type: ignore[arg-type]
    )


def test_a_whole_knowledge_base_walks_its_namespace_index() -> None:
    d = decide([*FILES, "mine"], ("agent", "user"))
    assert d.path == "index" and d.namespace == "agent" and d.walk == "ragoverlay_vec_ns_walk_384"
    assert d.call(np.zeros(384)).args["p_namespace"] == "agent"


def test_no_namespace_walk_when_it_does_not_pay_or_cannot_cover_the_scope() -> None:
    # a tenth of a large namespace: the walk would meet ten rows per visible one
    assert decide(FILES[:100], ("agent",)).namespace is None
    # the caller sees more outside the namespace than an exact scan may take beside the walk
    big_own = SearchSettings(exact_max_rows=10, memory_max_rows=0)
    assert decide([*FILES, "mine"], ("agent", "user"), settings=big_own).namespace is None
    # another namespace's caller, or legacy unowned rows that no namespace holds
    assert decide(FILES, ("someone",)).namespace is None
    legacy = SearchSettings(exact_max_rows=4000, memory_max_rows=0, legacy_unowned=True)
    assert decide(FILES, ("agent",), settings=legacy).namespace is None


def test_the_memory_scan_comes_first_unless_a_namespace_walk_is_clearly_cheaper() -> None:
    memory = SearchSettings(exact_max_rows=4000, memory_max_rows=100_000)
    # a fifth of the namespace: the walk would meet five rows per visible one; exact in memory
    d = decide(FILES[:200], ("agent",), settings=memory)
    assert d.in_memory and d.namespace is None
    # the whole 50,000-row namespace: streaming 50,000 rows costs more than walking its own graph,
    # and the walk is what the database does anyway when memory cannot answer
    d = decide(FILES, ("agent",), settings=memory)
    assert not d.in_memory and d.namespace == "agent"
    # a smaller whole namespace (a KB of 10,000 rows, its own index at a lower threshold): memory
    small = {("agent", 384): NamespaceWalk("ragoverlay_vec_ns_walk_384", 10_000)}
    knowledge = SearchKnowledge(STATS, use_copy=True, namespaces=small)
    d = plan_vector_search(
        dims=384,
        k=10,
        file_ids=FILES[:200],
        owners=("agent",),
        uploader=None,
        knowledge=knowledge,
        settings=memory,
    )
    assert d.in_memory and d.namespace is None


def test_walk_against_memory_costs() -> None:
    whole = NamespaceChoice("a", "w", 27_426, 27_426)
    assert not walk_beats_memory(1000, 27_426, whole)  # the 1M corpus's 1,000-file KB: a tie, exact
    assert walk_beats_memory(1000, 100_000, NamespaceChoice("a", "w", 100_000, 100_000))
    assert not walk_beats_memory(1000, 5_478, NamespaceChoice("a", "w", 5_478, 5_478))  # at 200k
    assert not walk_beats_memory(1000, 30_822, NamespaceChoice("a", "w", 30_822, 152_959))  # a fifth
