"""Snowball stems (English and German) of normalised tokens, for matching words across inflections.

A question says "returns" where the text says "return", "Ventile" where it says "Ventil". A token's
forms are the token itself and its English and German stems; two tokens match when their forms
meet. Both languages are tried for every token because a question and its evidence may be in
different languages, and a stem shared by accident only ever makes a word count as found (the
refusal is the only reader, and it must not refuse for a missing inflection).

Tokens with a digit are kept whole (an identifier such as "ext4" is not a word). Stemming is
PyStemmer's C implementation, cached per word.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import Stemmer

from app.text.compounds import split, with_parts

_EN = Stemmer.Stemmer("english")
_DE = Stemmer.Stemmer("german")
# stems shorter than this are not trusted: "as" and "a" would meet far too many words
MIN_STEM_CHARS = 3
_SHARP_S = "\u017f"  # a letter neither stemmer changes, standing in for ß


@functools.lru_cache(maxsize=65_536)
def forms(token: str) -> frozenset[str]:
    """The token and its English and German stems (a token with a digit stays whole)."""
    if any(ch.isdigit() for ch in token) or len(token) < MIN_STEM_CHARS + 1:
        return frozenset((token,))
    out = {token}
    for stemmer in (_EN, _DE):
        stem = stemmer.stemWord(token)
        if len(stem) >= MIN_STEM_CHARS:
            out.add(stem)
    return frozenset(out)


@functools.lru_cache(maxsize=65_536)
def lexical_key(token: str, language: str | None) -> str:
    """The term the lexical channel indexes for `token` in a text of `language`: its Snowball stem,
    German for German texts and English for every other ("Ventile" -> "ventil", "returns" -> "return").

    A token with a digit or of three letters or less stays whole, as does one whose stem would be
    shorter than three letters; German's ß is kept apart from ss ("Maße" is not "Masse").
    """
    if any(ch.isdigit() for ch in token) or len(token) < MIN_STEM_CHARS + 1:
        return token
    if language == "de":
        # German Snowball writes ß as ss: shielded, "maße" (dimensions) does not become "masse" (mass)
        key = str(_DE.stemWord(token.replace("ß", _SHARP_S))).replace(_SHARP_S, "ß")
    else:
        key = str(_EN.stemWord(token))
    return key if len(key) >= MIN_STEM_CHARS else token


# in a V2 extractor version ("v2.2+stems-<hash>"): the run's lexical channel holds stem keys
STEMS_MARKER = "+stems"
# ("v2.4+compounds-<hash>"): German documents' compounds are held with their words as well
COMPOUNDS_MARKER = "+compounds"


def stems_in_lexical(extractor_version: str) -> bool:
    """Whether a run of this extractor version indexed stem keys rather than the words themselves."""
    return STEMS_MARKER in extractor_version.split("-", 1)[0]


def compounds_in_lexical(extractor_version: str) -> bool:
    """Whether a run of this extractor version indexed German compounds with their words."""
    return COMPOUNDS_MARKER in extractor_version.split("-", 1)[0]


def posting_keys(terms: Sequence[str], language: str | None, extractor_version: str) -> list[str]:
    """The keys a chunk's terms are stored under in the lexical channel, one per term occurrence,
    and in a German document with compounds on, one more per word of each compound."""
    stems = stems_in_lexical(extractor_version)
    if language == "de" and compounds_in_lexical(extractor_version):
        terms = with_parts(terms)
    return [lexical_key(term, language) for term in terms] if stems else list(terms)


def lexical_keys(
    terms: Sequence[str], extractor_version: str, *, parts: bool = True
) -> dict[str, tuple[str, ...]]:
    """Each question term and the keys the run's lexical channel may hold it under.

    A chunk holds its word under its document's language's stem; the question asks for both the
    English and the German one, so it needs no language of its own (a short question has none) and
    finds a word in documents of either language. A run from before stems holds the word itself.
    With compounds, a compound term also asks for its words' keys ("paketverwaltung": "paket",
    "verwaltung"), which German documents hold for their compounds as well; `parts=False` leaves
    them out (a term's own document frequency is its own keys', not its words').
    """
    stems = stems_in_lexical(extractor_version)
    compounds = parts and compounds_in_lexical(extractor_version)
    out: dict[str, tuple[str, ...]] = {}
    for term in terms:
        words = (term, *split(term)) if compounds else (term,)
        keys = (
            (key for word in words for key in (lexical_key(word, "en"), lexical_key(word, "de")))
            if stems
            else iter(words)
        )
        out[term] = tuple(dict.fromkeys(keys))
    return out


def stem_de(token: str) -> str:
    """The German Snowball stem of a normalised token."""
    return str(_DE.stemWord(token))


def form_set(tokens: Iterable[str]) -> frozenset[str]:
    """Every form of every token: what a text offers to match against."""
    # one union in C over the cached sets (a Python loop of `|=` took ~3x as long per token)
    return frozenset().union(*map(forms, tokens))


# A candidate's text is read by the reranker and by the refusal of the same answer, and a much-asked
# chunk by many answers: its forms are kept for the texts seen last. 256 texts of a few hundred
# tokens each hold a few MB.
@functools.lru_cache(maxsize=256)
def text_forms(search_text: str) -> frozenset[str]:
    """`form_set` of a normalised text's tokens (its space-separated words)."""
    return form_set(search_text.split())


def matches(token: str, offered: frozenset[str]) -> bool:
    """True when `token` or one of its stems is among `offered` (a `form_set`)."""
    return not forms(token).isdisjoint(offered)
