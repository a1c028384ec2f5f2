"""V2's one normalisation: the same folding at index and query time."""

from __future__ import annotations

import random

import pytest

from app.text.normalize import (
    DEFAULT_KEEP_SYMBOLS,
    _token_pattern,
    contains_phrase,
    fold,
    normalize,
    normalize_kept,
    tokenize,
)


def test_identifier_written_two_ways_matches() -> None:
    # punctuation and case fold away; the letter/digit change splits "K28" like "K 28"
    assert normalize("B-DETECTION_PLUS / K 28") == "b detection plus k 28"
    assert normalize("b detection plus k 28") == "b detection plus k 28"
    assert normalize("B_Detection-Plus K28") == "b detection plus k 28"


def test_different_numbers_never_match() -> None:
    assert normalize("K 25") != normalize("K 28")
    # token boundaries: "k 2" is not inside "k 28", nor "k 28" inside "k 280"
    assert not contains_phrase(normalize("type K 28"), normalize("K 2"))
    assert not contains_phrase(normalize("type K 280"), normalize("K 28"))
    assert contains_phrase(normalize("the type K-28 is"), normalize("k28"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Straße", "straße"),  # ß stays: "Maße" and "Masse" are two words
        ("Maße", "maße"),
        ("Masse", "masse"),
        ("STRASSE", "strasse"),
        ("ẞ", "ß"),  # capital sharp s
        ("Ölfilter", "oelfilter"),  # umlauts written out: the same word as "Oelfilter"
        ("Oelfilter", "oelfilter"),
        ("Größe", "groeße"),
        ("Ü", "ue"),
        ("Ｋ２８", "k 28"),  # full-width forms (NFKC)
        ("ﬁle", "file"),  # ligature (NFKC)
        ("1,5 mm", "1.5 mm"),  # decimal comma inside a number becomes a point
        ("1.5mm", "1.5 mm"),
        ("10%", "10 %"),  # % is kept: "50 %" is not "50"
        ("20 °C", "20 ° c"),
        ("1.000.000", "1.000.000"),
        ("end.", "end"),  # a sentence point is not part of a number
        ("a\x00b", "a b"),  # NUL separates
        ("x\udc80y", "x y"),  # a lone surrogate separates
        ("हिन्दी", "हिन्दी"),  # combining vowel signs stay inside the word
        ("", ""),
        ("  --//__  ", ""),
    ],
)
def test_normalize_cases(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_tokenize_is_normalize_split() -> None:
    text = "DIN EN ISO 13849-1:2015 — max_size=10MB; Größe 1,5 mm"
    assert tokenize(text) == normalize(text).split()
    assert tokenize(text) == [
        "din",
        "en",
        "iso",
        "13849",
        "1",
        "2015",
        "max",
        "size",
        "10",
        "mb",
        "groeße",
        "1.5",
        "mm",
    ]


# Characters of every kind the tokenizer tells apart: ASCII, Latin-1 and Latin Extended letters
# (ß, ø, ł), digits and decimal marks, kept symbols, punctuation, and, from U+0300 on, combining marks,
# Greek, Devanagari with its vowel signs, Thai, full-width forms and a mark beyond plane 0.
_ALPHABET = "aZ9 .,-_/%‰°ßøłÉ\u0301\u0308άΩकि्ไทย\uff2b\U0001d167\u00e4\u00a0"


def test_texts_without_marks_take_the_short_pattern_with_the_same_tokens() -> None:
    # tokenize uses the pattern without marks when the folded text has none (every character below
    # U+0300); it must find exactly what the full pattern finds, on 2,000 random texts of either kind
    rng = random.Random(7)
    plain = "".join(ch for ch in _ALPHABET if ch < "\u0300")
    for i in range(2000):
        text = "".join(rng.choices(plain if i % 2 else _ALPHABET, k=rng.randint(0, 40)))
        folded = fold(text)
        full = [t.replace(",", ".") for t in _token_pattern(DEFAULT_KEEP_SYMBOLS, True).findall(folded)]
        assert tokenize(text) == full, repr(text)


def test_a_kept_normalisation_is_the_normalisation() -> None:
    for text in ["Table 3.1. Upload limits", "Ölfilter › Wechsel", "K28 pump", ""]:
        assert normalize_kept(text) == normalize(text)
    assert normalize_kept("Table 3.1. Upload limits") is normalize_kept("Table 3.1. Upload limits")
