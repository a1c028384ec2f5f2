"""Exact top-k by numpy brute force over the visible rows, and recall@k of an answer (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Two answers whose distances differ by less than this are a tie: pgvector accumulates cosine in
# float32, we in float64, so the k-th and (k+1)-th rows can swap without either being wrong.
TIE_EPS = 1e-5


@dataclass(frozen=True)
class VisibleRows:
    """The rows a request may see: their chunk ids and unit-normalised float64 vectors."""

    ids: list[str]
    vectors: np.ndarray  # (n, d) float64, rows normalised
    index: dict[str, int]

    @classmethod
    def build(cls, ids: Sequence[str], vectors: np.ndarray) -> VisibleRows:
        """Normalise once; cosine distance is then 1 - dot."""
        v = np.asarray(vectors, dtype=np.float64).reshape(len(ids), -1)
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        return cls(list(ids), v / np.maximum(norms, 1e-30), {u: i for i, u in enumerate(ids)})

    def __len__(self) -> int:
        return len(self.ids)

    def distances(self, query: np.ndarray) -> np.ndarray:
        """Cosine distance of every visible row to `query`."""
        q = np.asarray(query, dtype=np.float64)
        q = q / max(float(np.linalg.norm(q)), 1e-30)
        if not len(self.ids):
            return np.zeros(0)
        return 1.0 - self.vectors @ q


@dataclass(frozen=True)
class Judgement:
    """How one answer compares with the exact top-k."""

    recall: float  # share of the expected rows (min(k, visible)) that are true top-k (ties allowed)
    expected: int  # min(k, visible)
    returned: int
    foreign: int  # returned rows outside the visible set (an authorisation leak)
    max_distance_error: float  # largest |reported - exact| distance over returned visible rows


def judge(rows: VisibleRows, query: np.ndarray, answer: Sequence[tuple[str, float]], k: int) -> Judgement:
    """Recall@k of `answer` ([(chunk id, reported distance)], best first) against brute force."""
    expected = min(k, len(rows))
    if expected == 0:
        return Judgement(1.0 if not answer else 0.0, 0, len(answer), len(answer), 0.0)
    dist = rows.distances(query)
    kth = float(np.partition(dist, expected - 1)[expected - 1])
    hits, foreign, err = 0, 0, 0.0
    seen: set[str] = set()
    for chunk_id, reported in answer[:k]:
        i = rows.index.get(chunk_id)
        if i is None:
            foreign += 1
            continue
        err = max(err, abs(float(reported) - float(dist[i])))
        if chunk_id not in seen and dist[i] <= kth + TIE_EPS:
            hits += 1
        seen.add(chunk_id)
    return Judgement(min(1.0, hits / expected), expected, len(answer), foreign, err)


def exact_top(rows: VisibleRows, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The exact top-k [(chunk id, distance)] (for reports and the fan-out merge check)."""
    if not len(rows):
        return []
    dist = rows.distances(query)
    kk = min(k, len(rows))
    idx = np.argpartition(dist, kk - 1)[:kk]
    idx = idx[np.argsort(dist[idx], kind="stable")]
    return [(rows.ids[i], float(dist[i])) for i in idx]
