"""The quality benchmark's /query_v2 side, without a service: the debug reader, the six stage views,
the timed pass, the wait for the V2 index (httpx.MockTransport), the offline grids, the targets
and the report. Every answer here is written by hand in the shape of CONTRACT.md section 6."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import httpx
import pytest

from benchmarks.http import Response
from benchmarks.progress import Progress
from benchmarks.quality import tuning
from benchmarks.quality.dataset import Query
from benchmarks.quality.report import markdown
from benchmarks.quality.run import measure, summaries, v2_health, v2_tuning
from benchmarks.quality.systems import SystemUnavailable
from benchmarks.quality.targets import best_channel, evaluate
from benchmarks.quality.v2 import (
    FINAL,
    STAGE_SYSTEMS,
    MalformedReply,
    RefusalRecord,
    StageItem,
    V2Client,
    V2Debugged,
    agreement,
    parse_reply,
    timed_pass,
    timed_sample,
    v2_systems,
)
from benchmarks.quality.v2index import V2IndexError, covered, wait_for_index

SAFE = "I could not find this in the documents available to you, so I cannot answer it from them."

# ---- hand-made answers -----------------------------------------------------------------------------


def items(*rows: tuple[str, str, float]) -> list[dict[str, Any]]:
    """Stage items: (chunk id, file id, score), content 'text of <chunk id>'."""
    return [
        {"chunk_id": c, "file_id": f, "page": 1, "score": s, "content": f"text of {c}"} for c, f, s in rows
    ]


def refusal(
    refuse: bool = False,
    reasons: tuple[str, ...] = (),
    signals: tuple[str, ...] = (),
    best: float = 0.8,
    coverage: float = 1.0,
    dense: float | None = None,
) -> dict[str, Any]:
    extra = {} if dense is None else {"best_dense": dense}
    return {
        "refuse": refuse,
        "reasons": [{"code": c, "value": "x"} for c in reasons],
        "signals": [{"code": c, "value": None} for c in signals],
        "checked": {
            "best_score": best,
            "candidates": 3,
            "coverage": coverage,
            "signal_weight": 0.0,
            "rare_terms": ["frob"],
            **extra,
        },
    }


def answer(
    stages: dict[str, list[dict[str, Any]]],
    decision: dict[str, Any] | None = None,
    *,
    degraded: bool = False,
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A debug answer whose results are the reranked stage, unless the decision refuses."""
    decision = decision or refusal()
    results = [
        {
            "citation_id": f"V2-{i}",
            "file_id": it["file_id"],
            "filename": f"{it['file_id']}.html",
            "content": it["content"],
            "page": it["page"],
            "score": it["score"],
            "channels": ["lexical", "vector"],
            "metadata": {"chunk_id": it["chunk_id"]},
        }
        for i, it in enumerate(stages.get("reranked", []), start=1)
    ]
    if decision["refuse"]:
        results = []
    channels = {
        name: {
            "hits": len(stages.get(name, [])),
            "ms": ms,
            "error": (errors or {}).get(name),
            "path": "exact",
        }
        for name, ms in (("exact", 1.0), ("lexical", 2.0), ("vector", 3.0))
    }
    return {
        "route": "v2",
        "index_version": "v2",
        "results": results,
        "degraded": degraded,
        "safe_refusal": None if results else SAFE,
        "debug": {
            "analysis": {"terms": ["frob"], "exact_keys": [], "phrases": [], "intents": []},
            "run": {"run_id": 4, "index_version": "v2"},
            "channels": channels,
            "stages": stages,
            "refusal": decision,
            "rerank": {"backend": "features", "fell_back": False, "error": None, "ms": 0.7},
            "timing_ms": {
                "analysis": 0.1,
                "embed": 5,
                "channels": 6,
                "fuse": 0.4,
                "rerank": 0.7,
                "total": 13,
            },
        },
    }


class FakeV2:
    """Stands in for LeanHTTP: answers `/query_v2` from a table keyed by query text."""

    def __init__(self, answers: dict[str, dict[str, Any]], default: dict[str, Any] | None = None) -> None:
        self.answers, self.default = answers, default
        self.sent: list[dict[str, Any]] = []
        self.status = 200

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        request = json.loads(body)
        self.sent.append({"path": path, "headers": dict(headers or {}), **request})
        if path != "/query_v2":
            return Response(404, {}, b'{"detail": "Not Found"}')
        if self.status != 200:
            return Response(self.status, {}, b'{"detail": "no"}')
        body_out = dict(self.answers.get(request["query"]) or self.default or {})
        if not request["debug"]:
            body_out.pop("debug", None)
        return Response(200, {}, json.dumps(body_out).encode())


STAGES_ONE = {
    "exact": items(("c9", "f9", 1.0)),
    "lexical": items(("c2", "f2", 7.5), ("c1", "f1", 6.0)),
    "vector": items(("c1", "f1", 0.8), ("c3", "f3", 0.7)),
    "fused": items(("c1", "f1", 0.9), ("c2", "f2", 0.6)),
    "reranked": items(("c1", "f1", 0.95), ("c2", "f2", 0.5)),
}


def q(qid: str, text: str, set_name: str = "man", relevant: tuple[str, ...] = ("f1",), **kw: Any) -> Query:
    return Query(qid, set_name, kw.pop("kind", "description"), text, "agent_kb", relevant, **kw)


# ---- the reader --------------------------------------------------------------------------------------


def test_parse_reply_reads_results_stages_and_the_refusal() -> None:
    reply = parse_reply(answer(STAGES_ONE, refusal(signals=("no_agreement",), best=0.31, coverage=0.25)))
    assert [p.file_id for p in reply.passages] == ["f1", "f2"] and not reply.refused
    assert reply.chunk_ids == ("c1", "c2") and reply.passages[0].key == ("f1", "c1")
    assert reply.channel_counts == {"lexical": 2, "vector": 2}
    d = reply.debug
    assert d is not None and d.missing_stages == () and d.run_id == 4
    assert [i.chunk_id for i in d.stages["lexical"]] == ["c2", "c1"]
    assert d.stages["vector"][0] == StageItem("c1", "f1", 1, 0.8, "text of c1")
    assert d.channels["vector"].ms == 3.0 and d.timing["fuse"] == 0.4
    assert d.refusal == RefusalRecord(
        refuse=False,
        reasons=(),
        signals=("no_agreement",),
        best_score=0.31,
        coverage=0.25,
        candidates=3,
        signal_weight=0.0,
        rare_terms=1,
    )


def test_parse_reply_refusal_missing_stage_and_malformed_bodies() -> None:
    refused = parse_reply(answer(STAGES_ONE, refusal(True, reasons=("missing_identifier",))))
    assert refused.refused and refused.passages == [] and refused.debug is not None
    assert refused.debug.refusal is not None and refused.debug.refusal.reasons == ("missing_identifier",)
    partial = answer({"lexical": items(("c1", "f1", 1.0))})
    partial_reply = parse_reply(partial)
    assert partial_reply.debug is not None
    assert partial_reply.debug.missing_stages == ("exact", "vector", "fused", "reranked")
    assert partial_reply.debug.stages["exact"] == []
    plain = parse_reply({"route": "v2", "results": [], "degraded": True, "safe_refusal": SAFE})
    assert plain.refused and plain.degraded and plain.debug is None
    # no chunk id in metadata: the content's md5 stands in
    no_meta = parse_reply({"results": [{"file_id": "f", "content": "abc"}], "safe_refusal": None})
    assert no_meta.chunk_ids == ("md5:900150983cd24fb0d6963f7d28e17f72",)
    with pytest.raises(MalformedReply):
        parse_reply({"results": "nope"})
    with pytest.raises(MalformedReply):
        parse_reply({"results": [{"file_id": 3}]})
    with pytest.raises(MalformedReply):
        parse_reply(answer({"fused": [{"chunk_id": "c1"}]}))  # no file_id


# ---- the stage views -----------------------------------------------------------------------------


async def test_one_debug_request_per_query_serves_six_systems() -> None:
    http = FakeV2({"frob": answer(STAGES_ONE)}, default=answer(STAGES_ONE))
    source = V2Debugged(V2Client(http, {"agent_kb": ["f1", "f2"]}, k=10, debug=True, headers={"X": "1"}))  # type: ignore[arg-type]
    systems = v2_systems(source)
    assert [s.name for s in systems] == [*STAGE_SYSTEMS.values(), FINAL]
    await systems[0].prepare()
    await systems[1].prepare()  # the probe is sent once
    assert len(http.sent) == 1 and http.sent[0]["query"] == "probe" and http.sent[0]["debug"] is True
    query = q("q1", "frob")
    outcomes = {s.name: await s.search(query) for s in systems}
    assert len(http.sent) == 2  # one request for all six views
    sent = http.sent[1]
    assert sent == {
        "path": "/query_v2",
        "headers": {"Content-Type": "application/json", "X": "1"},
        "query": "frob",
        "file_ids": ["f1", "f2"],
        "k": 10,
        "entity_id": "agent_kb",
        "debug": True,
    }
    assert [p.file_id for p in outcomes["v2:lexical"].passages] == ["f2", "f1"]
    assert [p.file_id for p in outcomes["v2:exact"].passages] == ["f9"]
    assert outcomes["v2:vector"].latency_ms == 3.0 and outcomes["v2:fused"].latency_ms == 0.4
    assert outcomes["v2:reranked"].latency_ms == 0.7
    final = outcomes[FINAL]
    assert (
        final.latency_ms is None and not final.refused and [p.file_id for p in final.passages] == ["f1", "f2"]
    )
    assert systems[-1].refuses and not systems[0].refuses
    record = source.records["q1"]
    assert record.final_chunks == ("c1", "c2") and record.refusal is not None


async def test_stage_views_fail_clearly() -> None:
    kbs = {"agent_kb": ["f1"]}
    missing = FakeV2({})
    missing.status = 404
    with pytest.raises(SystemUnavailable, match=r"/query_v2 answered 404"):
        await V2Debugged(V2Client(missing, kbs, debug=True)).prepare()  # type: ignore[arg-type]
    forbidden = FakeV2({})
    forbidden.status = 403
    with pytest.raises(SystemUnavailable, match="admin token"):
        await V2Debugged(V2Client(forbidden, kbs, debug=True)).prepare()  # type: ignore[arg-type]
    no_debug = {"route": "v2", "results": [], "degraded": False, "safe_refusal": SAFE}
    with pytest.raises(SystemUnavailable, match="without `debug`"):
        await V2Debugged(V2Client(FakeV2({}, default=no_debug), kbs, debug=True)).prepare()  # type: ignore[arg-type]
    no_stages = answer({})
    del no_stages["debug"]["stages"]
    with pytest.raises(SystemUnavailable, match="no `stages`"):
        await V2Debugged(V2Client(FakeV2({}, default=no_stages), kbs, debug=True)).prepare()  # type: ignore[arg-type]
    broken = FakeV2({}, default={"results": "x"})
    with pytest.raises(SystemUnavailable, match="unexpected body"):
        await V2Client(broken, kbs, debug=False).ask("x", "agent_kb")  # type: ignore[arg-type]


async def test_timed_pass_asks_without_debug_and_checks_agreement() -> None:
    refusing = answer(STAGES_ONE, refusal(True, reasons=("missing_identifier",)))
    http = FakeV2({"frob": answer(STAGES_ONE), "zzz": refusing})
    kbs = {"agent_kb": ["f1", "f2"]}
    source = V2Debugged(V2Client(http, kbs, debug=True))  # type: ignore[arg-type]
    queries = [q("a", "frob"), q("b", "zzz", answerable=False, relevant=())]
    for query in queries:
        await source.reply(query)
    plain = V2Client(http, kbs, debug=False)  # type: ignore[arg-type]
    timed = await timed_pass(plain, queries)
    assert all(s["debug"] is False for s in http.sent[2:])
    assert timed["a"].chunk_ids == ("c1", "c2") and timed["b"].refused and timed["a"].latency_ms >= 0
    assert agreement(source.records, timed) == {"same": 2, "differ": 0}
    http.answers["frob"] = answer({**STAGES_ONE, "reranked": items(("c2", "f2", 0.9))})
    assert agreement(source.records, await timed_pass(plain, queries[:1])) == {"same": 0, "differ": 1}
    with pytest.raises(ValueError):
        await timed_pass(source.client, queries)


def test_timed_sample_is_seeded_and_keeps_run_order() -> None:
    queries = [q(str(i), "t") for i in range(20)]
    assert timed_sample(queries, 0, 1) == queries and timed_sample(queries, 50, 1) == queries
    a, b = timed_sample(queries, 5, 42), timed_sample(queries, 5, 42)
    assert a == b and len(a) == 5
    assert [int(x.qid) for x in a] == sorted(int(x.qid) for x in a)


# ---- the refusal grid -----------------------------------------------------------------------------


def case(
    answerable: bool, best: float, *, cov: float = 1.0, hard: bool = False, **kw: Any
) -> tuning.RefusalCase:
    return tuning.RefusalCase(
        qid=kw.pop("qid", "x"),
        answerable=answerable,
        hard=hard,
        best_score=best,
        coverage=cov,
        no_agreement=kw.pop("no_agreement", False),
        rare_missing=kw.pop("rare", False),
        recorded=kw.pop("recorded", False),
        ndcg=kw.pop("ndcg", 0.0),
        best_dense=kw.pop("best_dense", None),
        r1=kw.pop("r1", 0.0),
    )


def test_policy_setting_mirrors_the_service_defaults() -> None:
    from app.evidence.settings import RefusalSettings

    s = tuning.policy_setting()
    p = RefusalSettings()
    assert s.min_rerank_score == p.min_rerank_score and s.refuse_at == p.refuse_at
    assert s.weights() == {k: p.signals.of(k) for k in tuning.SOFT_SIGNALS}


def test_would_refuse_hand_cases() -> None:
    s = tuning.RefusalSetting(0.35, 0.5, 1.0, 1.0, 1.0, 0.5, 2.0)
    # weak rerank (0.2 < 0.35) weighs 1, no agreement 1: 2 >= 2, but both follow from the words ...
    assert not tuning.would_refuse(case(True, 0.2, no_agreement=True), s)
    # ... with a low dense similarity (0.5) it is 2.5 and refuses
    assert tuning.would_refuse(case(True, 0.2, no_agreement=True, best_dense=0.1), s)
    # weak rerank 1 + low coverage (0.4 < 0.5) 0.5 = 1.5 < 2: answered ...
    assert not tuning.would_refuse(case(True, 0.2, cov=0.4), s)
    # ... and at refuse_at 1.5 too: both signals are about words only ...
    low = tuning.RefusalSetting(0.35, 0.5, 1, 1, 1, 0.5, 1.5)
    assert not tuning.would_refuse(case(True, 0.2, cov=0.4), low)
    # ... until the dense channel agrees that nothing is close (0.1 < 0.25, weight 0.5): 2 >= 1.5
    assert tuning.would_refuse(case(True, 0.2, cov=0.4, best_dense=0.1), low)
    # a hard reason refuses whatever the weights
    assert tuning.would_refuse(case(True, 0.9, hard=True), s)
    assert not tuning.would_refuse(case(True, 0.9, rare=True), s)  # rare terms alone weigh 1


def test_the_vectorised_grid_equals_the_scalar_decision() -> None:
    import random

    rng = random.Random(3)
    cases = [
        case(
            rng.random() < 0.6,
            rng.random(),
            cov=rng.random(),
            hard=rng.random() < 0.1,
            no_agreement=rng.random() < 0.3,
            rare=rng.random() < 0.3,
            best_dense=rng.random() * 0.5,
        )
        for _ in range(200)
    ]
    arrays = tuning._Arrays(cases)
    for s in tuning.refusal_settings()[::97]:
        assert arrays.refuse(s).tolist() == [tuning.would_refuse(c, s) for c in cases]


def test_refusal_grid_finds_a_separating_setting_and_reports_the_service_replay() -> None:
    base = tuning.policy_setting()
    # unanswerable: weak best score and rare words missing; answerable: strong score, one of them with
    # rare words missing (a paraphrase) that must not be refused
    cases = [case(False, 0.1, rare=True, best_dense=0.1, qid=f"u{i}") for i in range(10)]
    cases += [case(True, 0.8, qid=f"a{i}", ndcg=1.0, r1=1.0) for i in range(9)]
    cases += [case(True, 0.8, rare=True, qid="a9", ndcg=0.5, r1=0.0)]
    cases = [replace(c, recorded=tuning.would_refuse(c, base)) for c in cases]
    grid = tuning.refusal_grid(cases)
    assert grid["cases"] == {"answerable": 10, "unanswerable": 10}
    assert grid["replay_agrees"] == 20
    chosen = grid["chosen"]
    assert chosen["meets"] and chosen["refused"] == 1.0 and chosen["false_refusals"] == 0.0
    # answerable quality with nothing refused: (9 * 1 + 0.5) / 10
    assert chosen["ndcg_at_10"] == pytest.approx(0.95) and chosen["recall_at_1"] == pytest.approx(0.9)
    assert grid["rule"].startswith("meets the target")
    # the defaults refuse the unanswerable ones (weak 1 + rare 1 = 2) and none of the answerable
    assert grid["service"]["refused"] == 1.0 and grid["service"]["false_refusals"] == 0.0
    assert len(grid["holdout"]) == 2 and grid["heat"]
    assert grid["fired"]["rare_terms_missing"] == {"answerable": 1, "unanswerable": 10}


def test_choose_falls_back_when_nothing_meets_the_target() -> None:
    base = tuning.policy_setting()
    s1, s2 = base, replace(base, refuse_at=1.0)
    low = tuning.RefusalRow(s1, 0.5, 0.02, 0.9, 0.8, False)
    high = tuning.RefusalRow(s2, 0.8, 0.03, 0.85, 0.8, False)
    best, rule = tuning.choose([low, high], base)
    assert best is high and "most refused" in rule
    worse = tuning.RefusalRow(s1, 0.9, 0.2, 0.5, 0.5, False)  # refused - false = 0.7
    better = tuning.RefusalRow(s2, 0.95, 0.1, 0.5, 0.5, False)  # 0.85
    best, rule = tuning.choose([worse, better], base)
    assert best is better and "minus" in rule


# ---- the fusion grid ------------------------------------------------------------------------------


def stage_items(*rows: tuple[str, str, float]) -> list[StageItem]:
    return [StageItem(c, f, 1, s, f"text of {c}") for c, f, s in rows]


FUSION_STAGES = {
    "exact": stage_items(("c1", "f1", 1.0)),
    "lexical": stage_items(("c2", "f2", 9.0), ("c1", "f1", 8.0)),
    "vector": stage_items(("c3", "f3", 0.9), ("c2", "f2", 0.8)),
}


def test_fuse_replay_arithmetic() -> None:
    from app.evidence.settings import FusionSettings

    c = tuning.fusion_case("q", "man", ["f1"], {**FUSION_STAGES, "fused": stage_items(("c1", "f1", 1.0))})
    # k 60: c1 = exact 1/61 + lexical 1/62 + boost 1 * 1.0 / 61 = 0.04892; c2 = 1/61 + 1/62 = 0.03252;
    # c3 = vector 1/61 = 0.01639
    assert tuning.fused_ids(c, FusionSettings(), 10) == ["c1", "c2", "c3"]
    # exact weight 0 and no boost: c1 = 1/62 only, c3 = 1/61 > c1
    plain = FusionSettings(weights={"exact": 0.0, "lexical": 1.0, "vector": 1.0}, exact_boost=0.0)
    assert tuning.fused_ids(c, plain, 10) == ["c2", "c3", "c1"]
    assert c.recorded == ("c1",)


def test_fusion_case_dedupes_by_location() -> None:
    from app.evidence.settings import FusionSettings

    same_place = {
        "lexical": [
            StageItem("a", "f1", 2, 1.0, "The same text"),
            StageItem("b", "f1", 2, 0.9, "the  SAME text"),
        ],
        "vector": [StageItem("b", "f1", 2, 0.5, "the  SAME text")],
    }
    c = tuning.fusion_case("q", "man", ["f1"], same_place)
    # one location: only the better of the two is kept (b: 1/62 + 1/61 beats a: 1/61)
    assert tuning.fused_ids(c, FusionSettings(), 10) == ["b"]


def test_fusion_grid_fidelity_and_the_channel_comparison() -> None:
    from app.evidence.settings import FusionSettings

    replayed = tuning.fused_ids(tuning.fusion_case("q", "man", ["f2"], FUSION_STAGES), FusionSettings(), 10)
    recorded_items = [StageItem(c, f"f{c[1]}", 1, 0.0, "") for c in replayed]
    cases = [tuning.fusion_case("q", "man", ["f2"], {**FUSION_STAGES, "fused": recorded_items})]
    best = {"man": {"ndcg_at_10": 1.0, "recall_at_1": 1.0}}
    # the service's fused list puts f1 first: nDCG = 1/log2(3) for f2 at rank 2, R@1 0
    recorded = {"man": {"ndcg_at_10": 1 / math.log2(3), "recall_at_1": 0.0}}
    grid = tuning.fusion_grid(cases, best, recorded=recorded)
    assert grid["fidelity"]["same_list"] == 1 and grid["fidelity"]["same_top1"] == 1
    assert grid["fidelity"]["ndcg_delta"]["man"] == pytest.approx(0.0)
    assert grid["service"]["sets"]["man"]["recall_at_1"] == 0.0 and not grid["service"]["beats_channels"]
    # a setting without the exact vote puts f2 (lexical 1st, vector 2nd) first: R@1 1, nDCG 1
    assert grid["best"]["beats_channels"] and grid["best"]["sets"]["man"]["ndcg_at_10"] == 1.0
    assert grid["configs"] == len(tuning.fusion_configs())


# ---- targets and the report -----------------------------------------------------------------------


def summary_of(values: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    return values  # type: ignore[return-value]


TARGET_SUMMARY = summary_of(
    {
        "v2:exact": {"man": {"ndcg_at_10": 0.5, "recall_at_1": 0.4}},
        "v2:lexical": {"man": {"ndcg_at_10": 0.8, "recall_at_1": 0.7}},
        "v2:vector": {"man": {"ndcg_at_10": 0.85, "recall_at_1": 0.6}},
        "v2:fused": {"man": {"ndcg_at_10": 0.86, "recall_at_1": 0.7}},
        "v2:reranked": {"man": {"ndcg_at_10": 0.9, "recall_at_1": 0.69}},
        "query_v2": {
            "unanswerable": {"refusal_rate": 0.95},
            "answerable": {"false_refusal_rate": 0.05},
            "all": {"latency_p95_ms": 120.0},
        },
    }
)


def test_targets_are_judged_per_set_with_ties_met() -> None:
    assert best_channel(TARGET_SUMMARY, "man", "ndcg_at_10") == ("v2:vector", 0.85)
    assert best_channel(TARGET_SUMMARY, "man", "recall_at_1") == ("v2:lexical", 0.7)
    rows = {(r["target"], r["set"]): r for r in evaluate(TARGET_SUMMARY)}
    assert rows[("fused >= best single channel (nDCG@10)", "man")]["met"] is True
    assert rows[("fused >= best single channel (R@1)", "man")]["met"] is True  # 0.7 = 0.7
    assert rows[("reranked >= fused (nDCG@10)", "man")]["met"] is True
    assert rows[("reranked >= fused (R@1)", "man")]["met"] is False  # 0.69 < 0.7
    assert rows[("unanswerable refused", "unanswerable")]["met"] is True
    assert rows[("false refusals", "answerable")]["met"] is False
    assert rows[("/query_v2 p95 ms (no debug)", "all")]["met"] is True
    assert evaluate({}) == []


async def test_the_v2_pipeline_measures_tunes_and_reports() -> None:
    unanswerable = answer(
        {**STAGES_ONE, "reranked": items(("c3", "f3", 0.2))},
        refusal(True, reasons=("missing_identifier",), best=0.2),
    )
    weak = answer(
        {**STAGES_ONE, "reranked": items(("c2", "f2", 0.3))},
        refusal(True, signals=("weak_rerank", "no_agreement", "low_dense"), best=0.3, dense=0.1),
    )
    answers = {
        "frob the loom": answer(STAGES_ONE),
        "Skiff Build": answer({**STAGES_ONE, "reranked": items(("c2", "f2", 0.9), ("c1", "f1", 0.4))}),
        "loom.jwin": unanswerable,
        "tide tables": weak,
    }
    http = FakeV2(answers, default=answer(STAGES_ONE))
    source = V2Debugged(V2Client(http, {"agent_kb": ["f1", "f2", "f3"]}, debug=True))  # type: ignore[arg-type]
    systems = v2_systems(source)
    for s in systems:
        await s.prepare()
    queries = [
        q("m1", "frob the loom"),
        q("t1", "Skiff Build", "html-tables", ("f2",), kind="table-cell", answer="text of c2"),
        q("u1", "loom.jwin", "unanswerable", (), kind="mutated-identifier", answerable=False),
        q("m2", "tide tables", relevant=("f2",)),
    ]
    judged = await measure(systems, queries, Progress())  # type: ignore[arg-type]
    timed = await timed_pass(V2Client(http, source.client.kbs, debug=False), queries)  # type: ignore[arg-type]
    judged[FINAL] = [
        replace(j, latency_ms=timed[x.qid].latency_ms) for x, j in zip(queries, judged[FINAL], strict=True)
    ]
    summary = summaries(queries, judged)
    # reranked: m1 f1 first (R@1 1), m2 f2 first (1): 1.0; final: m2 refused, so 0.5
    assert summary["v2:reranked"]["man"]["recall_at_1"] == 1.0
    assert summary[FINAL]["man"]["recall_at_1"] == 0.5
    assert summary[FINAL]["answerable"]["false_refusal_rate"] == pytest.approx(1 / 3)
    assert summary[FINAL]["unanswerable"]["refusal_rate"] == 1.0
    assert summary[FINAL]["all"]["timed"] == 4
    assert summary["v2:lexical"]["html-tables"]["answer_in_passage"] == 1.0
    v2 = v2_tuning(queries, source, judged, summary, 10)
    grid = v2["refusal_grid"]
    assert grid["replay_agrees"] == 4  # the defaults: hard reason; weak, no agreement and low dense
    assert grid["chosen"]["false_refusals"] == 0.0 and grid["chosen"]["refused"] == 1.0
    assert v2["fusion_grid"]["fidelity"]["cases"] == 3
    v2.update(v2_health(source))
    v2["timed"], v2["agreement"] = len(timed), agreement(source.records, timed)
    v2["index"] = {"seconds": 12.0, "knowledge_bases": {}, "hnsw_tasks": {}}
    result = {
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 1.0,
        "corpus": {
            "documents": 3,
            "knowledge_bases": {"agent_kb": 3},
            "chunks": {"agent_kb": 3},
            "queries": {},
        },
        "systems": {
            s.name: {"description": s.description, "refuses": s.refuses, "stage": s.stage != FINAL}
            for s in systems
        },
        "summary": summary,
        "v2": v2,
        "targets": evaluate(summary),
    }
    text = markdown(result)
    for needle in (
        "| v2:fused |",
        "| query_v2 |",
        "– (before refusal)",
        "## /query_v2 targets",
        "**not met**",
        "## Refusal policy, offline grid",
        "**chosen**: ",
        "## Fusion weights, offline grid",
        "best single channel",
        "asked again without debug",
    ):
        assert needle in text, needle
    unanswerable_rows = text.split("## Unanswerable")[1].split("##")[0]
    assert "v2:fused" not in unanswerable_rows and "| query_v2 |" in unanswerable_rows


# ---- waiting for the V2 index ---------------------------------------------------------------------


class FakeAdmin:
    """`/v2/status`, `/v2/runs`, `/v2/runs/{id}` and `/v2/backfill` as a small state machine."""

    def __init__(
        self, kb: str, files: list[str], *, active: int | None = None, running: int | None = None
    ) -> None:
        self.kb, self.files = kb, files
        self.runs: dict[int, dict[str, Any]] = {}
        self.active = active
        self.posts: list[dict[str, Any]] = []
        self.stage_per_poll = 1
        self.fail_run = False
        self.status_code = 200
        self.namespaces = [kb]
        self.hnsw = "done"
        for run_id, status in ((active, "active"), (running, "running")):
            if run_id is not None:
                staged = len(files) if status == "active" else 0
                self.runs[run_id] = {"status": status, "staged": staged}

    def run_body(self, run_id: int) -> dict[str, Any]:
        run = self.runs[run_id]
        files = [
            {"file_id": f, "state": "staged" if i < run["staged"] else "pending"}
            for i, f in enumerate(self.files)
        ]
        staged = sum(f["state"] == "staged" for f in files)
        return {
            "run": {
                "run_id": run_id,
                "status": run["status"],
                "error": "boom" if run["status"] == "failed" else None,
            },
            "counts": {"staged": staged, "pending": len(files) - staged},
            "chunks": 10 * staged,
            "files": files,
        }

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.status_code != 200:
            return httpx.Response(self.status_code, json={"detail": "no"})
        path = request.url.path
        if path == "/v2/status":
            return httpx.Response(
                200,
                json={
                    "namespaces": self.namespaces,
                    "index_version": "v2",
                    "active_runs": [{"namespace": self.kb, "index_version": "v2", "run_id": self.active}]
                    if self.active
                    else [],
                    "tasks": [{"name": "v2-hnsw-index-384", "state": self.hnsw}],
                },
            )
        if path == "/v2/backfill":
            self.posts.append(json.loads(request.content))
            self.runs[9] = {"status": "running", "staged": 0}
            return httpx.Response(202, json={"run": {"run_id": 9}, "job_id": 77})
        if path == "/v2/runs":
            running = [r for r, v in self.runs.items() if v["status"] == "running"]
            return httpx.Response(200, json=[{"run_id": r} for r in running])
        run_id = int(path.rsplit("/", 1)[1])
        run = self.runs[run_id]
        if run["status"] == "running":
            if self.fail_run:
                run["status"] = "failed"
            else:
                run["staged"] = min(run["staged"] + self.stage_per_poll, len(self.files))
                if run["staged"] == len(self.files):
                    run["status"], self.active = "active", run_id
        return httpx.Response(200, json=self.run_body(run_id))


async def _wait(fake: FakeAdmin, **kw: Any) -> dict[str, Any]:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    async def sleep(_s: float) -> None:
        return None

    lines: list[str] = []
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(fake.handler), base_url="http://svc"
    ) as client:
        facts = await wait_for_index(
            client, {fake.kb: fake.files}, say=lines.append, clock=clock, sleep=sleep, **kw
        )
    facts["lines"] = lines
    return facts


async def test_wait_backfills_a_namespace_without_a_run() -> None:
    fake = FakeAdmin("agent_kb", ["a", "b", "c"])
    facts = await _wait(fake)
    assert fake.posts == [{"namespace": "agent_kb"}]
    kb = facts["knowledge_bases"]["agent_kb"]
    assert kb["run_id"] == 9 and kb["backfilled"] and kb["job_id"] == 77 and kb["chunks"] == 30
    assert facts["hnsw_tasks"] == {"v2-hnsw-index-384": "done"}
    assert any("backfill queued" in line for line in facts["lines"])


async def test_wait_takes_a_complete_active_run_and_adopts_a_running_one() -> None:
    ready = FakeAdmin("agent_kb", ["a", "b"], active=5)
    facts = await _wait(ready)
    assert ready.posts == [] and facts["knowledge_bases"]["agent_kb"]["run_id"] == 5
    assert not facts["knowledge_bases"]["agent_kb"]["backfilled"]
    adopting = FakeAdmin("agent_kb", ["a", "b"], running=6)
    facts = await _wait(adopting)
    assert adopting.posts == [] and facts["knowledge_bases"]["agent_kb"]["run_id"] == 6


async def test_wait_fails_clearly() -> None:
    failing = FakeAdmin("agent_kb", ["a"])
    failing.fail_run = True
    with pytest.raises(V2IndexError, match="run 9 of agent_kb is failed: boom"):
        await _wait(failing)
    stuck = FakeAdmin("agent_kb", ["a", "b"])
    stuck.stage_per_poll = 0
    with pytest.raises(V2IndexError, match="not ready after 20 s"):
        await _wait(stuck, timeout_s=20)
    off = FakeAdmin("agent_kb", ["a"])
    off.namespaces = ["agent_other"]
    with pytest.raises(V2IndexError, match="RAG_V2_NAMESPACE_IDS"):
        await _wait(off)
    forbidden = FakeAdmin("agent_kb", ["a"])
    forbidden.status_code = 403
    with pytest.raises(V2IndexError, match="admin token"):
        await _wait(forbidden)


async def test_wait_reports_an_hnsw_index_not_built_in_time() -> None:
    fake = FakeAdmin("agent_kb", ["a"], active=5)
    fake.hnsw = "running"
    facts = await _wait(fake, hnsw_wait_s=5)
    assert facts["hnsw_tasks"] == {"v2-hnsw-index-384": "running"}
    assert any("measuring anyway" in line for line in facts["lines"])


def test_covered_needs_an_active_run_with_every_file_staged() -> None:
    run: dict[str, Any] = {"run": {"status": "active"}, "files": [{"file_id": "a", "state": "staged"}]}
    assert covered(run, frozenset({"a"}))
    assert not covered(run, frozenset({"a", "b"}))
    assert not covered({**run, "run": {"status": "running"}}, frozenset({"a"}))
    # a run built by another extractor than the service's now is not the index to measure
    built = {**run, "run": {"status": "active", "extractor_version": "v2.1-old"}}
    assert covered(built, frozenset({"a"}), "v2.1-old") and not covered(built, frozenset({"a"}), "v2.2-new")


# ---- the command line ------------------------------------------------------------------------------


def test_cli_measures_v2_by_default_and_runs_without_it() -> None:
    from benchmarks.quality.cli import parse

    opts = parse([])
    assert "query_v2" in opts.systems and opts.v2_timed == 0 and opts.v2_wait_s == 3 * 3600
    assert "query_v2" not in parse(["--systems", "v1-dense,bm25,rrf"]).systems
    remote = parse(
        ["--service-url", "http://h:1", "--jwt-secret", "s", "--v2-timed", "200", "--v2-wait", "60"]
    )
    assert remote.jwt_secret == "s" and remote.v2_timed == 200 and remote.v2_wait_s == 60


@pytest.mark.parametrize(
    "argv", [["--token", "t"], ["--v2-timed", "-1"], ["--v2-wait", "0"], ["--systems", "query_v3"]]
)
def test_cli_refuses_bad_v2_options(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.quality.cli import parse

    with pytest.raises(SystemExit):
        parse(argv)
    assert "scripts/bench quality" in capsys.readouterr().err


def test_the_run_takes_the_token_it_is_given_or_mints_an_admin_one() -> None:
    import jwt as pyjwt

    from benchmarks.quality import service as svc
    from benchmarks.quality.run import Options, _token

    assert _token(Options(token="abc"), None) == "abc"
    minted = _token(Options(jwt_secret="s3cret-s3cret-s3cret-s3cret-s3cret"), None)
    assert minted is not None
    claims = pyjwt.decode(minted, "s3cret-s3cret-s3cret-s3cret-s3cret", algorithms=["HS256"])
    assert claims["role"] == "ADMIN" and claims["id"] == svc.ADMIN_USER and claims["exp"] > claims["iat"]
    assert _token(Options(), None) is None
    assert svc.auth_headers("x") == {"Authorization": "Bearer x"} and svc.auth_headers(None) == {}
