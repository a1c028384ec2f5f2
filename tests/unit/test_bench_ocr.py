"""The OCR benchmark's character error rate: Myers' bit-parallel edit distance against the textbook one."""

from __future__ import annotations

import random

import pytest

from benchmarks.ocr import cer, levenshtein


def _textbook(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


@pytest.mark.parametrize("seed", range(20))
def test_levenshtein_matches_the_textbook_algorithm(seed: int) -> None:
    rng = random.Random(seed)
    a = "".join(rng.choice("aäbß ") for _ in range(rng.randint(0, 90)))
    b = "".join(rng.choice("aäbß ") for _ in range(rng.randint(0, 90)))
    assert levenshtein(a, b) == _textbook(a, b)


def test_cer_collapses_whitespace_and_counts_against_the_reference() -> None:
    assert cer("Die  Größe\nder", "Die Größe der") == 0.0
    assert cer("Die Grosse", "Die Größe") == 3 / 9  # ö -> o, ß -> s, and one s more
