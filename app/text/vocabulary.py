"""Is this a word of the language, or a name? English and German word lists (pyspellchecker's).

A question that names a tool, a package or a format the documents never mention ("an nftables
ruleset", "configure dnsmasq") should be refused, but such names are written in lower case like any
other word. A word that no English or German dictionary knows is a name; the refusal still asks the
visible chunks (a name they hold is no reason to refuse). The lists hold 160,000 English and
340,000 German word forms with their frequencies; they are loaded once, on first use (~1 s).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
from importlib import resources

LANGUAGES = ("en", "de")
# prefixes English builds new words with ("subfolders", "preinstalled", "misdetected"): a word of
# one of them and a known word is a word, not a name
_PREFIXES = frozenset("un re pre mis sub non de dis over under auto multi inter super self".split())
# endings a word list may lack in one inflection but hold in another ("disassembliere", "doesn")
_ENDINGS = ("n", "en", "e", "s", "es", "t", "st")


@functools.cache
def _words(language: str) -> frozenset[str]:
    """The language's word forms, lower case (pyspellchecker's resource file)."""
    data = resources.files("spellchecker").joinpath("resources", f"{language}.json.gz").read_bytes()
    return frozenset(json.loads(gzip.decompress(data)))


def english_words() -> frozenset[str]:
    """The English word forms, lower case."""
    return _words("en")


def german_words() -> frozenset[str]:
    """The German word forms, lower case, as written (umlauts, ß)."""
    return _words("de")


def known(word: str) -> bool:
    """True when `word` (as written: umlauts, not their spelt-out forms) is an English or German word."""
    lowered = word.lower()
    return any(lowered in _words(language) for language in LANGUAGES)


@functools.cache
def _sorted() -> tuple[str, ...]:
    """Every word form of both lists in order, for the prefix look-up of abbreviations."""
    return tuple(sorted(set().union(*(_words(language) for language in LANGUAGES))))


def _inflected(word: str) -> bool:
    """A known word with one of `_ENDINGS` added or removed."""
    for ending in _ENDINGS:
        if known(word + ending):
            return True
        if word.endswith(ending) and len(word) - len(ending) >= 4 and known(word[: -len(ending)]):
            return True
    return False


def _abbreviation(word: str) -> bool:
    """The start of a longer known word: "repo", "config", "admin"."""
    words = _sorted()
    i = bisect.bisect_left(words, word)
    return i < len(words) and words[i] != word and words[i].startswith(word)


def wordlike(word: str) -> bool:
    """True when `word` is a word or built of words; False for a name such as "lsgpu" or "httpx".

    Known in either list; an inflection of a known word; a known prefix or word of three letters
    or more followed by a known word, its inflection or its abbreviation ("subfolders", "codepage",
    "weggeflogen", "virtualenv"); or an abbreviation of a known word ("repo"). A tool's name built
    of words ("borgbackup") is wordlike here: only the introducer check ("with borgbackup") names it.
    """
    lowered = word.lower()
    if known(lowered) or _inflected(lowered):
        return True
    for i in range(2, len(lowered) - 2):
        head, tail = lowered[:i], lowered[i:]
        if (head in _PREFIXES or (len(head) >= 3 and known(head))) and (known(tail) or _inflected(tail)):
            return True
        # a word and a shortened one: "virtualenv" (virtual environment)
        if len(head) >= 3 and len(tail) >= 3 and known(head) and _abbreviation(tail):
            return True
    return _abbreviation(lowered)


def warm_up() -> None:
    """Load the word lists now rather than on the first question that needs them."""
    for language in LANGUAGES:
        _words(language)
    _sorted()
