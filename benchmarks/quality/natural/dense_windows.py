"""V1's window vectors, for a variant of (B) that keeps what V1's local embedder computes anyway.

    python -m benchmarks.quality.natural.dense_windows_cli [CAPTURE]   # writes CAPTURE.windows.pkl

The offline model reads 256 tokens; a longer V1 chunk (most of rag_api's 1,500 characters) is
embedded as its windows, and its stored vector is their token-weighted mean. Kept, those window
vectors would score evidence chunks at about their own size with no second embedding pass. This
embeds every captured V1 chunk's windows with the service's own runtime and splitter (a chunk that
fits is its own window), checks that pooling them gives the stored vector back, and writes them
beside the capture; `replay score --vector-source v1w-ranked` then maps the nearest windows onto
the evidence chunks they hold, as `v1-ranked` does with whole V1 chunks.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.quality.natural import dense


@dataclass
class Windows:
    """Every V1 chunk's windows in one knowledge base: owner chunk, text, unit vector."""

    owner: list[int]
    texts: list[str]
    vectors: np.ndarray


def make(kb: dense.KbData, runtime: Any) -> tuple[Windows, float]:
    """The windows of every V1 chunk and their vectors; and the lowest cosine of a chunk's pooled
    windows to its stored vector (1.0: the windows are exactly what V1 pooled)."""
    from app.text.tokens import pool_windows

    runtime.load()
    owner: list[int] = []
    texts: list[str] = []
    weights: list[float] = []
    for i, text in enumerate(kb.v1_texts):
        split = runtime._split(text) or [(text, 1.0)]  # the embedder's own splitter (local.py)
        for piece, weight in split:
            owner.append(i)
            texts.append(piece)
            weights.append(weight)
    vectors = dense.unit_rows(np.asarray(runtime.embed_truncated(texts), dtype=np.float32))
    lowest = 1.0
    rows = np.asarray(owner)
    for i in range(len(kb.v1_texts)):
        mine = np.flatnonzero(rows == i)
        if len(mine):
            pooled = pool_windows(vectors[mine], [weights[j] for j in mine])
            lowest = min(lowest, float(pooled @ kb.v1_vectors[i]))
    return Windows(owner, texts, vectors), lowest


def path_for(capture: Path) -> Path:
    """Where a capture's windows are kept."""
    return capture.with_suffix(".windows.pkl")


def load(capture: Path) -> dict[str, Windows]:
    """A capture's windows, per knowledge base."""
    with path_for(capture).open("rb") as f:
        out: dict[str, Windows] = _Unpickler(f).load()  # our own file, written by `main` below
    return out


class _Unpickler(pickle.Unpickler):
    """Finds `Windows` here whether `main` ran as `python -m` (`__main__.Windows`) or imported."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__" and name == "Windows":
            return Windows
        return super().find_class(module, name)
