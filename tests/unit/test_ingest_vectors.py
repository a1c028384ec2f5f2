"""How an ingest puts fresh and reused vectors together (pure: no embedder, no database)."""

from __future__ import annotations

import numpy as np

from app.ingest.pipeline import _assemble


def test_each_chunk_gets_its_own_digests_vector_fresh_or_reused_in_order() -> None:
    fresh = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # rows of digests "b" and "d"
    known = {"a": np.array([5.0, 5.0], dtype=np.float32), "c": np.array([7.0, 7.0], dtype=np.float32)}
    # "b" repeats within the file: embedded once, stored twice
    vectors, embedded, reused = _assemble(["a", "b", "c", "b", "d"], fresh, ["b", "d"], known)
    assert vectors.dtype == np.float32 and vectors.shape == (5, 2)
    assert vectors.tolist() == [[5, 5], [1, 0], [7, 7], [1, 0], [0, 1]]
    assert (embedded, reused) == (3, 2)


def test_all_reused_takes_the_dimension_from_the_known_vectors() -> None:
    known = {"a": np.array([1.0, 2.0, 3.0], dtype=np.float32)}
    vectors, embedded, reused = _assemble(["a", "a"], np.zeros((0, 0), dtype=np.float32), [], known)
    assert vectors.tolist() == [[1, 2, 3], [1, 2, 3]] and (embedded, reused) == (0, 2)
