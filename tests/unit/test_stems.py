"""Stem keys of the lexical channel: a text's words under its language's stems, a question asking for
both languages' keys, runs from before stems asked with raw words."""

from __future__ import annotations

import pytest

from app.config import load_settings
from app.evidence.index.profile import build_profile
from app.text.stems import STEMS_MARKER, form_set, lexical_key, lexical_keys, stems_in_lexical, text_forms


@pytest.mark.parametrize(
    ("one", "other", "language"),
    [
        ("ventile", "ventil", "de"),
        ("konfigurationen", "konfiguration", "de"),
        ("oelfilters", "oelfilter", "de"),  # umlauts are written out before stemming
        ("returns", "return", "en"),
        ("installed", "installing", "en"),
        ("filesystems", "filesystem", None),  # no language: English
    ],
)
def test_inflections_share_a_key(one: str, other: str, language: str | None) -> None:
    assert lexical_key(one, language) == lexical_key(other, language)


def test_identifiers_and_short_words_stay_whole() -> None:
    for token in ("ext4", "k", "28", "ls", "tar", "x86_64"):
        assert lexical_key(token, "de") == lexical_key(token, "en") == token
    # "Maße" (dimensions, ß kept by the normaliser) is not "Masse" (mass)
    assert lexical_key("maße", "de") != lexical_key("masse", "de")
    assert lexical_key("partition", "en") != lexical_key("party", "en")


def test_a_question_asks_for_both_languages_keys() -> None:
    keys = lexical_keys(("ventile", "returns", "k"), f"v2.2{STEMS_MARKER}-0123456789ab")
    assert keys["k"] == ("k",)
    assert lexical_key("ventil", "de") in keys["ventile"]
    assert lexical_key("return", "en") in keys["returns"]
    assert all(len(set(ks)) == len(ks) for ks in keys.values())


def test_a_run_indexed_without_stems_is_asked_with_its_words() -> None:
    assert stems_in_lexical(f"v2.2{STEMS_MARKER}-0123456789ab")
    assert not stems_in_lexical("v2.2-0123456789ab")
    assert not stems_in_lexical("something else")
    assert lexical_keys(("ventile", "k"), "v2.2-abc") == {"ventile": ("ventile",), "k": ("k",)}


def test_the_setting_marks_the_extractor_version() -> None:
    plain = build_profile(load_settings(_env_file=None), window=256, counter=None).extractor_version
    stemmed = build_profile(
        load_settings(_env_file=None, v2={"index": {"stems": True}}), window=256, counter=None
    ).extractor_version
    assert not stems_in_lexical(plain) and stems_in_lexical(stemmed)
    assert plain.split("-")[1] != stemmed.split("-")[1]  # a reindex builds the other kind


def test_a_texts_forms_are_its_tokens_forms_and_kept() -> None:
    text = "die ventile returns k 28 ventil"
    assert text_forms(text) == form_set(text.split())
    assert text_forms(text) is text_forms("die ventile returns k 28 ventil")  # the same text: kept
    assert text_forms("") == frozenset()
