"""Bounded reranking: the feature reranker, the window, caps, and fallback from failing rerankers."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence

import httpx
import pytest

from app.evidence.query.analysis import QueryAnalysis, analyze_query
from app.evidence.query.records import Fused
from app.evidence.query.rerank import FeatureReranker, rerank_window
from app.evidence.query.rerank_http import HttpReranker, parse_reply
from app.evidence.settings import FeatureWeights
from tests.fixtures.patience import ceiling, out_of_time
from tests.unit.v2.helpers import cand, fused

ONLY_COVERAGE_AND_PRIOR = FeatureWeights(
    coverage=1, prior=1, phrases=0, identifiers=0, quantities=0, heading=0, intent=0
)


def test_feature_arithmetic() -> None:
    # window of 2; "alpha" only in item 1: idf(2, 1) = ln(1 + 1.5/1.5) = ln 2;
    # "beta" in both: idf(2, 2) = ln(1 + 0.5/2.5) = ln 1.2.
    # coverage 1 = 1; coverage 2 = ln1.2 / (ln2 + ln1.2) = 0.208262
    # score = (coverage + prior) / 2 (the other features weigh 0), prior = score / the window's best
    # (0.8): 1 -> (1 + 0.25)/2 = 0.625, 2 -> (0.208262 + 1)/2 = 0.604131
    items = [fused(cand("1", content="alpha beta"), 0.2), fused(cand("2", content="beta gamma"), 0.8)]
    scores = FeatureReranker(ONLY_COVERAGE_AND_PRIOR).score_all(analyze_query("alpha beta"), items)
    coverage2 = math.log(1.2) / (math.log(2) + math.log(1.2))
    assert scores == pytest.approx([0.625, (coverage2 + 1.0) / 2])


def test_features_apply_only_when_the_query_asks() -> None:
    item = fused(cand("1", content="Type: K 28\nLength (mm): 14", kind="table_row", section=("Sizes",)), 0.5)
    plain = FeatureReranker().features(analyze_query("reset the device"), [item])[0]
    assert set(plain) == {"prior", "coverage", "heading"}
    rich = FeatureReranker().features(analyze_query('"length" of K 28 at 14 mm in the table'), [item])[0]
    assert set(rich) == {
        "prior", "coverage", "heading", "phrases", "identifiers", "definition", "quantities", "intent",
    }  # fmt: skip
    assert rich["identifiers"] == 1.0 and rich["phrases"] == 1.0 and rich["intent"] == 1.0
    assert rich["definition"] == 0.0  # no row label or heading names K 28, the text starts with "Type"
    assert rich["quantities"] == 0.0  # "14 mm" is not written in the content and no entity key says so


def test_the_row_naming_the_identifier_wins_over_a_better_fused_neighbour() -> None:
    k25 = fused(
        cand("k25", content="Type: K 25\nLength (mm): 12", kind="table_row", entity_keys=frozenset({"k 25"})),
        0.9,
    )
    k28 = fused(
        cand("k28", content="Type: K 28\nLength (mm): 14", kind="table_row", entity_keys=frozenset({"k 28"})),
        0.6,
    )
    scores = FeatureReranker().score_all(analyze_query("length of K 28"), [k25, k28])
    assert scores[1] > scores[0]


def test_the_defining_entry_outranks_a_passing_mention_and_stems_count() -> None:
    # both hold every term ("returns" meets "return" by its stem) and the name; the entry starts with
    # the name under a heading naming it, the mention is fused higher (0.6 against 0.4).
    # mention: coverage 1, identifiers 1, heading 0, definition 0, prior 1 -> (3 + 3 + 0 + 0 + 5) / 14
    # entry:   coverage 1, identifiers 1, heading 2/3 (str, lstrip; not return), definition 1, prior 2/3
    #          -> (3 + 3 + 2/3 + 2 + 10/3) / 14 = 12 / 14
    # without the definition feature the entry would lose: (3 + 3 + 2/3 + 10/3) / 12 = 10 / 12 < 11 / 12
    entry = fused(
        cand(
            "e",
            content="str.lstrip([chars])\nReturn a copy of the string with leading characters removed.",
            section=("str.lstrip",),
        ),
        0.4,
    )
    mention = fused(cand("m", content="Use str.lstrip, which returns the string trimmed on the left."), 0.6)
    scores = FeatureReranker().score_all(analyze_query("what does str.lstrip return"), [mention, entry])
    assert scores[0] == pytest.approx(11 / 14)
    assert scores[1] == pytest.approx(12 / 14) and scores[1] > scores[0]


class Fixed:
    """A reranker that returns given scores (or raises)."""

    def __init__(self, scores: Sequence[float] | Exception, name: str = "fixed") -> None:
        self._scores = scores
        self.name = name

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        if isinstance(self._scores, Exception):
            raise self._scores
        return list(self._scores)


def window_items(n: int, file_of=lambda i: f"f{i}") -> list[Fused]:
    return [fused(cand(f"c{i}", file_of(i), content=f"item {i} text"), 1 - i / 10) for i in range(n)]


async def test_the_window_is_reordered_never_grown() -> None:
    items = window_items(5)
    outcome = await rerank_window(analyze_query("text"), items, Fixed([0.1, 0.9, 0.5]), window=3)
    assert [f.candidate.chunk_id for f in outcome.items] == ["c1", "c2", "c0"]
    assert [f.rerank for f in outcome.items] == [0.9, 0.5, 0.1]
    assert outcome.reranker == "fixed" and outcome.fallback_reason is None


async def test_text_ocr_read_with_low_confidence_is_weaker_evidence() -> None:
    scanned = {"ocr_pages": {"2": 0.6, "3": 0.98}}
    items = [
        fused(cand("shaky", "f1", "a scanned page", page=2, metadata=scanned), 0.9),
        fused(cand("layer", "f2", "a text layer page", page=2), 0.8),
        fused(cand("clean", "f3", "a well scanned page", page=3, metadata=scanned), 0.7),
    ]
    same = Fixed([0.9, 0.8, 0.82])
    # confidence 0.6 with discount 0.5: 0.9 x 0.8 = 0.72, behind the text layer's 0.8; 0.98: 0.82 x 0.99
    outcome = await rerank_window(analyze_query("page"), items, same, ocr_discount=0.5)
    assert [f.candidate.chunk_id for f in outcome.items] == ["clean", "layer", "shaky"]
    assert [round(f.rerank or 0, 4) for f in outcome.items] == [0.8118, 0.8, 0.72]
    # 0: OCR text counts fully, the reranker's order stands
    plain = await rerank_window(analyze_query("page"), items, same, ocr_discount=0.0)
    assert [f.candidate.chunk_id for f in plain.items] == ["shaky", "clean", "layer"]


async def test_reranking_cannot_bypass_the_caps() -> None:
    # the reranker puts the three f1 items first; with a per-file cap of 2 the third moves behind f2
    items = window_items(4, file_of=lambda i: "f1" if i < 3 else "f2")
    outcome = await rerank_window(analyze_query("text"), items, Fixed([0.9, 0.8, 0.7, 0.1]), per_file_cap=2)
    assert [f.candidate.chunk_id for f in outcome.items] == ["c0", "c1", "c3", "c2"]


@pytest.mark.parametrize(
    ("reranker", "reason"),
    [
        (Fixed(RuntimeError("boom")), "RuntimeError"),
        (Fixed([0.5]), "RerankError"),  # wrong number of scores
        (Fixed([0.5, float("nan"), 0.1]), "RerankError"),
        (Fixed([0.5, "high", 0.1]), "RerankError"),  # type: ignore[list-item]
    ],
)
async def test_a_failing_reranker_falls_back_to_the_features(reranker: Fixed, reason: str) -> None:
    items = window_items(3)
    outcome = await rerank_window(analyze_query("item 2"), items, reranker)
    assert outcome.reranker == "features" and outcome.fallback_reason == reason
    assert len(outcome.items) == 3 and all(f.rerank is not None for f in outcome.items)


async def test_out_of_range_scores_are_clipped() -> None:
    outcome = await rerank_window(analyze_query("x"), window_items(2), Fixed([7.0, -3.0]))
    assert [f.rerank for f in outcome.items] == [1.0, 0.0]


# --- the remote reranker, over httpx.MockTransport (no sockets) ---------------------------------


def reranker_with(handler, flavour: str = "cohere", timeout: float = 1.5) -> tuple[HttpReranker, list[dict]]:
    seen: list[dict] = []

    async def record(request: httpx.Request) -> httpx.Response:
        seen.append(
            {
                "url": str(request.url),
                "auth": request.headers.get("authorization"),
                **json.loads(request.content),
            }
        )
        result = handler(request)
        return await result if asyncio.iscoroutine(result) else result

    client = httpx.AsyncClient(transport=httpx.MockTransport(record))
    reranker = HttpReranker(
        client, "http://reranker.test/v1/rerank", flavour=flavour, model="m1", api_key="k", timeout=timeout
    )
    return reranker, seen


async def test_cohere_shape() -> None:
    reply = {
        "results": [
            {"index": 2, "relevance_score": 0.9},
            {"index": 0, "relevance_score": 0.4},
            {"index": 1, "relevance_score": 0.1},
        ]
    }
    reranker, seen = reranker_with(lambda request: httpx.Response(200, json=reply))
    outcome = await rerank_window(analyze_query("item"), window_items(3), reranker)
    assert [f.candidate.chunk_id for f in outcome.items] == ["c2", "c0", "c1"]
    assert outcome.reranker == "http:cohere" and outcome.fallback_reason is None
    body = seen[0]
    assert body["model"] == "m1" and body["query"] == "item" and body["top_n"] == 3
    assert body["documents"] == ["item 0 text", "item 1 text", "item 2 text"]
    assert body["auth"] == "Bearer k"


async def test_jina_shape_is_cohere_shaped() -> None:
    reply = {
        "model": "m1",
        "results": [
            {"index": 1, "relevance_score": 0.7, "document": {"text": "x"}},
            {"index": 0, "relevance_score": 0.2},
        ],
    }
    reranker, _ = reranker_with(lambda request: httpx.Response(200, json=reply), flavour="jina")
    outcome = await rerank_window(analyze_query("item"), window_items(2), reranker)
    assert [f.candidate.chunk_id for f in outcome.items] == ["c1", "c0"]


async def test_tei_shape() -> None:
    reply = [{"index": 1, "score": 0.8}, {"index": 0, "score": 0.3}]
    reranker, seen = reranker_with(lambda request: httpx.Response(200, json=reply), flavour="tei")
    outcome = await rerank_window(analyze_query("item"), window_items(2), reranker)
    assert [f.candidate.chunk_id for f in outcome.items] == ["c1", "c0"]
    assert seen[0]["texts"] == ["item 0 text", "item 1 text"] and "documents" not in seen[0]


async def test_timeout_falls_back() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(600)  # never answers while the test runs
        return httpx.Response(200, json={"results": []})

    reranker, _ = reranker_with(slow, timeout=0.05)
    started = asyncio.get_running_loop().time()
    outcome = await rerank_window(analyze_query("item"), window_items(2), reranker)
    took = asyncio.get_running_loop().time() - started
    assert took < ceiling(1.0), out_of_time("the fallback after the 0.05 s timeout", took)
    assert outcome.reranker == "features" and outcome.fallback_reason == "TimeoutError"


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500, json={"error": "secret provider text"}),
        httpx.Response(200, content=b"not json"),
        httpx.Response(200, json={"results": [{"index": 0, "relevance_score": 0.5}]}),  # one missing
        httpx.Response(
            200,
            json={"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]},
        ),
        httpx.Response(
            200,
            json={"results": [{"index": 0, "relevance_score": 0.5}, {"index": 5, "relevance_score": 0.4}]},
        ),
        httpx.Response(
            200,
            json={"results": [{"index": 0, "relevance_score": "high"}, {"index": 1, "relevance_score": 0.4}]},
        ),
        httpx.Response(200, json={"data": []}),
    ],
)
async def test_malformed_replies_fall_back(response: httpx.Response) -> None:
    reranker, _ = reranker_with(lambda request: response)
    outcome = await rerank_window(analyze_query("item"), window_items(2), reranker)
    assert outcome.reranker == "features" and outcome.fallback_reason == "RerankError"


async def test_transport_error_falls_back() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    reranker, _ = reranker_with(refuse)
    outcome = await rerank_window(analyze_query("item"), window_items(2), reranker)
    assert outcome.fallback_reason == "ConnectError"


def test_parse_reply_orders_by_index() -> None:
    assert parse_reply([{"index": 1, "score": 0.2}, {"index": 0, "score": 0.9}], 2) == [0.9, 0.2]


def test_the_settings_know_every_feature_and_refuse_unknown_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import load_settings
    from app.errors import ConfigError

    # every weight is a feature the reranker computes, and each feature has a weight
    item = fused(cand("1", content="K 28\nType: K 28", kind="table_row", section=("K 28",), page=2), 0.5)
    computed = FeatureReranker().features(analyze_query('"K 28" at 12 mm: cite the table, page?'), [item])[0]
    assert set(computed) <= set(FeatureWeights.model_fields)
    monkeypatch.setenv("RAG_V2__RERANK__FEATURES__PRIOR", "4")
    assert load_settings(_env_file=None).v2.rerank.features.prior == 4.0
    monkeypatch.setenv("RAG_V2__RERANK__FEATURES__PRIRO", "4")
    with pytest.raises(ConfigError, match="RAG_V2__RERANK__FEATURES__PRIRO: Extra inputs are not permitted"):
        load_settings(_env_file=None)
