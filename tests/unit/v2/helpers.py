"""Small builders shared by the V2 query-side tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from app.evidence.query.records import Candidate, DocumentInfo, Fused
from app.text.chunk_records import ChunkPlace, ChunkRecord
from app.text.normalize import normalize

PLACE_FIELDS = frozenset(f.name for f in dataclasses.fields(ChunkPlace))
DOCUMENT_FIELDS = frozenset(f.name for f in dataclasses.fields(DocumentInfo))


def cand(
    chunk_id: str,
    file_id: str = "f1",
    content: str | None = None,
    *,
    search_text: str | None = None,
    entity_keys: frozenset[str] = frozenset(),
    **fields: Any,
) -> Candidate:
    """A candidate whose search text is its normalised content (unless given); the other keywords
    are its place's (`page`, `section`, `kind`, ...) or its document's (`title`, `filename`, ...)."""
    unknown = set(fields) - PLACE_FIELDS - DOCUMENT_FIELDS
    assert not unknown, f"not a place or document field: {sorted(unknown)}"
    text = content if content is not None else f"content of {chunk_id}"
    return Candidate(
        chunk_id=chunk_id,
        file_id=file_id,
        content=text,
        search_text=search_text or normalize(text),
        place=ChunkPlace(**{k: v for k, v in fields.items() if k in PLACE_FIELDS}),
        document=DocumentInfo(**{k: v for k, v in fields.items() if k in DOCUMENT_FIELDS}),
        entity_keys=entity_keys,
    )


def fused(candidate: Candidate, score: float, channels: tuple[str, ...] = ("vector",)) -> Fused:
    """A fused item with the given 0..1 score and provenance."""
    return Fused(
        candidate=candidate,
        score=score,
        channels=channels,
        ranks={c: 1 for c in channels},
    )


def from_chunk(chunk: ChunkRecord, file_id: str, filename: str, title: str) -> Candidate:
    """A candidate as the index would return the chunk."""
    return Candidate(
        chunk_id=chunk.id,
        file_id=file_id,
        content=chunk.content,
        search_text=chunk.search_text,
        place=chunk.place,
        document=DocumentInfo(filename=filename, title=title),
        entity_keys=frozenset(e.normalized for e in chunk.entities),
    )
