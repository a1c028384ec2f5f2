"""A result's passage widened by the text around its chunk: find small, show enough to answer.

V2 ranks chunks of ~256 tokens so that a hit is precise, but the sentence that answers a question
often stands just before or after the sentence that matched it. A result's `content` is therefore its
chunk together with the neighbouring chunks of the same section and page (the page a citation names
stays true), read nearest first, alternately before and after, until `context_chars`; the overlap the
chunker repeats between neighbours is shown once. A table row, and any neighbour that is itself a
result of the same answer, is left as it is (the reader sees each passage once).

    neighbour_keys(items, k, reach)     the (document_id, ordinal) keys to read, in the caller's scope
    widen(items, k, neighbours, ...)    the items with their content widened (pure)
    widen_results(items, k, policy, read)   both, with the store read the service passes in
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from app.evidence.query.records import Fused
from app.evidence.settings import EvidenceSettings
from app.search.context import overlap_length
from app.store.scope import ScopeError
from app.text.chunk_records import ChunkPlace

logger = logging.getLogger(__name__)

Key = tuple[int, int]
# the chunker's overlap is 32 tokens: never more than this many characters
MAX_OVERLAP_CHARS = 600


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A chunk next to a result's: its text and place (as the scope let the store read it)."""

    content: str
    place: ChunkPlace


def _widenable(item: Fused) -> bool:
    c = item.candidate
    return c.place.kind == "prose" and c.document_id is not None and c.ordinal is not None


def neighbour_keys(items: Sequence[Fused], k: int, reach: int) -> list[Key]:
    """The keys of the chunks up to `reach` places before and after each of the first k prose items."""
    keys: dict[Key, None] = {}
    for item in items[:k]:
        if not _widenable(item):
            continue
        document_id, ordinal = item.candidate.document_id, item.candidate.ordinal
        assert document_id is not None and ordinal is not None  # _widenable
        for step in range(1, reach + 1):
            for near in (ordinal - step, ordinal + step):
                if near >= 0:
                    keys[(document_id, near)] = None
    return list(keys)


def widen(
    items: Sequence[Fused], k: int, neighbours: Mapping[Key, Neighbour], *, context_chars: int, reach: int
) -> list[Fused]:
    """The items, each of the first k prose ones with its neighbours' text around its own (see above)."""
    shown = {(i.candidate.document_id, i.candidate.ordinal) for i in items[:k]}
    out: list[Fused] = []
    for n, item in enumerate(items):
        if n < k and _widenable(item):
            item = _widened(item, neighbours, shown, context_chars, reach)
        out.append(item)
    return out


def _widened(
    item: Fused,
    neighbours: Mapping[Key, Neighbour],
    shown: set[tuple[int | None, int | None]],
    context_chars: int,
    reach: int,
) -> Fused:
    c = item.candidate
    assert c.document_id is not None and c.ordinal is not None  # _widenable
    sides = {
        side: _side(c.content, c.document_id, c.ordinal, side, neighbours, shown, c.place, reach)
        for side in (-1, 1)
    }
    room = context_chars - len(c.content)
    taken: dict[int, list[_Piece]] = {-1: [], 1: []}
    # whole chunks first, nearest first, alternately before and after
    progressed = True
    while progressed:
        progressed = False
        for side in (-1, 1):
            pending = sides[side][len(taken[side]) :]
            if pending and len(pending[0].text) <= room:
                taken[side].append(pending[0])
                room -= len(pending[0].text)
                progressed = True
    # then what room is left, shared by the sides with more text: the part nearest the chunk
    open_sides = [side for side in (-1, 1) if len(sides[side]) > len(taken[side])]
    for side in open_sides:
        share = room // len(open_sides)
        piece = sides[side][len(taken[side])]
        part = _cut(piece.text, share, keep_end=side < 0)
        if part:
            taken[side].append(dataclasses.replace(piece, text=part))
    if not taken[-1] and not taken[1]:
        return item
    text = _joined(list(reversed(taken[-1])), c.content, taken[1])
    return dataclasses.replace(item, candidate=dataclasses.replace(c, content=text))


@dataclass(frozen=True, slots=True)
class _Piece:
    """A neighbour's text with the chunker's overlap removed; `joined`: it runs on into the text
    nearer the chunk (an overlap was found and removed), else a line break stands between them. A
    part keeps the end (before the chunk) or the start (after it) that touches that text."""

    text: str
    joined: bool


def _side(
    own: str,
    document_id: int,
    ordinal: int,
    side: int,
    neighbours: Mapping[Key, Neighbour],
    shown: set[tuple[int | None, int | None]],
    place: ChunkPlace,
    reach: int,
) -> list[_Piece]:
    """The neighbours on one side, nearest first, up to the first one the passage may not take."""
    out: list[_Piece] = []
    inner = own
    for step in range(1, reach + 1):
        key = (document_id, ordinal + side * step)
        near = neighbours.get(key)
        # the passage stops at the first chunk it may not take: no gaps inside a passage
        if near is None or key in shown or not _same_place(near.place, place):
            break
        if side < 0:
            cut = overlap_length(near.content, inner, MAX_OVERLAP_CHARS)
            text = near.content[: len(near.content) - cut]
        else:
            cut = overlap_length(inner, near.content, MAX_OVERLAP_CHARS)
            text = near.content[cut:]
        out.append(_Piece(text, joined=cut > 0))
        inner = near.content
    return out


def _same_place(near: ChunkPlace, own: ChunkPlace) -> bool:
    """Prose of the same section on the same page (so the result's page and section stay true)."""
    return near.kind == "prose" and near.section == own.section and near.page == own.page


# a part shorter than this says too little to be worth its ellipsis
MIN_PART_CHARS = 80
_SENTENCE_END = re.compile(r"[.!?:;](?=\s)|\n")


def _cut(text: str, room: int, *, keep_end: bool) -> str:
    """At most `room` characters of `text` from its end (`keep_end`) or start, cut at a sentence
    boundary when one is near, else at a space, marked with an ellipsis; "" when too little fits."""
    room -= 2  # the ellipsis and its space
    if room < MIN_PART_CHARS:
        return ""
    if keep_end:
        part = text[-room:]
        ends = [m.end() for m in _SENTENCE_END.finditer(part) if m.end() < len(part) * 0.6]
        start = ends[0] if ends else max(part.find(" "), 0)
        part = part[start:].lstrip()
        return f"\u2026 {part}" if len(part) >= MIN_PART_CHARS else ""
    part = text[:room]
    ends = [m.end() for m in _SENTENCE_END.finditer(part) if m.end() > len(part) * 0.4]
    stop = ends[-1] if ends else (part.rfind(" ") if " " in part else len(part))
    part = part[:stop].rstrip()
    return f"{part} \u2026" if len(part) >= MIN_PART_CHARS else ""


def _joined(before: Sequence[_Piece], own: str, after: Sequence[_Piece]) -> str:
    """The text in reading order (`before` farthest first): a piece runs on where the chunker's
    overlap showed it continues its neighbour, else a line break stands between them."""
    out = "".join(piece.text + ("" if piece.joined else "\n") for piece in before) + own
    return out + "".join(("" if piece.joined else "\n") + piece.text for piece in after)


async def widen_results(
    items: Sequence[Fused],
    k: int,
    policy: EvidenceSettings,
    read: Callable[[list[Key], list[str]], Awaitable[Mapping[Key, tuple[str, ChunkPlace]]]],
) -> tuple[list[Fused], float]:
    """`widen` with the neighbours `read` returns (key -> text and place, read in the caller's scope
    narrowed to the results' files, which it is also given), and the milliseconds it took; on a
    failed read the items as they are (they answer without it)."""
    if policy.context_chars <= 0:
        return list(items), 0.0
    keys = neighbour_keys(items, k, policy.context_reach)
    if not keys:
        return list(items), 0.0
    t0 = time.perf_counter()
    try:
        found = await read(keys, list(dict.fromkeys(item.candidate.file_id for item in items[:k])))
    except ScopeError:
        raise  # a programming error, not a failed read
    except Exception as exc:  # a timeout or a lost connection: the ranked chunks still answer
        logger.warning("V2 passages: reading the neighbouring chunks failed (%s)", exc.__class__.__name__)
        return list(items), (time.perf_counter() - t0) * 1000
    neighbours = {key: Neighbour(text, place) for key, (text, place) in found.items()}
    widened = widen(items, k, neighbours, context_chars=policy.context_chars, reach=policy.context_reach)
    return widened, (time.perf_counter() - t0) * 1000
