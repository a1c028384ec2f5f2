"""The one text normalisation V2 uses at index time and at query time.

    normalize("B-DETECTION_PLUS / K 28") == normalize("b detection plus k 28") == "b detection plus k 28"
    normalize("K 25") != normalize("K 28")

Steps: Unicode NFKC (full-width and compatibility forms become plain ones), casefold, German
umlauts written out ("Ölfilter" and "Oelfilter" are one word, "oelfilter"; ß stays ß, so "Maße" and
"Masse" stay two words), then the text is cut into tokens: runs of letters (with their combining marks), runs
of digits (a `.` or `,` between two digits stays inside the number, written as `.`), and a few
symbols that carry meaning next to numbers (`%`, `‰`, `°`). Everything else (punctuation, `_`,
`-`, `/`, control characters, NUL, lone surrogates) separates tokens. A change between letters and
digits also separates them, so "K28", "K-28" and "K 28" are one form ("k 28") and "10mm" reads as
"10 mm". The normalised text is the tokens joined by single spaces, so `tokenize(text)` is exactly
`normalize(text).split()`: the SQL side can index `search_text` by splitting on spaces and rank with
the same terms as the BM25 reference.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata

# Symbols kept as tokens of their own: they change what a number means ("50 %" is not "50").
DEFAULT_KEEP_SYMBOLS = "%‰°"


@functools.cache
def _marks() -> str:
    """A regex class body of every combining mark (Mn, Mc, Me), built once on first use."""
    # Python's `re` has no \p{M}; without marks, scripts that write vowels as marks (Devanagari,
    # Thai) would split inside words. Ranges keep the class short.
    ranges: list[tuple[int, int]] = []
    # Marks live in planes 0-1 and in the variation selectors of plane 14; scanning only those
    # keeps the one-off cost near 0.1 s.
    for code in itertools.chain(range(0x20000), range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(code)) in ("Mn", "Mc", "Me"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges
    )


# The first combining mark is U+0300: a folded text with no character from there on has none.
_FIRST_MARK = "\u0300"


@functools.cache
def _token_pattern(keep_symbols: str, marks: bool = True) -> re.Pattern[str]:
    number = r"\d+(?:[.,]\d+)*"
    # with marks, a word is a run of letters and marks; the class of every mark is long (ranges up
    # to plane 14) and costs ~4x per character, so a text without marks uses the plain letter run
    word = rf"(?:[^\W\d_]|[{_marks()}])+" if marks else r"[^\W\d_]+"
    parts = [number, word]
    if keep_symbols:
        parts.append(f"[{re.escape(keep_symbols)}]")
    return re.compile("|".join(f"(?:{part})" for part in parts))


_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue"})


def fold(text: str) -> str:
    """NFKC, casefold except ß, umlauts written out: the character-level half of `normalize`."""
    text = unicodedata.normalize("NFKC", text).replace("ẞ", "ß")
    # casefold would turn ß into "ss" and merge distinct words (Maße, Masse): fold around it
    folded = "ß".join(part.casefold() for part in text.split("ß"))
    return folded.translate(_UMLAUTS)


def tokenize(text: str, keep_symbols: str = DEFAULT_KEEP_SYMBOLS) -> list[str]:
    """The search tokens of `text` (see the module docstring); decimal commas become points."""
    folded = fold(text)
    # max() of a str runs in C: most texts (English, German after folding) have no mark at all
    marks = bool(folded) and max(folded) >= _FIRST_MARK
    return [token.replace(",", ".") for token in _token_pattern(keep_symbols, marks).findall(folded)]


def normalize(text: str, keep_symbols: str = DEFAULT_KEEP_SYMBOLS) -> str:
    """The normalised form of `text`: its tokens joined by single spaces."""
    return " ".join(tokenize(text, keep_symbols))


# Short texts read again and again (the intent phrases of every question, the headings of the
# candidates a reranker window shares) are normalised once while they are among the last 4,096.
@functools.lru_cache(maxsize=4096)
def normalize_kept(text: str) -> str:
    """`normalize(text)` with the default symbols, kept for the texts seen last."""
    return normalize(text)


def contains_phrase(haystack_normalized: str, phrase_normalized: str) -> bool:
    """True when the normalised phrase occurs in the normalised text on token boundaries."""
    # "k 2" must not match inside "k 28": pad both with spaces so a match ends on a token boundary.
    if not phrase_normalized:
        return False
    return f" {phrase_normalized} " in f" {haystack_normalized} "
