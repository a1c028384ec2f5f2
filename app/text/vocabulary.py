"""Is this a word of the language, or a name? English and German word lists (pyspellchecker's).

A question that names a tool, a package or a format the documents never mention ("an nftables
ruleset", "configure dnsmasq") should be refused, but such names are written in lower case like any
other word. A word that no English or German dictionary knows is a name; the refusal still asks the
visible chunks (a name they hold is no reason to refuse). The lists hold 160,000 English and
340,000 German word forms with their frequencies; they are loaded once, on first use (~1 s).
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources

LANGUAGES = ("en", "de")


@functools.cache
def _words(language: str) -> frozenset[str]:
    """The language's word forms, lower case (pyspellchecker's resource file)."""
    data = resources.files("spellchecker").joinpath("resources", f"{language}.json.gz").read_bytes()
    return frozenset(json.loads(gzip.decompress(data)))


def known(word: str) -> bool:
    """True when `word` (as written: umlauts, not their spelt-out forms) is an English or German word."""
    lowered = word.lower()
    return any(lowered in _words(language) for language in LANGUAGES)


def warm_up() -> None:
    """Load the word lists now rather than on the first question that needs them."""
    for language in LANGUAGES:
        _words(language)
