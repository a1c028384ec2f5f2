"""German compounds split into their words, for the lexical channel ("Ölfilterwechsel" holds "filter").

German writes a concept as one word where English writes several: a question about "Paketverwaltung"
should find a text on "die Verwaltung der Pakete", and "Netzwerkkarte wechseln" the chapter
"Netzwerkkarten". The lexical channel indexes a German document's compounds with their parts and
asks a question's compounds with theirs, so the parts meet.

The split is dictionary-based over the German word list the refusal already loads (pyspellchecker's,
340,000 word forms, app/text/vocabulary.py), folded as normalised text is (umlauts written out, ß
kept). A word splits when it is covered, left to right, by known words of at least four letters
(three for a first word that is not a function word: "Öl" is "oel"), optionally joined by a linking
element ("Konfiguration-s-datei", "Seite-n-zahl"); the cover with the fewest parts wins, then the one
with the longest last word (the head: "Netzwerk|karte", not "Netz|werk|karte"). A word with a digit
or shorter than eight letters is not split. The whole word is always kept as well.

Weighed: CharSplit (`compound-split`, n-gram probabilities from Wikipedia nouns; unreleased since
2020, data of its own), `split-words`, hunspell's German dictionary through `spylls` (slow pure-Python
affix expansion). The list the project already ships decides "is this a word" well enough, and the
fewest-parts rule needs no frequencies (the list's are floored at 50 for most words).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from app.text import vocabulary
from app.text.lexicon import STOPWORDS_DE, STOPWORDS_EN
from app.text.normalize import fold

MIN_WORD_CHARS = 8
MIN_PART_CHARS = 4
MIN_FIRST_PART_CHARS = 3
# Fugenelemente: what German puts between the words of a compound
_LINKS = ("", "s", "es", "n", "en", "e", "er", "ens")
_FUNCTION_WORDS = STOPWORDS_DE | STOPWORDS_EN


@functools.cache
def _german() -> frozenset[str]:
    """The German word forms, folded as the search tokens are."""
    return frozenset(fold(word) for word in vocabulary.german_words())


def _part(word: str, first: bool) -> bool:
    """A known German word that may stand in a compound."""
    if len(word) < (MIN_FIRST_PART_CHARS if first else MIN_PART_CHARS) or word in _FUNCTION_WORDS:
        return False
    return word in _german()


@functools.lru_cache(maxsize=65_536)
def split(token: str) -> tuple[str, ...]:
    """The words of a German compound token (normalised), () when it is not one ("oelfilter" ->
    ("oel", "filter"))."""
    # an English word in a German text ("substitutions") is not split
    if len(token) < MIN_WORD_CHARS or not token.isalpha() or token in vocabulary.english_words():
        return ()
    parts = _cover(token, 0, {})
    if parts and token in _german() and not _plausible(parts):
        return ()
    return parts


def _plausible(parts: tuple[str, ...]) -> bool:
    """Whether a word the list knows whole is this compound rather than an inflected simple word.

    Accidental covers of simple words end in a short word or one that begins with the "e" of an
    inflection or suffix ("komm|enden", "nacht|eilige", "verein|facht" passes: a few remain), while
    the compounds the list knows ("datei|system", "fehler|status") are of long words.
    """
    return all(len(part) >= 5 for part in parts) and not parts[-1].startswith("e")


def _cover(token: str, start: int, memo: dict[int, tuple[str, ...]]) -> tuple[str, ...]:
    """The best cover of token[start:] by words (fewest, then the longest last), () when none; from
    the start, a cover of two words at least (the whole word is not its own split)."""
    if start in memo:
        return memo[start]
    best: tuple[str, ...] = ()
    for end in range(len(token) - (1 if start == 0 else 0), start, -1):
        head = token[start:end]
        if not _part(head, first=start == 0):
            continue
        if end == len(token):
            candidate: tuple[str, ...] = (head,)
        else:
            candidate = ()
            for link in _LINKS:
                if token.startswith(link, end) and end + len(link) < len(token):
                    rest = _cover(token, end + len(link), memo)
                    if rest and (not candidate or _better((head, *rest), candidate)):
                        candidate = (head, *rest)
        if candidate and (not best or _better(candidate, best)):
            best = candidate
    memo[start] = best
    return best


def _better(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Fewer parts, then a longer last part (the compound's head)."""
    return (len(a), -len(a[-1])) < (len(b), -len(b[-1]))


def with_parts(tokens: Iterable[str]) -> list[str]:
    """The tokens followed by the parts of every compound among them."""
    out: list[str] = []
    for token in tokens:
        out.append(token)
        out.extend(split(token))
    return out
