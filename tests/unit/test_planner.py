"""The search planner: visible-row estimate, cost rule, path and candidates (pure, no database), for V1
and for V2's vector channel."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from app.config_sections import SearchSettings
from app.evidence.query.vectors import PlannedVectors, plan_vectors, run_knowledge
from app.evidence.settings import V2Settings
from app.evidence.store.channels import VectorPlan
from app.evidence.store.vectors import RunVectors
from app.search.planner import (
    MAX_EF_SEARCH,
    VECTOR_SEARCH_FUNCTION,
    CatalogueStats,
    SearchKnowledge,
    VectorSearchDecision,
    candidate_count,
    index_pays_off,
    memory_pays_off,
    plan_vector_search,
)
from app.store.catalogue import CatalogueFile, CatalogueSnapshot
from app.store.chunks import FileRecord
from app.store.scope import Scope

WALK = "ragoverlay_vec_walk_384"


def stats() -> CatalogueStats:
    # two of my files, one Agent file, one file both of us hold under the same id, and an Agent
    # file I uploaded
    rows = [
        CatalogueFile("a", "me", "me", 10),
        CatalogueFile("b", "me", "me", 30),
        CatalogueFile("kb", "agent", "colleague", 50),
        CatalogueFile("shared", "me", "me", 4),
        CatalogueFile("shared", "agent", "colleague", 6),
        CatalogueFile("mine-in-kb", "agent", "me", 8),
    ]
    return CatalogueStats.from_snapshot(CatalogueSnapshot(6, 108, 384, rows, 1000.0))


def record(file_id: str, owner: str, chunks: int, dims: int | None = 384, uploader: str = "") -> FileRecord:
    return FileRecord(file_id, owner, uploader or owner, "f", None, None, None, None, chunks, "m", dims)


def test_estimate_counts_only_what_the_caller_can_see() -> None:
    s = stats()
    assert s.estimate(["a", "b"], ["me"]) == 40
    # a knowledge base listed without its entity_id: nothing of it is visible
    assert s.estimate(["kb"], ["me"]) == 0
    assert s.estimate(["kb", "shared"], ["me", "agent"]) == 60
    assert s.estimate(["shared"], ["agent"]) == 6


def test_estimate_counts_the_files_the_caller_uploaded_into_other_namespaces() -> None:
    s = stats()
    assert s.estimate(["mine-in-kb"], ["me"]) == 0  # no uploader given: the owner rule alone
    assert s.estimate(["mine-in-kb"], ["me"], "me") == 8
    assert s.estimate(["kb", "mine-in-kb"], ["me"], "me") == 8  # not what a colleague uploaded
    assert s.estimate(["mine-in-kb"], ["me", "agent"], "me") == 8  # counted once


def test_one_pass_gives_the_scope_and_each_owners_part() -> None:
    s = stats()
    both = s.estimates(["a", "kb", "shared", "mine-in-kb", "not-catalogued-yet"], ["me", "agent", "me"], "me")
    # each owner's part holds the uncatalogued file's average too; the total counts it once
    assert both.by_owner == {"me": 14 + 18, "agent": 64 + 18}
    assert both.total == 14 + 64 + 18
    for owner in ("me", "agent"):
        assert both.by_owner[owner] == s.estimate(
            ["a", "kb", "shared", "mine-in-kb", "not-catalogued-yet"], [owner]
        )


def test_the_callers_uploads_follow_a_reupload_by_someone_else() -> None:
    s = stats()
    assert s.granted("me", ["mine-in-kb", "kb", "a"], ["me"]) == [("agent", "mine-in-kb")]
    assert s.granted("me", ["mine-in-kb"], ["me", "agent"]) == []  # its namespace is named
    assert s.granted("colleague", ["mine-in-kb", "kb"], ["colleague"]) == [("agent", "kb")]
    s = s.with_file(record("mine-in-kb", "agent", 9, uploader="colleague"))
    assert s.granted("me", ["mine-in-kb"], ["me"]) == []
    assert sorted(s.granted("colleague", ["mine-in-kb", "kb"], ["colleague"])) == [
        ("agent", "kb"),
        ("agent", "mine-in-kb"),
    ]
    assert s.estimate(["mine-in-kb"], ["me"], "me") == 0
    assert s.estimate(["mine-in-kb"], ["colleague"], "colleague") == 9
    # statistics built from `delegated` alone know the uploads too
    assert CatalogueStats(delegated={"f": {"agent": "me"}}).granted("me", ["f"], ["me"]) == [("agent", "f")]


def test_unknown_files_count_the_average() -> None:
    s = stats()
    assert s.chunks_per_file == 18
    assert s.estimate(["a", "not-catalogued-yet"], ["me"]) == 28


def test_without_a_file_map_files_times_average() -> None:
    s = CatalogueStats.from_snapshot(CatalogueSnapshot(4, 100, None, None, 100.0))
    assert s.file_chunks is None
    assert s.estimate(["a", "kb", "x"], ["me"]) == 75
    assert CatalogueStats().chunks_per_file == 20  # nothing known yet: rag_api's typical file


def test_with_file_adds_and_replaces() -> None:
    s = stats().with_file(record("c", "me", 7))
    assert (s.files, s.chunks, s.uniform_dims, s.table_rows) == (7, 115, 384, 1007)
    assert s.estimate(["c"], ["me"]) == 7
    # a new version of the same file replaces its count, it is not a new file
    s = s.with_file(record("c", "me", 12))
    assert (s.files, s.chunks) == (7, 120)
    assert s.estimate(["c"], ["me"]) == 12
    # another dimension: no longer uniform
    assert s.with_file(record("d", "me", 1, dims=768)).uniform_dims is None
    # an upload into an Agent's namespace is visible to its uploader at once
    s = s.with_file(record("e", "agent", 5, uploader="me"))
    assert s.estimate(["e"], ["me"], "me") == 5 and s.estimate(["e"], ["me"], "colleague") == 0


def test_first_file_sets_the_dimension() -> None:
    s = CatalogueStats().with_file(record("a", "me", 3, dims=1536))
    assert (s.files, s.chunks, s.uniform_dims) == (1, 3, 1536)
    assert s.file_chunks is None  # no map before the first refresh: averages until then


def test_candidates_and_cost_rule() -> None:
    assert candidate_count(10) == 30
    assert candidate_count(1) == 12
    # visible^2 >= factor x table x candidates
    assert index_pays_off(1600, 2000, 30, 1.0)
    assert not index_pays_off(20, 2000, 30, 1.0)
    assert index_pays_off(20_373, 200_000, 30, 20.0)  # 1,000 files of the benchmark: the index
    assert not index_pays_off(7_818, 200_000, 30, 20.0)  # 373 files: exact
    assert index_pays_off(1, 10**9, 30, 0.0)  # factor 0: always
    assert not index_pays_off(0, 0, 30, 1.0)  # an empty table counts as one row, never zero


def big(files: int, per_file: int, table_rows: float) -> CatalogueStats:
    rows = [CatalogueFile(f"f{i}", "me", "me", per_file) for i in range(files)]
    return CatalogueStats.from_snapshot(CatalogueSnapshot(files, files * per_file, 384, rows, table_rows))


def plan(
    knowledge: SearchKnowledge, files: int, *, k: int = 10, dims: int = 384, **settings: object
) -> VectorSearchDecision:
    return plan_vector_search(
        dims=dims,
        k=k,
        file_ids=[f"f{i}" for i in range(files)],
        owners=["me"],
        uploader="me",
        knowledge=knowledge,
        settings=SearchSettings(**settings),  # type: ignore[arg-type]
    )


def test_path_choice() -> None:
    stats_ = big(10_000, 20, 200_000)
    ready = SearchKnowledge(stats_, use_copy=True, walks={384: WALK})
    # small allow-lists: exact on the copy, 2k + 10 candidates for the re-rank
    d = plan(ready, 100)
    assert (d.path, d.use_copy, d.candidates, d.visible_estimate, d.walk) == ("exact", True, 30, 2000, None)
    # large: the index, ef_search at least the candidates, the walk of the query's dimension
    d = plan(ready, 1000)
    assert (d.path, d.walk, d.candidates, d.ef_search, d.max_scan_tuples) == ("index", WALK, 30, 100, 50_000)
    assert plan(ready, 1000, k=60, cost_factor=1.0).ef_search == 130
    # above EXACT_SCAN_MAX_ROWS but too small a share of the table: exact (the cost rule)
    assert plan(ready, 300).path == "exact"
    assert plan(ready, 300, cost_factor=0.0).path == "index"
    # EXACT_SCAN_MAX_ROWS above the estimate: exact, whatever the cost rule says
    assert plan(ready, 1000, exact_max_rows=1_000_000).path == "exact"


@pytest.mark.parametrize(
    "knowledge",
    [
        SearchKnowledge(big(10_000, 20, 200_000), use_copy=False, walks={384: WALK}),  # copy not ready
        SearchKnowledge(big(10_000, 20, 200_000), use_copy=True, walks={}),  # no valid index
        SearchKnowledge(big(10_000, 20, 200_000), use_copy=True, walks={768: "w"}),  # other dimension
    ],
)
def test_no_index_path_without_copy_and_walk(knowledge: SearchKnowledge) -> None:
    d = plan(knowledge, 1000)
    assert d.path == "exact" and d.walk is None
    assert d.candidates == (30 if knowledge.use_copy else 10)  # on rag_api's rows: no re-rank


def test_dimension_check() -> None:
    ready = SearchKnowledge(big(10, 20, 200), use_copy=True)
    assert plan(ready, 5).check_dims is False  # every catalogued row has the query's dimension
    assert plan(ready, 5, dims=768).check_dims is True
    assert plan(ready, 5, legacy_unowned=True).check_dims is True  # unowned rows are not catalogued
    mixed = SearchKnowledge(CatalogueStats(files=2, chunks=4, uniform_dims=None))
    assert plan(mixed, 2).check_dims is True


def test_the_decision_is_a_call_with_named_arguments() -> None:
    d = plan(SearchKnowledge(big(10_000, 20, 200_000), use_copy=True, walks={384: WALK}), 1000)
    query = np.ones(384, dtype=np.float32)
    call = d.call(query)
    assert call.function == VECTOR_SEARCH_FUNCTION
    assert call.args["p_query"] is query
    assert {k: v for k, v in call.args.items() if k != "p_query"} == {
        "p_k": 10,
        "p_path": "index",
        "p_use_copy": True,
        "p_candidates": 30,
        "p_check_dims": False,
        "p_walk": WALK,
        "p_ef_search": 100,
        "p_max_scan_tuples": 50_000,
        "p_namespace": None,
    }


# --- V2's vector channel: the same planner, fed with an index run ------------------------------

V2_WALK = "ragoverlay_v2_vec_walk_384"


def v2_run(files: int, per_file: int, table_rows: float, *, walk: str | None = V2_WALK) -> SearchKnowledge:
    """A run of `files` staged files of the Agent, `per_file` vectors each, and one of a colleague."""
    by_file = {f"f{i}": {"agent": per_file} for i in range(files)} | {"theirs": {"colleague": 500}}
    return run_knowledge(RunVectors(by_file, table_rows, walk), 384)


def v2_plan(
    knowledge: SearchKnowledge, files: int | None, *, limit: int = 50, **settings: object
) -> PlannedVectors:
    scope = Scope.of(
        uuid.uuid4(), ["agent", "user-1"], file_ids=None if files is None else [f"f{i}" for i in range(files)]
    )
    shipped = {"exact_max_rows": V2Settings().channels.exact_scan_max_chunks, **settings}
    return plan_vectors(knowledge, dims=384, limit=limit, scope=scope, settings=SearchSettings(**shipped))  # type: ignore[arg-type]


def test_v2_runs_plan_like_v1() -> None:
    # the benchmark's shape: 1,000 files of 10 vectors, 12,000 rows in the chunk table
    run = v2_run(1000, 10, 12_000)
    # 100 files = 1,000 vectors, under the exact limit (4,000): exact
    small = v2_plan(run, 100)
    assert (small.plan.path, small.plan.walk, small.visible_estimate) == ("exact", None, 1000)
    # 1,000 files = 10,000 vectors: 10,000^2 >= 20 x 12,000 x 110, so the walk for 2 x 50 + 10
    large = v2_plan(run, 1000)
    assert large.plan == VectorPlan("index", V2_WALK, 110, 110, 50_000)
    assert large.visible_estimate == 10_000
    # the same 10,000 vectors in a table of 10 million rows (other Agents): the walk would meet ~1,000
    # rows per visible one, the exact scan wins
    assert v2_plan(v2_run(1000, 10, 10_000_000), 1000).plan.path == "exact"
    # no valid index of the dimension: exact, whatever the size
    assert v2_plan(v2_run(1000, 10, 12_000, walk=None), 1000).plan.path == "exact"
    # RAG_V2__CHANNELS__EXACT_SCAN_MAX_CHUNKS above the estimate: exact
    assert v2_plan(run, 1000, exact_max_rows=20_000).plan.path == "exact"


def test_v2_estimates_count_the_callers_files_and_unknown_ones_the_average() -> None:
    run = v2_run(1000, 10, 12_000)
    # the colleague's file is another owner's: it counts nothing for the Agent's caller
    scope = Scope.of(uuid.uuid4(), ["agent"], file_ids=["f1", "theirs", "staged-since"])
    planned = plan_vectors(run, dims=384, limit=50, scope=scope, settings=SearchSettings())
    # f1: 10; theirs: 0; a file staged after the last read: the average (10,500 / 1,001 files)
    assert planned.visible_estimate == 10 + 0 + round(10_500 / 1001)
    # no allow-list: every file of the run, under the caller's owners
    assert v2_plan(run, None).visible_estimate == 10_000


def test_v2_ef_search_stays_within_pgvector_limit() -> None:
    # the largest channel limit (500) asks for 1,010 candidates; pgvector takes ef_search <= 1,000
    decision = v2_plan(v2_run(10_000, 100, 1_000_000), 10_000, limit=500)
    assert decision.plan.candidates == 1010 and decision.plan.ef_search == MAX_EF_SEARCH == 1000


def test_the_exact_scan_runs_in_memory_up_to_its_limit_on_the_copy_only() -> None:
    rows = [
        CatalogueFile("kb", "agent", "colleague", 3000),
        CatalogueFile("mine", "me", "me", 40),
        *(CatalogueFile(f"kb-{i}", "agent", "colleague", 2) for i in range(600)),
    ]
    big = CatalogueStats.from_snapshot(CatalogueSnapshot(602, 4240, 384, rows, 50_000.0))
    knowledge = SearchKnowledge(big, use_copy=True, walks={384: WALK})
    memory = SearchSettings(exact_max_rows=4, memory_max_rows=4000, cost_factor=0.0)

    def plan(
        files: list[str],
        owners: list[str],
        settings: SearchSettings = memory,
        on: SearchKnowledge = knowledge,
    ) -> VectorSearchDecision:
        return plan_vector_search(
            dims=384, k=5, file_ids=files, owners=owners, uploader="me", knowledge=on, settings=settings
        )

    # within the limit: exact, in memory, even where the index would be taken without it
    d = plan(["kb", "mine"], ["me", "agent"])
    assert (d.path, d.in_memory, d.candidates, d.visible_estimate) == (
        "exact",
        True,
        candidate_count(5),
        3040,
    )
    # 600 files listed, nothing visible by the catalogue (no entity_id): one range read in memory
    # instead of 600 index searches
    kb = [f"kb-{i}" for i in range(600)]
    assert plan(kb, ["me"]).in_memory
    # a few rows of a few files: one statement in the database is cheaper than three
    d = plan(["mine"], ["me"], SearchSettings(memory_max_rows=4000))
    assert (d.path, d.in_memory) == ("exact", False)
    # above the limit: the rules without memory (cost factor 0: the index)
    d = plan(
        ["kb", "mine"],
        ["me", "agent"],
        SearchSettings(exact_max_rows=4, memory_max_rows=3000, cost_factor=0.0),
    )
    assert (d.path, d.in_memory) == ("index", False)
    # off, without the copy, or where unowned legacy rows may be visible (not tracked)
    assert not plan(["kb"], ["agent"], SearchSettings(memory_max_rows=0)).in_memory
    assert not plan(kb, ["me"], SearchSettings(memory_max_rows=0)).in_memory
    assert not plan(["kb"], ["agent"], on=SearchKnowledge(big, use_copy=False)).in_memory
    assert not plan(["kb"], ["agent"], SearchSettings(memory_max_rows=4000, legacy_unowned=True)).in_memory
    # the fallback call is the database's exact scan of the copy
    call = plan(["kb"], ["agent"]).call(np.zeros(384, dtype=np.float32))
    assert call.args["p_path"] == "exact" and call.args["p_use_copy"] is True
    # ... also where the walk would be taken without memory (cost factor 0): exactness promised
    d = plan(["kb", "mine"], ["me", "agent"])
    assert d.in_memory and d.call(np.zeros(384, dtype=np.float32)).args["p_path"] == "exact"
    # a scope the cache's budget cannot hold (3,040 rows of 1,536 dims in 16 MB): never in memory
    tight = SearchSettings(exact_max_rows=4, memory_max_rows=4000, memory_max_bytes=16 * 2**20)
    wide = plan_vector_search(
        dims=1536,
        k=5,
        file_ids=["kb", "mine"],
        owners=["me", "agent"],
        uploader="me",
        knowledge=SearchKnowledge(big, use_copy=True, walks={1536: WALK}),
        settings=tight,
    )
    assert not wide.in_memory and wide.path == "exact"  # in the database
    assert plan(["kb", "mine"], ["me", "agent"], tight).in_memory  # 384 dims fit


def test_memory_pays_off_by_the_measured_costs() -> None:
    assert not memory_pays_off(1, 4)  # an attachment
    assert not memory_pays_off(20, 120)  # a small knowledge base
    assert memory_pays_off(1, 2000)  # one long file
    assert memory_pays_off(373, 2322)  # a 373-file knowledge base
    assert memory_pays_off(1000, 0)  # a knowledge base listed without its entity_id


def test_memory_limit_comes_from_the_settings_and_is_off_with_no_cache_bytes() -> None:
    from app.config import Settings

    on = SearchSettings.from_settings(
        Settings(_env_file=None, vector_cache_mb=64, vector_cache_max_rows=1234)
    )  # type: ignore[call-arg]
    off = SearchSettings.from_settings(
        Settings(_env_file=None, vector_cache_mb=0, vector_cache_max_rows=1234)
    )  # type: ignore[call-arg]
    assert (on.memory_max_rows, off.memory_max_rows) == (1234, 0)
