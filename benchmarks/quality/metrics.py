"""Retrieval quality metrics (pure): file-level ranking, Recall@k, MRR, nDCG@k, answer-in-passage.

A system returns passages; relevance is judged per file. The file ranking of a result list is the
order in which files first appear in it (a file's second passage does not take a second rank), so
a system that returns ten passages of one file has a file ranking of length one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_SPACE = re.compile(r"\s+")
# characters that documentation renderers add or drop around the same words: Sphinx's pilcrow,
# soft hyphens, zero-width spaces, and the typographic hyphen man(1) uses when it hyphenates
_DROP = dict.fromkeys(map(ord, "\u00b6\u00ad\u200b\u200c\u200d\ufeff"), None)


def normalise(text: str) -> str:
    """NFKC, case-folded, pilcrows and invisible characters dropped, whitespace collapsed to one space."""
    folded = unicodedata.normalize("NFKC", text).translate(_DROP).casefold()
    return _SPACE.sub(" ", folded).strip()


def file_ranking(file_ids: Iterable[str]) -> list[str]:
    """File ids in the order they first appear (duplicates dropped)."""
    seen: set[str] = set()
    out = []
    for fid in file_ids:
        if fid not in seen:
            seen.add(fid)
            out.append(fid)
    return out


def recall_at_k(ranking: Sequence[str], relevant: set[str], k: int) -> float:
    """Share of the relevant files found among the first k of `ranking` (0 when nothing is relevant)."""
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def reciprocal_rank(ranking: Sequence[str], relevant: set[str], k: int = 10) -> float:
    """1 / (1-based rank of the first relevant file within the first k), else 0."""
    for rank, fid in enumerate(ranking[:k], start=1):
        if fid in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranking: Sequence[str], relevant: set[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k: sum of 1/log2(rank + 1) over relevant hits, over the ideal sum."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(rank + 1) for rank, fid in enumerate(ranking[:k], start=1) if fid in relevant)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal


def squash(text: str) -> str:
    """`normalise` without any whitespace: loaders differ in where they put spaces between inline
    elements ("x ," or "x,"), so answers are compared without them."""
    return _SPACE.sub("", normalise(text))


def answer_in_passages(answer: str, passages: Iterable[str]) -> bool:
    """True when the squashed answer occurs in at least one squashed passage."""
    needle = squash(answer)
    if not needle:
        return False
    return any(needle in squash(p) for p in passages)


@dataclass(frozen=True)
class Judged:
    """One query's outcome for one system."""

    answerable: bool
    refused: bool
    ranking: tuple[str, ...]  # file ranking of the returned passages
    relevant: frozenset[str]
    answer_found: bool | None  # None when the query has no answer text
    latency_ms: float | None  # None when not timed (query_v2 outside its timed sample)


def judge(
    *,
    answerable: bool,
    refused: bool,
    passage_files: Sequence[str],
    passage_texts: Sequence[str],
    relevant: Iterable[str],
    answer: str | None,
    latency_ms: float | None,
) -> Judged:
    """Judge one result list against the query's ground truth."""
    found = None if answer is None or not answerable else answer_in_passages(answer, passage_texts)
    return Judged(
        answerable=answerable,
        refused=refused,
        ranking=tuple(file_ranking(passage_files)),
        relevant=frozenset(relevant),
        answer_found=found,
        latency_ms=latency_ms,
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Summary:
    """Aggregated metrics of one system on one query set (ratios in 0..1, latency in ms)."""

    queries: int = 0
    answerable: int = 0
    unanswerable: int = 0
    recall_at_1: float | None = None
    recall_at_5: float | None = None
    recall_at_10: float | None = None
    mrr: float | None = None
    ndcg_at_10: float | None = None
    answer_in_passage: float | None = None
    answer_queries: int = 0
    refusal_rate: float | None = None  # share of unanswerable queries refused
    false_refusal_rate: float | None = None  # share of answerable queries refused
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    timed: int = 0  # queries with a latency
    extra: dict[str, float] = field(default_factory=dict)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(results: Sequence[Judged]) -> Summary:
    """Means over answerable queries for ranking metrics (a refused query counts as a miss), refusal
    rates over each kind, and latency percentiles over every timed query."""
    answerable = [r for r in results if r.answerable]
    unanswerable = [r for r in results if not r.answerable]
    # a refusal returns nothing, so its ranking is empty and every ranking metric is 0 for it
    with_answer = [r for r in answerable if r.answer_found is not None]
    latencies = [r.latency_ms for r in results if r.latency_ms is not None]
    return Summary(
        queries=len(results),
        answerable=len(answerable),
        unanswerable=len(unanswerable),
        recall_at_1=_mean([recall_at_k(r.ranking, set(r.relevant), 1) for r in answerable]),
        recall_at_5=_mean([recall_at_k(r.ranking, set(r.relevant), 5) for r in answerable]),
        recall_at_10=_mean([recall_at_k(r.ranking, set(r.relevant), 10) for r in answerable]),
        mrr=_mean([reciprocal_rank(r.ranking, set(r.relevant), 10) for r in answerable]),
        ndcg_at_10=_mean([ndcg_at_k(r.ranking, set(r.relevant), 10) for r in answerable]),
        answer_in_passage=_mean([1.0 if r.answer_found else 0.0 for r in with_answer]),
        answer_queries=len(with_answer),
        refusal_rate=_mean([1.0 if r.refused else 0.0 for r in unanswerable]),
        false_refusal_rate=_mean([1.0 if r.refused else 0.0 for r in answerable]),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        timed=len(latencies),
    )
