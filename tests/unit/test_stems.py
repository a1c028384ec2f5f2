"""Stem keys of the lexical channel: one key per token, both languages meeting on it, old runs kept."""

from __future__ import annotations

import pytest

from app.ingest.v2.profile import EXTRACTOR_RELEASE
from app.text.stems import STEMMED_LEXICAL_RELEASE, lexical_key, lexical_keys, stems_in_lexical


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("ventile", "ventil"),  # German plural
        ("returns", "return"),  # English inflection
        ("oelfilters", "oelfilter"),  # folded umlaut, genitive
        ("installed", "installing"),
        ("konfigurationen", "konfiguration"),
    ],
)
def test_inflections_share_a_key(one: str, other: str) -> None:
    assert lexical_key(one) == lexical_key(other)


def test_identifiers_and_short_words_stay_whole() -> None:
    for token in ("ext4", "k", "28", "ls", "tar", "x86_64"):
        assert lexical_key(token) == token
    # distinct words stay distinct: "Maße" (dimensions, ß kept) is not "Masse" (mass)
    assert lexical_key("maße") != lexical_key("masse")
    assert lexical_key("partition") != lexical_key("party")


def test_a_run_indexed_before_stems_is_asked_with_raw_terms() -> None:
    assert stems_in_lexical(f"v2.{EXTRACTOR_RELEASE}-0123456789ab")
    assert not stems_in_lexical("v2.2-0123456789ab")
    assert not stems_in_lexical("something else")
    assert lexical_keys(("ventile", "k"), "v2.2-abc") == {"ventile": "ventile", "k": "k"}
    assert lexical_keys(("ventile", "k"), f"v2.{EXTRACTOR_RELEASE}-abc") == {"ventile": "ventil", "k": "k"}
    # this release indexes stems: the two constants move together
    assert int(EXTRACTOR_RELEASE) >= STEMMED_LEXICAL_RELEASE
