"""German compounds split into their words (app/text/compounds.py), and the lexical keys that use them."""

from __future__ import annotations

import pytest

from app.config import load_settings
from app.evidence.index.profile import build_profile
from app.text.compounds import split, with_parts
from app.text.normalize import normalize
from app.text.stems import (
    COMPOUNDS_MARKER,
    STEMS_MARKER,
    compounds_in_lexical,
    lexical_key,
    lexical_keys,
    posting_keys,
)


@pytest.mark.parametrize(
    ("word", "parts"),
    [
        ("Paketverwaltung", ("paket", "verwaltung")),
        ("Ölfilterwechsel", ("oel", "filter", "wechsel")),  # a short first word, umlauts written out
        ("Konfigurationsdatei", ("konfiguration", "datei")),  # the linking "s"
        ("Netzwerkkarte", ("netzwerk", "karte")),  # the fewest words: not netz|werk|karte
        ("Dateisystem", ("datei", "system")),  # a compound the word list knows whole
        ("Vorsichtsmaßnahme", ("vorsicht", "maßnahme")),  # ß kept
    ],
)
def test_compounds_split_into_their_words(word: str, parts: tuple[str, ...]) -> None:
    assert split(normalize(word)) == parts


@pytest.mark.parametrize(
    "word",
    [
        "Verwaltung",  # a simple word
        "kommenden",  # an inflected simple word the list knows: not komm|enden
        "versehen",  # not vers|ehen
        "nachteilige",  # not nacht|eilige
        "substitutions",  # English
        "ext4dateisystem",  # a digit: an identifier
        "Stellen",  # too short
        "Aufruf",  # "auf" is a function word
    ],
)
def test_other_words_stay_whole(word: str) -> None:
    assert split(normalize(word)) == ()


def test_with_parts_adds_the_words_after_each_compound() -> None:
    assert with_parts(["die", "paketverwaltung", "laeuft"]) == [
        "die",
        "paketverwaltung",
        "paket",
        "verwaltung",
        "laeuft",
    ]


def test_posting_keys_split_german_documents_only_and_only_when_the_run_says_so() -> None:
    terms = ["paketverwaltung", "installiert"]
    on, both = f"v2.4{COMPOUNDS_MARKER}-x", f"v2.4{STEMS_MARKER}{COMPOUNDS_MARKER}-x"
    assert posting_keys(terms, "de", on) == ["paketverwaltung", "paket", "verwaltung", "installiert"]
    assert posting_keys(terms, "en", on) == terms
    assert posting_keys(terms, "de", "v2.4-x") == terms
    assert posting_keys(terms, "de", both) == [
        lexical_key(t, "de") for t in ("paketverwaltung", "paket", "verwaltung", "installiert")
    ]


def test_a_question_asks_for_the_words_of_its_compounds_but_counts_only_its_own() -> None:
    on = f"v2.4{COMPOUNDS_MARKER}-x"
    assert lexical_keys(["paketverwaltung", "apt"], on) == {
        "paketverwaltung": ("paketverwaltung", "paket", "verwaltung"),
        "apt": ("apt",),
    }
    assert lexical_keys(["paketverwaltung"], on, parts=False) == {"paketverwaltung": ("paketverwaltung",)}
    assert lexical_keys(["paketverwaltung"], "v2.4-x") == {"paketverwaltung": ("paketverwaltung",)}


def test_the_setting_marks_the_extractor_version_and_leaves_runs_without_it_alone() -> None:
    def version(**index: object) -> str:
        settings = load_settings(_env_file=None, v2={"index": index})
        return build_profile(settings, window=256, counter=None).extractor_version

    assert compounds_in_lexical(version())  # on by default
    split_on, plain = version(compounds=True), version(compounds=False)
    assert compounds_in_lexical(split_on) and not compounds_in_lexical(plain)
    assert plain.split("-")[1] != split_on.split("-")[1]
    # the fingerprint of a run without the setting is the one of the release before it
    assert COMPOUNDS_MARKER not in plain
