"""Glossary rows are context, never first evidence on their own.

A glossary-shaped table has one row per term: the term as its label ("Open", "Speichern"), a few
words explaining it. A question that uses the term in passing ("how do I open a saved project
from the start screen?") matches such a row through the exact channel (the label equals a
question word) and the lexical one (a short row scores high under BM25's length normalisation),
and the row outranked the passage that explains the task. Here, after the reranker: when the first
result is such a row and the question asks more than the term, the best other result among the
first five places that holds a question term beside the label (and is not the same table kept
whole) goes first and the row second; with none, the row stays first. Pure.

A row counts as a glossary row when its label is one or two ordinary English or German words of
three letters or more (`app.text.vocabulary.known`: a code such as "K28", a key such as "Ctrl Q"
or a tool's name keeps its place) and its other cells hold at most `max_words` words and no digit
(a value row such as "Voltage | 230 V" is an answer, not a term). The row stays first when the
question is about the term itself (its terms are the label's and words asking for a meaning: "what
does Open mean?", "was bedeutet Speichern?") or names an identifier (then it asks about names: a
row labelled "mean" in a table of functions is one).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.records import Candidate, Fused
from app.text.normalize import normalize
from app.text.stems import form_set, matches
from app.text.vocabulary import known

LABEL_WORDS = 2  # a label of more words names a thing, not a term
# words that ask what a term means: a question of the label and these is about the term itself
DEFINING = frozenset(
    {
        "mean", "means", "meaning", "meant", "define", "defined", "defines", "definition", "stand",
        "stands", "term", "terms", "word", "glossary", "bedeutet", "bedeuten", "bedeutung", "heißt",
        "heisst", "begriff", "definiert", "glossar", "abkuerzung",
    }
)  # fmt: skip
MIN_LETTERS = 3
WITHIN = 5  # the other item that goes first is one of this many first places


def _ordinary(word: str) -> bool:
    # a letter or two is a key or an abbreviation ("Ctrl Q", "ls"), not a term
    return len(word) >= MIN_LETTERS and word.isalpha() and known(word)


def glossary_label(candidate: Candidate, max_words: int) -> frozenset[str] | None:
    """The label words of a glossary row (see the module docstring); None for any other chunk."""
    place = candidate.place
    if place.kind != "table_row" or not place.row_label:
        return None
    label = normalize(place.row_label)
    words = label.split()
    if not words or len(words) > LABEL_WORDS or not all(_ordinary(w) for w in words):
        return None
    rest = normalize(" ".join(v for v in place.row_values if normalize(v) != label)).split()
    if len(rest) > max_words or any(ch.isdigit() for word in rest for ch in word):
        return None
    return frozenset(words)


def _table(candidate: Candidate) -> tuple[str, int | None, int | None]:
    place = candidate.place
    return (candidate.file_id, place.table_index, None if place.table_index is not None else id(candidate))


def glossary_rows_second(items: Sequence[Fused], query: QueryAnalysis, max_words: int) -> list[Fused]:
    """`items` with a glossary row in first place moved behind the best other item of the first
    WITHIN (see the module docstring; unchanged when `max_words` is 0)."""
    out = list(items)
    if max_words <= 0 or not out:
        return out
    label = glossary_label(out[0].candidate, max_words)
    # a question naming an identifier asks about names: a row labelled with a word may be one
    if label is None or query.names:
        return out
    rest = [t for t in query.terms if t not in label and t not in DEFINING]
    if not rest:
        return out
    table = _table(out[0].candidate)
    for j in range(1, min(WITHIN, len(out))):
        other = out[j].candidate
        # the glossary kept whole (a small table is a chunk of its own too) is no better first, nor
        # a passage holding none of what the question asks beside the term
        if (
            glossary_label(other, max_words) is None
            and _table(other) != table
            and any(matches(t, form_set(other.search_text.split())) for t in rest)
        ):
            out.insert(0, out.pop(j))
            break
    return out
