"""Unanswerable identifier questions: real identifiers mutated until they occur nowhere in the corpus.

A mutation changes the last name part of an identifier (`os.path.join` -> `os.path.jion`) by one
seeded edit: swap two neighbouring letters, replace, insert or delete one letter. A mutant is
kept only when (a) the whole mutant, squashed (see `metrics.squash`), occurs in no indexed chunk,
and (b) its changed part is no word of the corpus: so neither a substring nor a token search can
find it, and any answer to it is the nearest neighbour of something else.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable, Sequence

from benchmarks.quality.bm25 import tokenize
from benchmarks.quality.metrics import squash

_PART = re.compile(r"[A-Za-z][A-Za-z0-9_]*$")
_LETTERS = string.ascii_lowercase


def mutate(ident: str, rng: random.Random) -> str | None:
    """One seeded edit of the last name part of `ident` (None when it has no part of 4+ letters)."""
    match = _PART.search(ident)
    if match is None or len(match.group()) < 4:
        return None
    head, part = ident[: match.start()], match.group()
    op = rng.choice(("swap", "replace", "insert", "delete"))
    # keep the first and last letters: the mutant stays plausible
    i = rng.randrange(1, len(part) - (2 if op == "swap" else 1))
    if op == "swap":
        new = part[:i] + part[i + 1] + part[i] + part[i + 2 :]
    elif op == "replace":
        new = part[:i] + rng.choice([c for c in _LETTERS if c != part[i].lower()]) + part[i + 1 :]
    elif op == "insert":
        new = part[:i] + rng.choice(_LETTERS) + part[i:]
    else:
        new = part[:i] + part[i + 1 :]
    return head + new  # may equal `ident` (a swap of equal letters): callers draw again


class AbsenceChecker:
    """Answers "does this string occur anywhere in the corpus?" over squashed text and word tokens."""

    def __init__(self, texts: Iterable[str]) -> None:
        texts = list(texts)
        # a separator no squashed text contains, so a match never spans two chunks
        self._blob = "\x00".join(squash(t) for t in texts)
        self._words: set[str] = set()
        for text in texts:
            self._words.update(tokenize(text))

    def absent(self, mutant: str) -> bool:
        """True when neither the squashed mutant nor its last part as a word occurs in the corpus."""
        if squash(mutant) in self._blob:
            return False
        match = _PART.search(mutant)
        part_tokens = tokenize(match.group()) if match else []
        return not any(t in self._words for t in part_tokens)


def mutants(
    idents: Sequence[str], checker: AbsenceChecker, count: int, seed: int, tries: int = 4
) -> list[tuple[str, str]]:
    """Up to `count` (mutant, original) pairs, originals drawn with the seed, each mutant verified absent."""
    rng = random.Random(seed)
    pool = list(dict.fromkeys(idents))
    rng.shuffle(pool)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for original in pool:
        if len(out) >= count:
            break
        for _ in range(tries):
            candidate = mutate(original, rng)
            if candidate is None:
                break
            if candidate == original or candidate in seen:
                continue
            if checker.absent(candidate):
                seen.add(candidate)
                out.append((candidate, original))
                break
    return out


_LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+(?![\w-])")


def long_options(texts: Iterable[str]) -> list[str]:
    """Hyphenated long options (`--no-clobber`) that occur in `texts`, first occurrence order."""
    seen: dict[str, None] = {}
    for text in texts:
        for m in _LONG_OPTION.finditer(text):
            seen.setdefault(m.group(), None)
    return list(seen)
