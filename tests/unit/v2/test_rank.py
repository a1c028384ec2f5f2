"""The service's pure middle, `rank`, without a database, and the candidate lists it is given."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from app.search.v2.analysis import QueryAnalysis, analyze_query
from app.search.v2.records import CHANNELS, Fused, Scored
from app.search.v2.rerank import FeatureReranker
from app.search.v2.service import Statistics, candidate_lists, rank
from app.store import v2_search
from app.store.v2_search import ChannelHit, ChannelResult, ChunkDetail, Retrieval, Visible
from app.v2_settings import FusionSettings, V2Settings
from tests.unit.v2.helpers import cand

ROW = cand("row", "f1", "K 28 length 14 mm weight 4 kg", kind="table_row", row_label="K 28", page=2)
PROSE = cand("prose", "f1", "The K series pumps are quiet", page=1)
OTHER = cand("other", "f2", "Cleaning the filter keeps the water flowing", page=1)
# caps out of the way, so that the order is the fusion's alone
TUNING = V2Settings(fusion=FusionSettings(per_file_cap=10, per_page_cap=10))


class Fixed:
    """A reranker that gives the window's items these scores, in window order."""

    name = "fixed"

    def __init__(self, scores: Sequence[float]) -> None:
        self.values = list(scores)

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        return self.values[: len(items)]


class Broken:
    """A reranker that always fails."""

    name = "broken"

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        raise RuntimeError("model down")


LISTS = {
    "exact": [Scored(ROW, 1.0)],
    "lexical": [Scored(PROSE, 3.2), Scored(ROW, 2.9)],
    "vector": [Scored(ROW, 0.8), Scored(OTHER, 0.7)],
}


async def test_rank_fuses_reranks_and_decides() -> None:
    analysis = analyze_query("What is the weight of the K 28?")
    ranking = await rank(analysis, LISTS, Statistics(), TUNING, Fixed([0.2, 0.9, 0.5]))
    # the shipped fusion (k 20, lexical weight 2, boost 1): row 1/21 + 2/22 + 1/21 + 1.0/21,
    # prose 2/21, other 1/22; best possible 4/21 + 1/21 = 5/21
    assert [f.candidate.chunk_id for f in ranking.fused] == ["row", "prose", "other"]
    assert ranking.fused[0].score == pytest.approx((3 / 21 + 2 / 22) / (5 / 21))
    # the reranker's scores reorder the window: prose 0.9, other 0.5, row 0.2
    assert [f.candidate.chunk_id for f in ranking.items] == ["prose", "other", "row"]
    assert [f.final_score for f in ranking.items] == [0.9, 0.5, 0.2]
    assert ranking.reranked.reranker == "fixed" and ranking.reranked.fallback_reason is None
    assert ranking.decision.checked["best_score"] == 0.9
    assert ranking.fuse_ms >= 0 and ranking.rerank_ms >= 0


async def test_a_failing_reranker_falls_back_to_the_features() -> None:
    analysis = analyze_query("What is the weight of the K 28?")
    ranking = await rank(analysis, LISTS, Statistics(), TUNING, Broken())
    assert ranking.reranked.reranker == "features" and ranking.reranked.fallback_reason == "RuntimeError"
    expected = FeatureReranker(TUNING.rerank.features).score_all(analysis, ranking.fused)
    assert sorted(f.final_score for f in ranking.items) == sorted(min(max(s, 0.0), 1.0) for s in expected)
    assert ranking.items[0].candidate.chunk_id == "row"


async def test_agreement_needs_two_channels_that_ran() -> None:
    analysis = analyze_query("quiet pumps")
    alone = {"lexical": [Scored(PROSE, 1.0)]}
    # one channel ran (the others failed): its lone hits cannot lack agreement
    ranking = await rank(analysis, alone, Statistics(), TUNING, Fixed([0.9]))
    assert "no_agreement" not in {s.code for s in ranking.decision.signals}
    # three ran, one found it: no agreement
    ran = {"exact": [], "lexical": [Scored(PROSE, 1.0)], "vector": []}
    ranking = await rank(analysis, ran, Statistics(), TUNING, Fixed([0.9]))
    assert "no_agreement" in {s.code for s in ranking.decision.signals}


async def test_the_statistics_are_read_only_when_known() -> None:
    analysis = analyze_query("quiet pumps")
    lists = {"lexical": [Scored(PROSE, 1.0)], "vector": [Scored(PROSE, 0.9)]}
    unknown = await rank(analysis, lists, Statistics(), TUNING, Fixed([0.9]))
    assert "rare_terms" not in unknown.decision.checked
    # 1,000 visible chunks; "quiet" in 2 of them (rare at the default share), "pumps" in 400
    known = Statistics(1000, {"quiet": 2, "pumps": 400})
    ranking = await rank(analysis, lists, known, TUNING, Fixed([0.9]))
    assert ranking.decision.checked["rare_terms"] == ["quiet"]


def detail(document_id: int, ordinal: int, content: str) -> ChunkDetail:
    return ChunkDetail(
        document_id=document_id, ordinal=ordinal, chunk_id=f"c{document_id}-{ordinal}",
        file_id=f"f{document_id}", kind="prose", page=1, page_label=None, section=(),
        table_caption=None, table_index=None, row_index=None, row_label=None, headers=(),
        row_values=(), units=(), footnotes=(), content=content, search_text=content,
        entity_keys=frozenset(), filename="a.pdf", title="A", language="en", publication_date=None,
        document_number=None, source="original", metadata={"kind": "pdf", "indexing": "left out"},
    )  # fmt: skip


def test_candidate_lists_keep_the_channels_that_answered_in_their_order() -> None:
    channels = {
        "exact": ChannelResult(error="RaiseError"),
        "lexical": ChannelResult(
            [ChannelHit(1, 0, 2.5, "bm25"), ChannelHit(9, 9, 1.0, "bm25"), ChannelHit(2, 1, 1.5)]
        ),
        "vector": ChannelResult([ChannelHit(2, 1, 0.9)], path="exact"),
    }
    details = {(1, 0): detail(1, 0, "first"), (2, 1): detail(2, 1, "second")}
    lists = candidate_lists(Retrieval(channels, Visible(2, 2, 1.0), {}, details))
    # the failed channel is left out; a hit without details (9, 9) is dropped
    assert list(lists) == ["lexical", "vector"]
    assert [(s.candidate.chunk_id, s.score) for s in lists["lexical"]] == [("c1-0", 2.5), ("c2-1", 1.5)]
    assert lists["vector"][0].candidate is lists["lexical"][1].candidate  # one candidate per chunk
    assert dict(lists["lexical"][0].candidate.metadata) == {"kind": "pdf", "index_source": "original"}


def test_the_store_and_the_records_name_the_same_channels() -> None:
    assert v2_search.CHANNEL_NAMES == CHANNELS


async def test_a_plain_word_question_leans_on_the_vector_channel() -> None:
    # lexical ranks PROSE first, vector OTHER. A question of plain words is fused with the prose
    # weights (lexical 1, vector 2): OTHER 2/21 beats PROSE 1/21. One that names a thing ("K 28")
    # keeps the shipped weights (lexical 2, vector 1): PROSE 2/21 beats OTHER 1/21.
    lists = {"lexical": [Scored(PROSE, 3.0)], "vector": [Scored(OTHER, 0.7)]}
    plain = await rank(
        analyze_query("how do the pumps stay quiet"), lists, Statistics(), TUNING, Fixed([0.5, 0.5])
    )
    assert [f.candidate.chunk_id for f in plain.fused] == ["other", "prose"]
    named = await rank(analyze_query("is the K 28 quiet"), lists, Statistics(), TUNING, Fixed([0.5, 0.5]))
    assert [f.candidate.chunk_id for f in named.fused] == ["prose", "other"]
