"""V2's one normalisation: the same folding at index and query time."""

from __future__ import annotations

import pytest

from app.text.normalize import contains_phrase, normalize, tokenize


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
