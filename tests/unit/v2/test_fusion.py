"""Reciprocal rank fusion, exact boost, de-duplication, caps and the minimum evidence score."""

from __future__ import annotations

import random

import pytest

from app.evidence.query.fusion import apply_caps, dedupe, fuse, normalized_prefix
from app.evidence.query.records import Fused, Scored
from app.evidence.settings import FusionSettings
from app.text.normalize import normalize
from tests.unit.v2.helpers import cand, fused

A, B, C = cand("A"), cand("B", "f2"), cand("C", "f3")


def test_rrf_arithmetic_with_the_exact_boost() -> None:
    # the shipped defaults: k = 20, weights exact 1, lexical 2, vector 1, boost 1.
    # exact: [A (weight 1.0)]; lexical: [B, A]; vector: [A, C]
    # A: 1/21 (exact) + 2/22 (lexical 2nd) + 1/21 (vector 1st) + boost 1 * 1.0 / 21 = 3/21 + 2/22
    # B: 2/21; C: 1/22. Best possible: every channel first (4/21) + full boost (1/21) = 5/21.
    channels = {
        "exact": [Scored(A, 1.0)],
        "lexical": [Scored(B, 9.1), Scored(A, 7.0)],
        "vector": [Scored(A, 0.8), Scored(C, 0.7)],
    }
    out = fuse(channels, FusionSettings(per_file_cap=10, per_page_cap=10))
    assert [f.candidate.chunk_id for f in out] == ["A", "B", "C"]
    a, b, c = out
    assert a.score == pytest.approx((3 / 21 + 2 / 22) / (5 / 21))
    assert b.score == pytest.approx((2 / 21) / (5 / 21))
    assert c.score == pytest.approx((1 / 22) / (5 / 21))
    # before reranking, the score an item is judged by is the fused one
    assert (a.final_score, a.rerank) == (a.score, None)
    assert a.channels == ("exact", "lexical", "vector")
    assert dict(a.ranks) == {"exact": 1, "lexical": 2, "vector": 1}
    assert (a.exact, b.exact) == (1.0, 0.0)
    assert b.channels == ("lexical",) and c.channels == ("vector",)


def test_weights_k_and_partial_exact_weight() -> None:
    # k = 10, vector weight 2, exact boost 2 with exact weight 0.5:
    # A: exact 1/11 + vector 2/11 + boost 2 * 0.5 / 11 = 4/11; lexical found nothing and is left out
    # of the best possible: exact 1/11 + vector 2/11 + full boost 2/11 = 5/11 -> score 0.8
    config = FusionSettings(rrf_k=10, weights={"exact": 1.0, "lexical": 1.0, "vector": 2.0}, exact_boost=2.0)
    out = fuse({"exact": [Scored(A, 0.5)], "lexical": [], "vector": [Scored(A, 0.9)]}, config)
    assert out[0].score == pytest.approx((4 / 11) / (5 / 11))


def test_only_channels_that_answered_set_the_best_possible_score() -> None:
    # shipped weights (lexical 2, vector 1, k 20): lexical and vector both rank A first, exact ran
    # but found nothing: 3/21 of a best 3/21 -> 1
    out = fuse({"exact": [], "lexical": [Scored(A)], "vector": [Scored(A)]})
    assert out[0].score == pytest.approx(1.0)
    # each first in one of the two answering channels: (2/21) / (3/21) and (1/21) / (3/21)
    out = fuse({"lexical": [Scored(A)], "vector": [Scored(B)]})
    assert [f.score for f in out] == pytest.approx([2 / 3, 1 / 3])


def test_a_chunk_votes_once_per_channel_at_its_best_rank() -> None:
    out = fuse({"lexical": [Scored(A), Scored(A), Scored(B, 0)]})
    # A at rank 1, B at rank 2 (the repeated A does not take a rank)
    assert [(f.candidate.chunk_id, dict(f.ranks)) for f in out] == [
        ("A", {"lexical": 1}),
        ("B", {"lexical": 2}),
    ]


def test_ties_are_deterministic() -> None:
    # B and C both rank 1 in one channel each, the channels weighing the same: equal score, equal
    # best rank -> by id
    equal = FusionSettings(weights={"exact": 1.0, "lexical": 1.0, "vector": 1.0})
    out = fuse({"lexical": [Scored(C)], "vector": [Scored(B)]}, equal)
    assert [f.candidate.chunk_id for f in out] == ["B", "C"]


def test_same_location_collapses_and_keeps_provenance() -> None:
    # two chunk ids, same file, page, section and content: one piece of evidence found by both channels
    one = cand("x1", "f1", "Torque: 12 Nm", page=3, section=("Specs",))
    two = cand("x2", "f1", "Torque: 12 Nm", page=3, section=("Specs",))
    other_page = cand("x3", "f1", "Torque: 12 Nm", page=4, section=("Specs",))
    out = fuse({"lexical": [Scored(one), Scored(other_page)], "vector": [Scored(two)]})
    assert [f.candidate.chunk_id for f in out] == ["x1", "x3"]
    assert out[0].channels == ("lexical", "vector")
    assert dict(out[0].ranks) == {"lexical": 1, "vector": 1}


def _dedupe_by_whole_key(items: list[Fused], chars: int) -> list[tuple[str, tuple[str, ...], dict[str, int]]]:
    """The definition: one item per (place, normalised start of the text), the first in order kept."""
    kept: dict[tuple[object, ...], tuple[str, set[str], dict[str, int]]] = {}
    for item in items:
        c = item.candidate
        key = (c.file_id, c.place.page, c.place.section, normalize(c.content)[:chars])
        _, channels, ranks = kept.setdefault(key, (c.chunk_id, set(), {}))
        channels.update(item.channels)
        for channel, rank in item.ranks.items():
            ranks[channel] = min(rank, ranks.get(channel, rank))
    return [(chunk, tuple(sorted(ch)), ranks) for chunk, ch, ranks in kept.values()]


@pytest.mark.parametrize("seed", range(40))
def test_dedupe_keeps_one_item_per_place_and_text_start(seed: int) -> None:
    # few places and texts that differ only after the compared start, in case or punctuation, so that
    # items share a place with and without the same text start, in every order
    rng = random.Random(seed)
    texts = ["Torque: 12 Nm.", "torque 12 nm", "Torque: 12 Nm, then 14", "Pressure 3 bar", "PRESSURE, 3 bar!"]
    items = [
        Fused(
            candidate=cand(
                f"c{n}",
                rng.choice(["f1", "f2"]),
                rng.choice(texts),
                page=rng.choice([1, 2]),
                section=rng.choice([("A",), ("B",)]),
            ),
            score=1.0 - n / 100,
            channels=(channel := rng.choice(["lexical", "vector", "exact"]),),
            ranks={channel: rng.randint(1, 9)},
        )
        for n in range(rng.randint(1, 24))
    ]
    out = dedupe(items, 12)
    got = [(i.candidate.chunk_id, tuple(sorted(i.channels)), dict(i.ranks)) for i in out]
    assert got == _dedupe_by_whole_key(items, 12)


def test_minimum_evidence_score() -> None:
    # one channel, k = 20: rank 1 -> (1/21)/(1/21) = 1.0; rank 2 -> 21/22 = 0.9545; rank 3 -> 21/23 = 0.9130
    hits = [Scored(cand(f"c{i}", f"f{i}")) for i in range(3)]
    out = fuse({"vector": hits}, FusionSettings(min_score=0.95))
    assert [f.candidate.chunk_id for f in out] == ["c0", "c1"]


def test_caps_demote_a_long_document_but_never_drop() -> None:
    # f1 holds the five best items, f2 two weaker ones; per-file cap 3 -> f1, f1, f1, f2, f2, f1, f1
    items = [fused(cand(f"a{i}", "f1", page=i + 1), 0.9 - i * 0.01) for i in range(5)]
    items += [fused(cand(f"b{i}", "f2", page=1), 0.5 - i * 0.01) for i in range(2)]
    out = apply_caps(items, per_file=3, per_page=2)
    assert [f.candidate.file_id for f in out] == ["f1", "f1", "f1", "f2", "f2", "f1", "f1"]
    assert sorted(f.candidate.chunk_id for f in out) == sorted(f.candidate.chunk_id for f in items)


def test_page_cap() -> None:
    # three items on page 7 of f1, cap 2 per page -> the third goes behind the f2 item
    items = [fused(cand(f"p{i}", "f1", page=7), 0.9 - i * 0.1) for i in range(3)]
    items.append(fused(cand("q", "f2", page=1), 0.1))
    out = apply_caps(items, per_file=10, per_page=2)
    assert [f.candidate.chunk_id for f in out] == ["p0", "p1", "q", "p2"]
    # items without a page are only held to the file cap
    no_page = [fused(cand(f"n{i}", "f1"), 0.5) for i in range(3)]
    assert [f.candidate.chunk_id for f in apply_caps(no_page, 10, 1)] == ["n0", "n1", "n2"]


def test_fuse_applies_the_caps() -> None:
    lexical = [Scored(cand(f"a{i}", "f1", page=i)) for i in range(4)] + [Scored(cand("b", "f2"))]
    out = fuse({"lexical": lexical}, FusionSettings(per_file_cap=2))
    assert [f.candidate.chunk_id for f in out][:3] == ["a0", "a1", "b"]


@pytest.mark.parametrize("chars", [1, 5, 40, 160])
def test_the_normalised_prefix_equals_normalising_it_all(chars: int) -> None:
    # spaces of several kinds, punctuation runs, decimals, marks, ß and full-width forms around cuts
    pieces = [
        "Pump",
        "K-28",
        "1,5",
        "bar",
        "...",
        "STRASSE",
        "straße",
        "ＡＢＣ",
        "e\u0301te",
        "--",
        "10mm",
        "%",
    ]
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(
            rng.choice(pieces) + rng.choice([" ", "  ", "\u00a0", "\t", " , ", ""]) for _ in range(60)
        )
        assert normalized_prefix(text, chars) == normalize(text)[:chars], text
    assert normalized_prefix("", chars) == "" and normalized_prefix("short", chars) == "short"[:chars]


def test_convex_fusion_keeps_how_far_ahead_a_channel_is() -> None:
    # vector is sure of C (0.9 against 0.3 and 0.29); lexical barely prefers B to A (10.0, 9.9, 1.0)
    # and finds A, B. Scaled over each list: vector C 1, A 0.0167, B 0; lexical B 1, A 0.989, C -.
    # convex, weights lexical 1 vector 1: C 1.0, B 1.0, A ~1.005 -> A first, C beside B;
    # with vector 2 (a paraphrase leans on meaning) C 2.0 beats A 1.022: the sure channel wins,
    # where reciprocal ranks (k 20) put A first: 1/22 + 2/22 against C's 2/21
    lexical = [Scored(B, 10.0), Scored(A, 9.9), Scored(cand("D", "f4"), 1.0)]
    vector = [Scored(C, 0.9), Scored(A, 0.3), Scored(B, 0.29)]
    lists = {"lexical": lexical, "vector": vector}
    sure = FusionSettings(method="convex", weights={"exact": 1, "lexical": 1, "vector": 2}, per_file_cap=9)
    assert fuse(lists, sure)[0].candidate.chunk_id == "C"
    ranks = FusionSettings(weights={"exact": 1, "lexical": 1, "vector": 2}, per_file_cap=9)
    assert fuse(lists, ranks)[0].candidate.chunk_id != "C"
    out = fuse(lists, sure)
    # scores: best possible is 1 + 2 = 3; C 2/3; the last of each list adds nothing
    assert out[0].score == pytest.approx(2 / 3)
    d = next(f for f in out if f.candidate.chunk_id == "D")
    assert d.score == 0.0 and d.ranks == {"lexical": 3}


def test_convex_fusion_counts_an_exact_match_by_its_weight() -> None:
    # exact weight 1 + boost 1 on A's match weight 0.5 -> 1.0; lexical (weight 2) ranks B 1 and A 0
    # best possible: lexical 2 + exact 1 + boost 1 = 4
    config = FusionSettings(method="convex", per_file_cap=9)
    out = fuse({"exact": [Scored(A, 0.5)], "lexical": [Scored(B, 5.0), Scored(A, 1.0)]}, config)
    assert [f.candidate.chunk_id for f in out] == ["B", "A"]
    assert [f.score for f in out] == pytest.approx([2 / 4, 1 / 4])
    # one hit alone in its channel is that channel's best
    alone = fuse({"vector": [Scored(C, 0.2)]}, config)
    assert alone[0].score == pytest.approx(1.0)


def test_a_file_both_channels_found_through_different_chunks_gains_with_file_weight() -> None:
    # lexical ranks A1 (file f1) then B (f2); vector ranks C (f3) then B2 (f2): both channels found
    # f2, never through one chunk, so reciprocal ranks alone put A1 and C first
    a1, b, b2, c = cand("A1", "f1"), cand("B", "f2"), cand("B2", "f2"), cand("C", "f3")
    lists = {"lexical": [Scored(a1, 3.0), Scored(b, 2.0)], "vector": [Scored(c, 0.9), Scored(b2, 0.8)]}
    plain = FusionSettings(weights={"exact": 1, "lexical": 1, "vector": 1}, per_file_cap=9, per_page_cap=9)
    assert [f.candidate.chunk_id for f in fuse(lists, plain)][:2] == ["A1", "C"]
    out = fuse(lists, plain.model_copy(update={"file_weight": 1.0}))
    # f2 is the 2nd file of both channels: B = 1/22 + (1/22 + 1/22) = 3/22 (B2 the same, behind by
    # id) beats A1 = 1/21 + 1/21 (f1 first in lexical only) and C likewise; the best possible
    # doubles to (1 + 1) / 21 * 2
    assert [f.candidate.chunk_id for f in out][:2] == ["B", "B2"]
    assert out[0].score == pytest.approx((3 / 22) / (4 / 21))


def _ranked(chunk_id: str, **ranks: int) -> Fused:
    return Fused(cand(chunk_id, f"f-{chunk_id}"), 0.5, tuple(ranks), dict(ranks))


def test_each_channels_first_hit_is_kept_within_the_first_places() -> None:
    from app.evidence.query.fusion import keep_channel_firsts

    items = [_ranked(f"x{i}", exact=i + 1, lexical=i + 2) for i in range(5)]
    dense_first = _ranked("dense", vector=1)
    lexical_first = _ranked("lexical", lexical=1)
    window = [*items, dense_first]  # the vector channel's first sank to place 6 after reranking
    out = keep_channel_firsts(window, window, 3)
    assert [i.candidate.chunk_id for i in out] == ["x0", "x1", "dense", "x2", "x3", "x4"]
    # a first hit the window left out comes from the whole fused list; the lexical one too
    out = keep_channel_firsts(items, [*items, dense_first, lexical_first], 3)
    assert [i.candidate.chunk_id for i in out] == ["x0", "x1", "lexical", "dense", "x2", "x3", "x4"]
    # already within the places, a channel that found nothing, and 0: nothing moves
    assert keep_channel_firsts([dense_first, *items], [dense_first, *items], 3) == [dense_first, *items]
    assert keep_channel_firsts(items, items, 3) == items
    assert keep_channel_firsts(window, window, 0) == window
    # the exact channel's first is not kept (a label or title match is weighed elsewhere)
    exact_first = _ranked("title", exact=1)
    tail = [*[_ranked(f"y{i}", vector=i + 2) for i in range(4)], exact_first]
    assert keep_channel_firsts(tail, tail, 2) == tail
