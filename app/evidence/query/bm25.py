"""Okapi BM25, the reference the SQL lexical channel is tested against.

    score(q, d) = Σ_t  idf(t) · tf(t,d) · (k1 + 1) / (tf(t,d) + k1 · (1 - b + b · |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

summed over the distinct terms t of q (a term repeated in the query counts once). `N` is the number
of chunks, `df(t)` the chunks containing t, `|d|` the chunk's length in tokens and `avgdl` the mean
length. This idf (the one Lucene uses) is never negative, so a term in most chunks still counts a
little instead of lowering the score. Terms are the tokens of the shared normalisation
(`normalize(text).split()`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """What BM25 needs to know about the collection."""

    documents: int
    average_length: float
    document_frequency: Mapping[str, int]


def idf(documents: int, document_frequency: int) -> float:
    """ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1.0 + (documents - document_frequency + 0.5) / (document_frequency + 0.5))


def corpus_stats(documents: Iterable[Sequence[str]]) -> CorpusStats:
    """Chunk count, mean length and document frequencies of tokenised chunks."""
    frequency: Counter[str] = Counter()
    count = 0
    total = 0
    for tokens in documents:
        count += 1
        total += len(tokens)
        frequency.update(set(tokens))
    return CorpusStats(count, total / count if count else 0.0, dict(frequency))


def score(
    query_terms: Iterable[str],
    term_frequency: Mapping[str, int],
    length: int,
    stats: CorpusStats,
    *,
    k1: float = 1.2,
    b: float = 0.75,
) -> float:
    """BM25 of one chunk (term frequencies and length) for the distinct query terms."""
    if stats.documents == 0:
        return 0.0
    norm = k1 * (1.0 - b + b * (length / stats.average_length if stats.average_length > 0 else 0.0))
    total = 0.0
    for term in dict.fromkeys(query_terms):
        tf = term_frequency.get(term, 0)
        if tf <= 0:
            continue
        total += idf(stats.documents, stats.document_frequency.get(term, 0)) * tf * (k1 + 1.0) / (tf + norm)
    return total


def rank(
    query_terms: Sequence[str],
    documents: Mapping[str, Sequence[str]],
    *,
    k1: float = 1.2,
    b: float = 0.75,
    limit: int | None = None,
) -> list[tuple[str, float]]:
    """(id, score) of the documents that contain a query term, best first, ties by id."""
    stats = corpus_stats(documents.values())
    scored = []
    for doc_id, tokens in documents.items():
        value = score(query_terms, Counter(tokens), len(tokens), stats, k1=k1, b=b)
        if value > 0:
            scored.append((doc_id, value))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit] if limit is not None else scored
