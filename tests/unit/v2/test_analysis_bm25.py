"""Query analysis and the BM25 reference."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from app.evidence.query import bm25
from app.evidence.query.analysis import (
    CITATION_REQUEST,
    DOCUMENT_LOOKUP,
    TABLE_LOOKUP,
    QueryConfig,
    analyze_query,
)


def test_terms_drop_english_and_german_stopwords() -> None:
    assert analyze_query("What is the length of the cable?").terms == ("length", "cable")
    assert analyze_query("Wie lang ist das Kabel für die Maschine?").terms == ("lang", "kabel", "maschine")
    # order kept, duplicates once
    assert analyze_query("cable cable length").terms == ("cable", "length")


def test_entities_phrases_and_normalisation() -> None:
    q = analyze_query('Max length of K 28 per DIN EN ISO 13849-1 at 1,5 mm? "B-DETECTION_PLUS mode"')
    assert [e.normalized for e in q.identifiers] == ["k 28", "b detection plus"]
    assert [e.normalized for e in q.standards] == ["din en iso 13849 1"]
    assert [(e.value, e.unit) for e in q.quantities] == [(1.5, "mm")]
    assert q.phrases == ("b detection plus mode",)
    assert q.exact_keys == ("k 28", "b detection plus", "din en iso 13849 1")
    assert q.normalized.startswith("max length of k 28 per din en iso 13849 1 at 1.5 mm")


@pytest.mark.parametrize(
    ("text", "intents"),
    [
        ("Which value has the rated current in the table?", {TABLE_LOOKUP}),
        ("Wie viele Zeilen hat die Tabelle?", {TABLE_LOOKUP}),
        ("Which manual covers installation?", {DOCUMENT_LOOKUP}),
        ("Quote the source and page for the warranty", {CITATION_REQUEST}),
        ("Wo steht das in der Anleitung?", {CITATION_REQUEST, DOCUMENT_LOOKUP}),
        ("Is ISO 9001 covered?", {DOCUMENT_LOOKUP}),  # a standard names documents
        ("How do I reset the device?", set()),
    ],
)
def test_intents(text: str, intents: set[str]) -> None:
    assert analyze_query(text).intents == intents


def test_intent_triggers_are_configurable() -> None:
    config = QueryConfig(intent_triggers={TABLE_LOOKUP: ("spec sheet",)})
    assert analyze_query("the spec sheet of K 28", config).intents == {TABLE_LOOKUP}
    assert analyze_query("the table of K 28", config).intents == set()


def test_hostile_query_text() -> None:
    q = analyze_query("K\x0028 \udc80 ﬁle")
    assert q.tokens == ("k", "28", "file")


# The three-document corpus of the hand computation below.
CORPUS = {
    "d1": "the cat sat".split(),  # 3 tokens
    "d2": "the dog sat on the mat".split(),  # 6 tokens
    "d3": "cat cat dog".split(),  # 3 tokens
}


def test_bm25_equals_a_hand_computation_on_three_documents() -> None:
    # N = 3, avgdl = (3 + 6 + 3) / 3 = 4; k1 = 1.2, b = 0.75.
    # df(cat) = 2 (d1, d3), df(dog) = 2 (d2, d3): idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    # length norm: |d| = 3 -> 1.2 * (0.25 + 0.75 * 3/4) = 0.975;  |d| = 6 -> 1.2 * (0.25 + 0.75 * 6/4) = 1.65
    # d1: cat tf 1 -> ln1.6 * 1 * 2.2 / (1 + 0.975)                                  = 0.523548
    # d2: dog tf 1 -> ln1.6 * 1 * 2.2 / (1 + 1.65)                                   = 0.390192
    # d3: cat tf 2 -> ln1.6 * 2 * 2.2 / (2 + 0.975) + dog tf 1 -> ln1.6 * 2.2 / 1.975 = 1.218680
    idf = math.log(1.6)
    expected = {
        "d1": idf * 2.2 / 1.975,
        "d2": idf * 2.2 / 2.65,
        "d3": idf * 4.4 / 2.975 + idf * 2.2 / 1.975,
    }
    assert expected["d3"] == pytest.approx(1.218680, abs=1e-6)
    ranked = bm25.rank(["cat", "dog"], CORPUS)
    assert [doc for doc, _ in ranked] == ["d3", "d1", "d2"]
    for doc, value in ranked:
        assert value == pytest.approx(expected[doc], rel=1e-12)


def test_bm25_parameters_and_repeated_query_terms() -> None:
    stats = bm25.corpus_stats(CORPUS.values())
    assert (stats.documents, stats.average_length, stats.document_frequency["the"]) == (3, 4.0, 2)
    tf = Counter(CORPUS["d3"])
    # b = 0: no length normalisation; cat tf 2 -> ln1.6 * 2 * 2.2 / (2 + 1.2)
    assert bm25.score(["cat"], tf, 3, stats, b=0.0) == pytest.approx(math.log(1.6) * 4.4 / 3.2)
    # k1 = 0: term frequency saturates at once; each matching term adds its idf
    assert bm25.score(["cat", "dog"], tf, 3, stats, k1=0.0) == pytest.approx(2 * math.log(1.6))
    # a term repeated in the query counts once
    assert bm25.score(["cat", "cat"], tf, 3, stats) == bm25.score(["cat"], tf, 3, stats)
    assert bm25.score(["bird"], tf, 3, stats) == 0.0
    assert bm25.rank(["bird"], CORPUS) == []


def test_idf_is_never_negative() -> None:
    # a term in all 3 documents: ln(1 + 0.5 / 3.5) = ln(8/7) > 0
    assert bm25.idf(3, 3) == pytest.approx(math.log(8 / 7))
    # an unseen term: ln(1 + 3.5 / 0.5) = ln 8, the highest weight
    assert bm25.idf(3, 0) == pytest.approx(math.log(1 + 3.5 / 0.5))


def test_qualified_names_also_count_in_their_shortened_forms() -> None:
    from app.evidence.query.analysis import name_variants

    query = analyze_query("pathlib.PurePath.as_uri")
    [name] = query.identifiers
    assert name_variants(name) == ("pathlib purepath as uri", "purepath as uri", "as uri")
    # the exact channel looks up tails of two parts: "as uri" alone would hit any "as_uri"
    assert query.exact_keys == ("pathlib purepath as uri", "purepath as uri")
    # a last part stands alone only when distinctive
    [plain] = analyze_query("collections.OrderedDict.get").identifiers
    assert name_variants(plain) == ("collections ordereddict get", "ordereddict get")
    [short] = analyze_query("os.getcwd").identifiers
    assert name_variants(short) == ("os getcwd",)


def test_command_line_options_are_names() -> None:
    query = analyze_query("what does --dry-run do, and --log-http?")
    assert [(e.raw, e.normalized) for e in query.identifiers] == [
        ("--dry-run", "dry run"),
        ("--log-http", "log http"),
    ]
    assert analyze_query("a - b -- c").identifiers == ()
