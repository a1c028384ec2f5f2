"""A reference Okapi BM25 and reciprocal-rank fusion, in process, for the quality benchmark (pure).

This is a baseline to measure against, not the service's lexical channel: it tokenises on word
characters after NFKC case folding, drops a short English stopword list, and scores with Lucene's
BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))). Each distinct query term
counts once.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    """a an and are as at be but by for from has have if in into is it its of on or such that the their
    then there these they this to was were will with which what when where who how not no can do does
    you your we our""".split()
)


def tokenize(text: str) -> list[str]:
    """Word tokens of `text`: NFKC, case-folded, split on non-word characters, stopwords dropped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [t for t in _WORD.findall(folded) if t not in STOPWORDS]


@dataclass(frozen=True)
class Hit:
    """One scored document: its index in the indexed list and its BM25 score."""

    index: int
    score: float


class BM25:
    """An inverted index over a fixed list of texts."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.n = len(texts)
        lengths = np.zeros(self.n, dtype=np.float64)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, text in enumerate(texts):
            counts = Counter(tokenize(text))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                docs, tfs = postings.setdefault(term, ([], []))
                docs.append(i)
                tfs.append(tf)
        self.lengths = lengths
        self.avgdl = float(lengths.mean()) if self.n else 0.0
        self._postings = {
            term: (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float64))
            for term, (docs, tfs) in postings.items()
        }

    def idf(self, term: str) -> float:
        """Lucene's non-negative idf of `term` (0 for a term no document has)."""
        entry = self._postings.get(term)
        if entry is None:
            return 0.0
        df = len(entry[0])
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed text for `query` (float64, length n)."""
        out = np.zeros(self.n, dtype=np.float64)
        if self.n == 0 or self.avgdl == 0:
            return out
        for term in dict.fromkeys(tokenize(query)):  # distinct terms, in query order
            entry = self._postings.get(term)
            if entry is None:
                continue
            docs, tfs = entry
            norm = self.k1 * (1.0 - self.b + self.b * self.lengths[docs] / self.avgdl)
            out[docs] += self.idf(term) * tfs * (self.k1 + 1.0) / (tfs + norm)
        return out

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best texts with a positive score, best first; equal scores in index order."""
        scores = self.scores(query)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        # lexsort: last key is primary -> by score descending, then by index ascending
        order = positive[np.lexsort((positive, -scores[positive]))][:k]
        return [Hit(int(i), float(scores[i])) for i in order]


def rrf(
    rankings: Sequence[Sequence[Hashable]],
    k: float = 60.0,
    weights: Sequence[float] | None = None,
) -> list[tuple[Hashable, float]]:
    """Reciprocal-rank fusion: each key scores sum(weight / (k + rank)) over the lists it is in
    (1-based rank, its first occurrence per list); best first, ties by the order keys were first met."""
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[Hashable, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        seen: set[Hashable] = set()
        for rank, key in enumerate(ranking, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    first_met = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_met[kv[0]]))
