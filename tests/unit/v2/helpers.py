"""Small builders shared by the V2 query-side tests."""

from __future__ import annotations

from app.ingest.v2.chunker import ChunkRecord
from app.search.v2.records import Candidate, Fused
from app.text.normalize import normalize


def cand(
    chunk_id: str,
    file_id: str = "f1",
    content: str | None = None,
    *,
    page: int | None = None,
    section: tuple[str, ...] = (),
    **fields: object,
) -> Candidate:
    """A candidate whose search text is its normalised content (unless given)."""
    text = content if content is not None else f"content of {chunk_id}"
    search = fields.pop("search_text", None) or normalize(text)
    return Candidate(
        chunk_id=chunk_id,
        file_id=file_id,
        content=text,
        search_text=search,  # type: ignore[arg-type]
        page=page,
        section=section,
        **fields,  # type: ignore[arg-type]
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
        kind=chunk.kind,
        filename=filename,
        title=title,
        page=chunk.page,
        page_label=chunk.page_label,
        section=chunk.section,
        table_caption=chunk.table_caption,
        table_index=chunk.table_index,
        row_index=chunk.row_index,
        row_label=chunk.row_label,
        headers=chunk.headers,
        row_values=chunk.row_values,
        units=chunk.units,
        footnotes=chunk.footnotes,
        entity_keys=frozenset(e.normalized for e in chunk.entities),
    )
