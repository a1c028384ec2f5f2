"""Fusion of the exact, lexical and vector channels: reciprocal ranks, or normalised scores.

    rrf:     fused(d) = Σ_c  w_c / (k + rank_c(d))   +   exact_boost · exact(d) / (k + 1)
    convex:  fused(d) = Σ_c  w_c · norm_c(d)          +   exact_boost · exact(d)

`norm_c(d)` is d's score in channel c scaled to 0..1 over that channel's list (its best hit 1, its
last 0; the exact channel's match weight as it is). Ranks throw away how far ahead a channel's
first hit is; scores keep it, so a channel sure of one page is not outvoted by two channels that
each rank it second (`method`, chosen on the natural questions' dev split).

`rank_c(d)` is d's 1-based rank in channel c (channels that did not find d add nothing) and
`exact(d)` the exact channel's match weight in 0..1 (a row label match weighs more than a title
match; the channel decides). The boost is counted in first-place votes: `exact_boost = 1` adds as
much as one more channel ranking d first. `Fused.score = fused / best possible` puts it in 0..1, where
the best possible is every channel that returned anything ranking d first, plus the full boost.

After fusion: candidates at the same location (file, page, table, row, section and the first
characters of normalised content) collapse into the best one, which keeps every channel that
found any of them; candidates under `min_score` are dropped; then diversity caps demote (never
drop) candidates beyond `per_file_cap` per file and `per_page_cap` per page, so one long document
cannot fill the top of the list while others have evidence, and a single-file request still gets k.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from app.evidence.query.records import CHANNELS, Candidate, Fused, Scored
from app.evidence.settings import FusionSettings
from app.text.normalize import normalize


def place_key(candidate: Candidate) -> Hashable:
    """Where a candidate sits; two at the same place are the same evidence if their texts begin alike."""
    return (
        candidate.file_id,
        candidate.place.page,
        candidate.place.table_index,
        candidate.place.row_index,
        candidate.place.section,
    )


def normalized_prefix(text: str, chars: int) -> str:
    """`normalize(text)[:chars]`, normalising only as much of `text` as that needs.

    No token spans a space, and NFKC and case folding never join a character with a space before
    it, so the text before a space normalises to a token prefix of the whole: once that prefix is
    `chars` long it is the answer. Fusion keys every candidate by this; normalising whole chunks
    took most of its time.
    """
    cut = chars + chars // 4  # raw text a little longer than wanted: punctuation drops out
    while cut < len(text):
        space = text.find(" ", cut)
        if space < 0:
            break
        head = normalize(text[:space])
        if len(head) >= chars:
            return head[:chars]
        cut = space + 1 + chars
    return normalize(text)[:chars]


def fuse(channels: Mapping[str, Sequence[Scored]], config: FusionSettings | None = None) -> list[Fused]:
    """Fuse ranked channel lists into one list (see the module docstring)."""
    config = config or FusionSettings()
    convex = config.method == "convex"
    k = config.rrf_k
    totals: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    exact: dict[str, float] = {}
    dense: dict[str, float] = {}
    candidates: dict[str, Candidate] = {}
    # per file, each channel's vote for its best chunk as if the file were the item ranked
    files: dict[str, dict[str, float]] = {}
    for channel, hits in channels.items():
        weight = config.weights.of(channel)
        scale = _scale(hits) if convex and channel != "exact" else None
        rank = file_rank = 0
        seen: set[str] = set()
        for hit in hits:
            chunk = hit.candidate.chunk_id
            if chunk in seen:  # a channel votes once per chunk, at its best rank
                continue
            seen.add(chunk)
            rank += 1
            candidates.setdefault(chunk, hit.candidate)
            if convex:  # the exact channel's share is its boost below
                vote = weight * scale(hit.score) if scale else 0.0
            else:
                vote = weight / (k + rank)
            totals[chunk] = totals.get(chunk, 0.0) + vote
            if config.file_weight > 0:  # only asked for: off by default
                votes = files.setdefault(hit.candidate.file_id, {})
                if channel not in votes:
                    file_rank += 1
                    votes[channel] = vote if convex else weight / (k + file_rank)
            ranks.setdefault(chunk, {})[channel] = rank
            if channel == "exact":
                exact[chunk] = max(exact.get(chunk, 0.0), min(max(hit.score, 0.0), 1.0))
            elif channel == "vector":
                dense[chunk] = max(dense.get(chunk, -1.0), hit.score)
    # the best possible: every channel that found anything ranks it first (a channel with nothing
    # to say, such as exact for a question without names, does not deflate everyone's score)
    answered = [c for c, hits in channels.items() if hits]
    unit = 1.0 if convex else 1.0 / (k + 1)  # what a first place is worth
    voting = [c for c in answered if not (convex and c == "exact")]
    best = sum(max(config.weights.of(c), 0.0) for c in voting) * unit
    boost = config.exact_boost + (max(config.weights.of("exact"), 0.0) if convex else 0.0)
    best += boost * unit if "exact" in answered else 0.0
    values = {chunk: total + boost * exact.get(chunk, 0.0) * unit for chunk, total in totals.items()}
    if config.file_weight > 0:  # channels agreeing on a file through different chunks of it
        best += config.file_weight * sum(max(config.weights.of(c), 0.0) for c in voting) * unit
        for chunk in values:
            values[chunk] += config.file_weight * sum(files[candidates[chunk].file_id].values())
    # best fused value first; ties go to the better best rank, then the id (deterministic)
    order = sorted(values, key=lambda chunk: (-values[chunk], min(ranks[chunk].values()), chunk))
    fused = [
        Fused(
            candidate=candidates[chunk],
            score=min(values[chunk] / best, 1.0) if best > 0 else 0.0,
            channels=_provenance(ranks[chunk]),
            ranks=dict(ranks[chunk]),
            exact=exact.get(chunk, 0.0),
            dense=dense.get(chunk),
        )
        for chunk in order
    ]
    fused = dedupe(fused, config.dedupe_prefix_chars)
    fused = [item for item in fused if item.score >= config.min_score]
    return apply_caps(fused, config.per_file_cap, config.per_page_cap, config.diverse_head)


def _scale(hits: Sequence[Scored]) -> Callable[[float], float]:
    """A channel's score scaled to 0..1 over its own list: its best hit 1, its worst 0 (one hit, or
    all equal: 1)."""
    scores = [hit.score for hit in hits]
    top, floor = max(scores), min(scores)
    if top <= floor:
        return lambda score: 1.0
    return lambda score: (score - floor) / (top - floor)


def _provenance(ranks: Mapping[str, int]) -> tuple[str, ...]:
    known = [c for c in CHANNELS if c in ranks]
    return (*known, *sorted(c for c in ranks if c not in CHANNELS))


def dedupe(items: Sequence[Fused], prefix_chars: int) -> list[Fused]:
    """Keep the best item per location (its place and the normalised start of its text); it inherits
    the channels and best ranks of the others."""
    kept: list[Fused] = []
    at_place: dict[Hashable, list[int]] = {}  # place -> indexes into kept
    # a text's start is normalised only when another item shares its place: most items share none
    prefixes: dict[int, str] = {}

    def prefix(slot: int) -> str:
        if slot not in prefixes:
            prefixes[slot] = normalized_prefix(kept[slot].candidate.content, prefix_chars)
        return prefixes[slot]

    for item in items:
        slots = at_place.setdefault(place_key(item.candidate), [])
        own = normalized_prefix(item.candidate.content, prefix_chars) if slots else None
        same = next((slot for slot in slots if prefix(slot) == own), None)
        if same is None:
            if own is not None:
                prefixes[len(kept)] = own
            slots.append(len(kept))
            kept.append(item)
            continue
        first = kept[same]
        ranks = dict(first.ranks)
        for channel, rank in item.ranks.items():
            ranks[channel] = min(rank, ranks.get(channel, rank))
        kept[same] = Fused(
            candidate=first.candidate,
            score=first.score,
            channels=_provenance(ranks),
            ranks=ranks,
            exact=max(first.exact, item.exact),
            dense=_best(first.dense, item.dense),
            rerank=first.rerank,
        )
    return kept


def _best(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def apply_caps(items: Sequence[Fused], per_file: int, per_page: int, head: int = 0) -> list[Fused]:
    """The items in order, those beyond a file's or a page's cap moved behind the others.

    `head` > 0: the caps only shape the first `head` places (the answer's first passages come
    from several files); behind them everything follows in its own order, so a knowledge base of
    one long manual still returns that manual's best passages instead of far weaker ones.
    """
    files: dict[str, int] = {}
    pages: dict[tuple[str, int | None], int] = {}
    within: list[Fused] = []
    beyond: list[int] = []
    for index, item in enumerate(items):
        if head and len(within) >= head:
            rest = sorted([*beyond, *range(index, len(items))])
            return within + [items[i] for i in rest]
        file_id = item.candidate.file_id
        page = (file_id, item.candidate.place.page)
        page_full = item.candidate.place.page is not None and pages.get(page, 0) >= per_page
        if files.get(file_id, 0) >= per_file or page_full:
            beyond.append(index)
            continue
        files[file_id] = files.get(file_id, 0) + 1
        pages[page] = pages.get(page, 0) + 1
        within.append(item)
    return within + [items[i] for i in beyond]


# the channels whose first hit fusion and the reranker may not push down (the exact channel's first
# is a label or title match, which the caps and the glossary rule are there to weigh)
KEPT_CHANNELS = ("vector", "lexical")


def keep_channel_firsts(items: Sequence[Fused], fused: Sequence[Fused], places: int) -> list[Fused]:
    """`items` with the vector and the lexical channel's first hit each within the first `places`.

    A first hit lower down is moved up to place `places` (taken from `fused`, the whole fused list,
    when the window left it out); the others keep their order behind it. 0 leaves `items` as they are.
    """
    out = list(items)
    if places <= 0:
        return out
    for channel in KEPT_CHANNELS:
        where = next((i for i, item in enumerate(out) if item.ranks.get(channel) == 1), None)
        if where is None:
            missing = next((item for item in fused if item.ranks.get(channel) == 1), None)
            if missing is None:
                continue  # the channel found nothing, or failed
            out.append(missing)
            where = len(out) - 1
        if where >= places:
            out.insert(places - 1, out.pop(where))
    return out
