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
from collections.abc import Iterable

import Stemmer

_EN = Stemmer.Stemmer("english")
_DE = Stemmer.Stemmer("german")
# stems shorter than this are not trusted: "as" and "a" would meet far too many words
MIN_STEM_CHARS = 3


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


def stem_de(token: str) -> str:
    """The German Snowball stem of a normalised token."""
    return str(_DE.stemWord(token))


def form_set(tokens: Iterable[str]) -> frozenset[str]:
    """Every form of every token: what a text offers to match against."""
    # one union in C over the cached sets (a Python loop of `|=` took ~3x as long per token)
    return frozenset().union(*map(forms, tokens))


def matches(token: str, offered: frozenset[str]) -> bool:
    """True when `token` or one of its stems is among `offered` (a `form_set`)."""
    return not forms(token).isdisjoint(offered)
