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

Only title and file name matches are document-level for certain: an entity match may carry the
detail "document_number" too, so document numbers keep their first chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.records import Candidate, Scored
from app.text.normalize import normalize
from app.text.stems import form_set, matches

DOCUMENT_MATCHES = frozenset({"title", "filename"})
# words for a kind of document ("the manual", "im Handbuch"): naming one, not asking in it ("file"
# is not one of them: "restore one file" asks in the document)
LOOKUP_WORDS = frozenset(
    {
        "document", "documents", "manual", "manuals", "datasheet", "guide", "guides", "handbook",
        "dokument", "dokumente", "dokuments", "handbuch", "handbuchs", "anleitung", "datenblatt",
    }
)  # fmt: skip
CONTENT_CHANNELS = ("lexical", "vector")


def _name_forms(candidate: Candidate) -> frozenset[str]:
    stem = candidate.document.filename.rsplit(".", 1)[0]
    return form_set(normalize(f"{candidate.document.title or ''} {stem}").split())


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
    named: dict[str, Scored] = {}
    for hit in exact:
        if hit.detail in DOCUMENT_MATCHES and hit.candidate.file_id not in named:
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
    kept = {
        hit.candidate.chunk_id: hit
        for hit in reversed(exact)  # reversed: a chunk listed twice keeps its first (best) hit
        if not (hit.detail in DOCUMENT_MATCHES and hit.candidate.file_id in moved)
    }
    for hit in (hit for hits in moved.values() for hit in hits):
        # a chunk the exact channel also found by its own label or entity keeps the better match
        own = kept.get(hit.candidate.chunk_id)
        if own is None or own.score < hit.score:
            kept[hit.candidate.chunk_id] = hit
    out["exact"] = sorted(kept.values(), key=lambda hit: -hit.score)
    return out
