"""A result's passage widened by its neighbouring chunks (app/evidence/query/passages.py), no database."""

from __future__ import annotations

import dataclasses

import pytest

from app.evidence.query.passages import Neighbour, neighbour_keys, widen, widen_results
from app.evidence.settings import EvidenceSettings
from app.store.scope import ScopeError
from app.text.chunk_records import ChunkPlace
from tests.unit.v2.helpers import cand, fused

PLACE = ChunkPlace(kind="prose", page=3, section=("Install", "Options"))


def item(document_id: int, ordinal: int, content: str, **fields: object) -> object:
    c = dataclasses.replace(
        cand(f"c{ordinal}", content=content, **fields), document_id=document_id, ordinal=ordinal
    )
    return fused(c, 0.5)


def near(content: str, place: ChunkPlace = PLACE) -> Neighbour:
    return Neighbour(content, place)


def test_the_keys_are_the_neighbours_of_the_first_k_prose_results() -> None:
    items = [
        item(1, 5, "a", page=3, section=("Install", "Options")),
        item(2, 0, "row", kind="table_row"),
        item(3, 9, "b"),
    ]
    assert neighbour_keys(items, 2, reach=2) == [(1, 4), (1, 6), (1, 3), (1, 7)]
    assert (3, 8) in neighbour_keys(items, 3, reach=1)
    # ordinal 0 has no chunk before it
    assert neighbour_keys([item(4, 0, "x")], 1, reach=1) == [(4, 1)]


def test_a_chunk_grows_by_its_neighbours_nearest_first_with_the_overlap_shown_once() -> None:
    hit = item(1, 5, "the option --fast skips the check.", page=3, section=("Install", "Options"))
    neighbours = {
        (1, 4): near("Options change the install. the option --fast"),  # overlaps the hit's start
        (1, 6): near("It was added in release 2."),
        (1, 3): near("x" * 500),
    }
    [out] = widen([hit], 1, neighbours, context_chars=150, reach=2)  # no room left for (1, 3)
    assert out.candidate.content == (
        "Options change the install. the option --fast skips the check.\nIt was added in release 2."
    )
    # the rest of the item is the same: ranking, place, ids
    assert out.candidate.place == hit.candidate.place and out.score == hit.score
    assert out.candidate.chunk_id == hit.candidate.chunk_id


def test_the_room_left_takes_the_text_nearest_the_chunk_cut_at_a_sentence() -> None:
    hit = item(
        1, 5, "The valve of stage 3 is replaced every 2000 hours.", page=3, section=("Install", "Options")
    )
    before = " ".join(f"Earlier sentence number {n} about the pump housing." for n in range(12))
    after = " ".join(f"Later sentence number {n} about the pump housing." for n in range(12))
    [out] = widen([hit], 1, {(1, 4): near(before), (1, 6): near(after)}, context_chars=400, reach=1)
    text = out.candidate.content
    assert len(text) <= 400 and hit.candidate.content in text
    head, tail = text.split(hit.candidate.content)
    # the end of the text before, from a sentence's start; the start of the text after, to a sentence's end
    assert head.startswith("\u2026 Earlier sentence number") and head.endswith(
        "number 11 about the pump housing.\n"
    )
    assert tail.startswith("\nLater sentence number 0 ") and tail.endswith("housing. \u2026")
    # too little room for a useful part: nothing
    assert widen(
        [hit], 1, {(1, 4): near(before)}, context_chars=len(hit.candidate.content) + 60, reach=1
    ) == [hit]


def test_a_passage_stays_within_its_section_page_and_budget_and_shows_no_other_result_twice() -> None:
    hit = item(1, 5, "hit text", page=3, section=("Install", "Options"))
    other_section = ChunkPlace(kind="prose", page=3, section=("Remove",))
    other_page = ChunkPlace(kind="prose", page=4, section=("Install", "Options"))
    assert widen([hit], 1, {(1, 4): near("before", other_section)}, context_chars=999, reach=1) == [hit]
    assert widen([hit], 1, {(1, 6): near("after", other_page)}, context_chars=999, reach=1) == [hit]
    assert widen([hit], 1, {(1, 6): near("a" * 100)}, context_chars=50, reach=1) == [hit]
    # a neighbour that is itself a result is shown as that result, not twice
    second = item(1, 6, "second result", page=3, section=("Install", "Options"))
    out = widen(
        [hit, second], 2, {(1, 6): near("second result"), (1, 7): near("more")}, context_chars=999, reach=2
    )
    assert out[0].candidate.content == "hit text"
    assert out[1].candidate.content == "second result\nmore"
    # a gap stops the passage: nothing beyond a chunk it may not take
    gap = {(1, 6): near("x", other_section), (1, 7): near("far")}
    assert widen([hit], 1, gap, context_chars=999, reach=2) == [hit]


def test_rows_and_items_past_k_are_left_alone() -> None:
    row = item(1, 5, "K 28 | 12 mm", kind="table_row")
    later = item(2, 5, "later")
    neighbours = {(1, 4): near("x"), (2, 4): near("y")}
    assert widen([row, later], 1, neighbours, context_chars=999, reach=1) == [row, later]


async def test_widen_results_reads_only_when_on_and_answers_without_a_failed_read() -> None:
    hit = item(1, 5, "hit", page=3, section=("Install", "Options"))
    asked: list[list[tuple[int, int]]] = []

    async def read(keys: list[tuple[int, int]], files: list[str]) -> dict[object, object]:
        asked.append(keys)
        raise TimeoutError

    off = EvidenceSettings(context_chars=0)
    assert await widen_results([hit], 1, off, read) == ([hit], 0.0)
    assert asked == []
    items, _ = await widen_results([hit], 1, EvidenceSettings(context_chars=500, context_reach=1), read)
    assert items == [hit] and asked == [[(1, 4), (1, 6)]]

    async def misuse(keys: list[tuple[int, int]], files: list[str]) -> dict[object, object]:
        raise ScopeError("an any-owner scope is for deletes only")

    with pytest.raises(ScopeError):
        await widen_results([hit], 1, EvidenceSettings(context_chars=500), misuse)
