"""The service's pure middle, `rank`, without a database, and the candidate lists it is given."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from app.evidence.query.analysis import QueryAnalysis, analyze_query
from app.evidence.query.candidates import candidate_lists
from app.evidence.query.evidence import build_evidence
from app.evidence.query.ranking import rank
from app.evidence.query.records import CHANNELS, Fused, Scored
from app.evidence.query.rerank import FeatureReranker
from app.evidence.query.statistics import Statistics
from app.evidence.settings import FusionSettings, V2Settings
from app.evidence.store import channels as v2_search
from app.evidence.store.channels import ChannelHit, ChannelResult, ChunkDetail, Retrieval, Visible
from app.text.chunk_records import ChunkPlace
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
        file_id=f"f{document_id}", place=ChunkPlace(page=1), content=content, search_text=content,
        entity_keys=frozenset(), filename="a.pdf", title="A", language="en", publication_date=None,
        document_number=None, source="original", metadata={"kind": "pdf", "indexing": "left out"},
    )  # fmt: skip


def test_candidate_lists_keep_the_channels_that_answered_in_their_order() -> None:
    channels = {
        "exact": ChannelResult(error="RaiseError"),
        "lexical": ChannelResult(
            [ChannelHit(1, 0, 2.5, "bm25"), ChannelHit(9, 9, 1.0, "bm25"), ChannelHit(2, 1, 1.5)]
        ),
        "vector": ChannelResult([ChannelHit(2, 1, 0.9), ChannelHit(1, 3, 0.5)], path="exact"),
    }
    details = {(1, 0): detail(1, 0, "first"), (2, 1): detail(2, 1, "second"), (1, 3): detail(1, 3, "third")}
    lists = candidate_lists(Retrieval(channels, Visible(2, 3, 1.0), {}, details))
    # the failed channel is left out; a hit without details (9, 9) is dropped
    assert list(lists) == ["lexical", "vector"]
    assert [(s.candidate.chunk_id, s.score) for s in lists["lexical"]] == [("c1-0", 2.5), ("c2-1", 1.5)]
    assert lists["vector"][0].candidate is lists["lexical"][1].candidate  # one candidate per chunk
    first, third = lists["lexical"][0].candidate, lists["vector"][1].candidate
    assert first.place is details[(1, 0)].place  # the store's place is carried, not copied
    document = first.document
    assert third.document is document  # a document's fields are shaped once for all its chunks
    assert (document.filename, document.title, document.language, document.source_type) == (
        "a.pdf",
        "A",
        "en",
        "pdf",
    )
    assert dict(document.metadata) == {"kind": "pdf", "index_source": "original"}


# The wire JSON of two results as the release before the shared chunk place produced it from the
# same store rows: the records between the store and the wire may change, these bytes may not.
GOLDEN_EVIDENCE = [
    '{"citation_id":"V2-1","file_id":"f1","filename":"Sizes.PDF","title":"Sizes of the types",'
    '"content":"Sizes\\nType: K 28\\nLength (mm): 14","page":3,"page_label":"12",'
    '"section":["Dimensions","Types"],"chunk_kind":"table_row","table_title":"Sizes","row_label":"K 28",'
    '"headers":["Type","Length (mm)"],"row_values":["K 28","14"],"units":[null,"mm"],'
    '"footnotes":["At 20 °C."],"source_type":"pdf","channels":["exact","lexical"],"score":0.81,'
    '"language":"de","publication_date":"2024-05-01","metadata":{"kind":"pdf","page_count":9,'
    '"index_source":"original","document_number":"DN-7","chunk_id":"r1","physical_page":3}}',
    '{"citation_id":"V2-2","file_id":"f2","filename":"notes","title":null,"content":"Prose text",'
    '"page":null,"page_label":null,"section":[],"chunk_kind":"prose","table_title":null,'
    '"row_label":null,"headers":[],"row_values":[],"units":[],"footnotes":[],"source_type":null,'
    '"channels":["lexical","vector"],"score":0.42,"language":null,"publication_date":null,'
    '"metadata":{"index_source":"v1_chunks","chunk_id":"p1"}}',
]


def test_store_rows_reach_the_wire_byte_for_byte() -> None:
    row = ChunkDetail(
        document_id=1, ordinal=4, chunk_id="r1", file_id="f1",
        place=ChunkPlace(
            kind="table_row", page=3, page_label="12", section=("Dimensions", "Types"), table_caption="Sizes",
            table_index=2, row_index=1, row_label="K 28", headers=("Type", "Length (mm)"),
            row_values=("K 28", "14"), units=(None, "mm"), footnotes=("At 20 °C.",),
        ),
        content="Sizes\nType: K 28\nLength (mm): 14", search_text="sizes type k 28 length mm 14",
        entity_keys=frozenset({"k 28"}), filename="Sizes.PDF", title="Sizes of the types", language="de",
        publication_date="2024-05-01", document_number="DN-7", source="original",
        metadata={"kind": "pdf", "page_count": 9, "stats": {"chunks": 3}},
    )  # fmt: skip
    prose = ChunkDetail(
        document_id=2, ordinal=0, chunk_id="p1", file_id="f2", place=ChunkPlace(), content="Prose text",
        search_text="prose text", entity_keys=frozenset(), filename="notes", title="", language=None,
        publication_date=None, document_number=None, source="v1_chunks", metadata={},
    )  # fmt: skip
    channels = {
        "exact": ChannelResult([ChannelHit(1, 4, 1.0, "row_label")]),
        "lexical": ChannelResult([ChannelHit(1, 4, 3.0), ChannelHit(2, 0, 1.0)]),
        "vector": ChannelResult([ChannelHit(2, 0, 0.7)]),
    }
    lists = candidate_lists(Retrieval(channels, Visible(2, 2, 1.0), {}, {(1, 4): row, (2, 0): prose}))
    first, second = lists["lexical"][0].candidate, lists["vector"][0].candidate
    items = [
        Fused(first, 0.5, ("exact", "lexical"), {"exact": 1, "lexical": 1}, exact=1.0, rerank=0.81),
        Fused(second, 0.42, ("lexical", "vector"), {"lexical": 2, "vector": 1}),
    ]
    assert [e.model_dump_json() for e in build_evidence(items, ["f1", "f2"], k=8)] == GOLDEN_EVIDENCE


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


def test_an_exact_hit_on_an_everyday_one_word_row_label_weighs_less() -> None:
    from app.evidence.query.statistics import discount_common_labels

    glossary = cand("open", "g", "open: to begin using a file", kind="table_row", row_label="Open")
    code = cand("k28", "t", "K 28 weight 14 kg", kind="table_row", row_label="K28")
    hits = [Scored(glossary, 1.0), Scored(code, 0.9)]
    # "open" is in 200 of 1,000 chunks (20 %, above the 1 % counted fully): 1.0 x ln(5) / ln(100) = 0.349
    stats = Statistics(1000, {"open": 200, "k28": 2})
    out = discount_common_labels(hits, stats, rare_share=0.01)
    assert [h.candidate.chunk_id for h in out] == ["k28", "open"]
    assert out[1].score == pytest.approx(0.3495, abs=1e-3)
    # a rare label keeps its weight; no statistics: nothing changes
    rare = Statistics(1000, {"open": 5})
    assert [h.score for h in discount_common_labels(hits, rare, rare_share=0.01)] == [1.0, 0.9]
    assert [h.score for h in discount_common_labels(hits, Statistics(), rare_share=0.01)] == [1.0, 0.9]


async def test_the_dense_feature_keeps_a_paraphrase_closer_in_meaning_above_literal_overlap() -> None:
    analysis = analyze_query("how do I see how much room is left on my drive")
    near = cand("near", "f1", "Return disk usage statistics about the given path: total, used and free")
    literal = cand("literal", "f2", "how much room is left: the drive letter on my left")
    items = [
        Fused(literal, 1.0, ("lexical", "vector"), {"lexical": 1, "vector": 2}, dense=0.30),
        Fused(near, 0.9, ("vector",), {"vector": 1}, dense=0.62),
    ]
    without = FeatureReranker(V2Settings().rerank.features.model_copy(update={"dense": 0.0}))
    with_dense = FeatureReranker(V2Settings().rerank.features.model_copy(update={"dense": 8.0}))
    assert without.score_all(analysis, items)[0] > without.score_all(analysis, items)[1]
    # dense: literal 0 (the window's lowest), near 1 (its best)
    assert with_dense.features(analysis, items)[1]["dense"] == 1.0
    assert with_dense.score_all(analysis, items)[1] > with_dense.score_all(analysis, items)[0]


def test_an_exact_hit_on_a_row_labelled_with_an_ordinary_word_weighs_less() -> None:
    from app.evidence.query.statistics import discount_word_labels

    glossary = cand("open", "g", "Open: begin using a file", kind="table_row", row_label="Open")
    german = cand("save", "g", "Speichern: die Datei sichern", kind="table_row", row_label="Speichern")
    code = cand("k28", "t", "K28 weight 14 kg", kind="table_row", row_label="K28")
    name = cand("unpaper", "t", "unpaper: post-processing of scans", kind="table_row", row_label="unpaper")
    heading = cand("title", "d", "Open files", kind="prose", row_label=None)
    hits = [Scored(glossary, 1.0), Scored(german, 1.0), Scored(code, 0.9), Scored(name, 0.9)]
    hits.append(Scored(heading, 0.7))
    out = discount_word_labels(hits, 0.5)
    # the two dictionary words fall behind the code and the name no dictionary knows; prose untouched
    assert [h.candidate.chunk_id for h in out] == ["k28", "unpaper", "title", "open", "save"]
    assert [h.score for h in out] == [0.9, 0.9, 0.7, 0.5, 0.5]
    assert [h.score for h in discount_word_labels(hits, 1.0)] == [1.0, 1.0, 0.9, 0.9, 0.7]


def _row(chunk_id: str, label: str, *cells: str, file_id: str = "g", table: int = 0) -> Fused:
    content = " | ".join((label, *cells))
    candidate = cand(
        chunk_id,
        file_id,
        content,
        kind="table_row",
        row_label=label,
        row_values=(label, *cells),
        table_index=table,
    )
    return Fused(candidate, 0.9, ("exact", "lexical"), {"exact": 1, "lexical": 1})


def _prose(chunk_id: str, content: str, **fields: object) -> Fused:
    return Fused(cand(chunk_id, "m", content, **fields), 0.5, ("vector",), {"vector": 1})


def test_a_glossary_row_first_goes_behind_the_passage_that_holds_the_rest_of_the_question() -> None:
    from app.evidence.query.context_rows import glossary_rows_second

    row = _row("open", "Open", "Begin using a file")
    whole = _prose("whole", "Term | Meaning Open | Begin using a file Project | Drawings", table_index=0)
    whole = Fused(dataclasses.replace(whole.candidate, file_id="g"), 0.6, ("lexical",), {"lexical": 2})
    unrelated = _prose("print", "Print a drawing with File and Print.")
    passage = _prose("recent", "On the start screen choose Recent and pick the project.")
    items = [row, whole, unrelated, passage]
    moved = glossary_rows_second(items, analyze_query("I want to open the project from yesterday"), 12)
    # the table kept whole and a passage without "project" or "yesterday" are passed over
    assert [i.candidate.chunk_id for i in moved] == ["recent", "open", "whole", "print"]
    # 0 turns it off; nothing beside the term holds the rest: the row stays first
    assert glossary_rows_second(items, analyze_query("I want to open the project"), 0) == items
    assert glossary_rows_second(items, analyze_query("how do I open it before closing"), 12) == items
    # a passage beyond the first five places is not brought forward
    far = [row, *[_prose(f"p{i}", f"filler text {i}") for i in range(4)], passage]
    assert glossary_rows_second(far, analyze_query("open the project"), 12) == far


@pytest.mark.parametrize(
    ("question", "row"),
    [
        ("What does Open mean?", _row("open", "Open", "Begin using a file")),  # about the term
        ("Was bedeutet Speichern?", _row("save", "Speichern", "Änderungen behalten")),
        ("open the project with K28", _row("k28", "K28", "Project opener")),  # a code, not a word
        ("open the project with ctrl q", _row("q", "Ctrl Q", "Quit the project")),  # a key
        ("what voltage for the project", _row("volt", "Voltage", "230 V")),  # a value row
        ("open the project", _row("long", "Open", *["word"] * 13)),  # more than 12 other words
        ("open the project with statistics.mean", _row("mean", "mean", "Arithmetic mean")),  # a name
    ],
)
def test_a_row_that_is_no_glossary_entry_or_a_question_about_its_term_stays_first(
    question: str, row: Fused
) -> None:
    from app.evidence.query.context_rows import glossary_rows_second

    items = [row, _prose("recent", "Open the project: choose Recent, then quit, 230 V, K28, statistics.mean")]
    assert glossary_rows_second(items, analyze_query(question), 12) == items
