"""The breadcrumb variants of benchmarks/quality/natural/crumbs.py (pure parts)."""

from __future__ import annotations

import numpy as np

from benchmarks.quality.natural.crumbs import add_crumbs, texts_of


def test_each_variant_keeps_less_of_the_breadcrumb() -> None:
    v = texts_of("Guide", ("Chapter 4", "4.4 Rules"), "Body text.")
    assert v["full"] == "Guide › Chapter 4 › 4.4 Rules\nBody text."  # as the chunker embeds it
    assert v["notitle"] == "Chapter 4 › 4.4 Rules\nBody text."
    assert v["last"] == "4.4 Rules\nBody text."
    assert v["content"] == "Body text."
    # no section: the title alone, or nothing
    assert texts_of("Guide", (), "Body.") == {
        "full": "Guide\nBody.",
        "notitle": "Body.",
        "last": "Body.",
        "content": "Body.",
    }


def test_a_separate_breadcrumb_vector_is_added_at_its_weight_and_normalised() -> None:
    content = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    out = add_crumbs(content, ["a", "unknown"], {"a": np.array([0.0, 2.0], dtype=np.float32)})
    # 1, 0 + 0.5 * (0, 2) = (1, 1), normalised; a breadcrumb without a vector leaves the row
    assert np.allclose(out[0], [2**-0.5, 2**-0.5]) and np.allclose(out[1], [0.0, 1.0])
    assert np.allclose(content, [[1.0, 0.0], [0.0, 1.0]])  # the input is not changed
