"""A document named in a question selects the document, not its first chunks.

The exact channel matches a document's title or file name against the question's phrases, and such
a match stands for the document's first chunks (its title page, where the name is printed). That
is the right answer to a question that is only the name ("Backup guide"), and the wrong one to a
question that names a document and asks something in it ("how do I restore one file with the
backup guide?"): the title page outranked the section that answers. Here, before fusion: when the
question holds terms beside the document's name (not its title or file name words, nor words
asking for a document, such as "manual" or "Handbuch") and the lexical or vector channel found
chunks of that document holding one of them, the match stands for those chunks instead (the best
`chunks` of them by their best rank in those channels) and the first chunks lose it. With no such
chunk, or no term beside the name, the match stays on the first chunks. Pure.

A document is named by a title or file name match, or by an entity match whose question keys are
all part of the document's title or file name (the model code "NB-7" of "NB-7 Backup Guide", matched
on its title page, where the name is printed): such hits of the document are moved the same way.
A document number keeps its first chunks (an entity match may carry the detail "document_number"
too), and a row label match stays where it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.records import Candidate, Scored
from app.text.normalize import contains_phrase, normalize
from app.text.stems import form_set, matches

DOCUMENT_MATCHES = frozenset({"title", "filename"})
NOT_NAMES = frozenset({"row_label", "document_number"})
# words for a kind of document ("the manual", "im Handbuch"): naming one, not asking in it ("file"
# is not one of them: "restore one file" asks in the document)
LOOKUP_WORDS = frozenset(
    {
        "document", "documents", "manual", "manuals", "datasheet", "guide", "guides", "handbook",
        "dokument", "dokumente", "dokuments", "handbuch", "handbuchs", "anleitung", "datenblatt",
    }
)  # fmt: skip
CONTENT_CHANNELS = ("lexical", "vector")


def document_name(candidate: Candidate) -> str:
    """The normalised title and file name (without its extension) of a candidate's document."""
    stem = candidate.document.filename.rsplit(".", 1)[0]
    return normalize(f"{candidate.document.title or ''} {stem}")


def _name_forms(candidate: Candidate) -> frozenset[str]:
    return form_set(document_name(candidate).split())


def names_document(hit: Scored, keys: Sequence[str]) -> bool:
    """True for an exact hit that stands for its document's name: a title or file name match, or an
    entity match whose question keys are all part of that name ("XY-200" in "XY-200 Handbuch")."""
    if hit.detail in DOCUMENT_MATCHES:
        return True
    if hit.detail in NOT_NAMES or hit.detail is None:
        return False
    held = [key for key in keys if key in hit.candidate.entity_keys]
    name = document_name(hit.candidate)
    return bool(held) and all(contains_phrase(name, key) for key in held)


def asked_beside_name(analysis: QueryAnalysis, candidate: Candidate) -> tuple[str, ...]:
    """The question's terms that are not the document's name nor words asking for a document."""
    named = _name_forms(candidate)
    return tuple(t for t in analysis.terms if t not in LOOKUP_WORDS and not matches(t, named))


def _holds(candidate: Candidate, terms: Sequence[str]) -> bool:
    place = candidate.place
    around = " ".join(filter(None, (*place.section, place.table_caption, place.row_label)))
    offered = form_set(f"{candidate.search_text} {normalize(around)}".split())
    return any(matches(t, offered) for t in terms)


def select_named_documents(
    lists: Mapping[str, Sequence[Scored]], analysis: QueryAnalysis, chunks: int
) -> dict[str, list[Scored]]:
    """The channel lists with each document-level exact match moved onto the named document's chunks
    that answer the rest of the question (see the module docstring); `chunks` 0: unchanged."""
    out = {name: list(hits) for name, hits in lists.items()}
    exact = out.get("exact")
    if not exact or chunks <= 0:
        return out
    keys = analysis.exact_keys
    named: dict[str, Scored] = {}
    for hit in exact:
        if hit.candidate.file_id not in named and names_document(hit, keys):
            named[hit.candidate.file_id] = hit
    if not named:
        return out
    # each named document's chunks the content channels found, by their best rank in any of them
    best: dict[str, dict[str, tuple[int, Candidate]]] = {doc: {} for doc in named}
    for channel in CONTENT_CHANNELS:
        for rank, hit in enumerate(out.get(channel, ())):
            found = best.get(hit.candidate.file_id)
            if found is None:
                continue
            seen = found.get(hit.candidate.chunk_id)
            if seen is None or rank < seen[0]:
                found[hit.candidate.chunk_id] = (rank, hit.candidate)
    moved: dict[str, list[Scored]] = {}
    for doc, match in named.items():
        rest = asked_beside_name(analysis, match.candidate)
        holding = [c for _, c in sorted(best[doc].values(), key=lambda rc: rc[0]) if rest and _holds(c, rest)]
        if holding:
            moved[doc] = [dataclasses.replace(match, candidate=c) for c in holding[:chunks]]
    if not moved:
        return out
    out["exact"] = _replaced(exact, moved, keys)
    return out


def _replaced(exact: Sequence[Scored], moved: dict[str, list[Scored]], keys: Sequence[str]) -> list[Scored]:
    """The exact list with each moved document's naming hits replaced, at the first one's place,
    by its moved hits; a chunk listed twice keeps its better match (a label or entity of its own)."""
    left = dict(moved)
    kept: dict[str, Scored] = {}
    for hit in exact:
        doc = hit.candidate.file_id
        if doc in moved and names_document(hit, keys):
            replacing = left.pop(doc, [])
        else:
            replacing = [hit]
        for new in replacing:
            own = kept.get(new.candidate.chunk_id)
            if own is None or own.score < new.score:
                kept[new.candidate.chunk_id] = new
    return sorted(kept.values(), key=lambda hit: -hit.score)
