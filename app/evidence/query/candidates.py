"""Channel hits as candidates: each found chunk shaped once, with its document's fields shared."""

from __future__ import annotations

from typing import Any

from app.evidence.query.evidence import OCR_PAGES
from app.evidence.query.records import Candidate, DocumentInfo, Scored
from app.evidence.store import channels as channels_sql


def candidate_lists(retrieval: channels_sql.Retrieval) -> dict[str, list[Scored]]:
    """Each channel that did not fail, its hits as scored candidates (hits without details left out)."""
    documents: dict[int, DocumentInfo] = {}
    candidates: dict[channels_sql.Key, Candidate] = {}
    for key, d in retrieval.details.items():
        # a document's fields are shaped once and shared by its chunks' candidates
        document = documents.get(d.document_id)
        if document is None:
            document = documents[d.document_id] = _document(d)
        candidates[key] = Candidate(
            chunk_id=d.chunk_id,
            file_id=d.file_id,
            content=d.content,
            search_text=d.search_text,
            place=d.place,
            document=document,
            entity_keys=d.entity_keys,
            document_id=d.document_id,
            ordinal=d.ordinal,
        )
    return {
        name: [
            Scored(candidates[(h.document_id, h.ordinal)], h.score, h.detail)
            for h in result.hits
            if (h.document_id, h.ordinal) in candidates
        ]
        for name, result in retrieval.channels.items()
        if result.error is None
    }


# what a result carries of its document's metadata (statistics and warnings stay in its row and log)
RESULT_METADATA = ("kind", "content_type", "page_count", "unreadable_pages")


def _document(detail: channels_sql.ChunkDetail) -> DocumentInfo:
    """What a result shows of a chunk's document."""
    suffix = detail.filename.rsplit(".", 1)[-1].lower() if "." in detail.filename else None
    metadata: dict[str, Any] = {k: detail.metadata[k] for k in RESULT_METADATA if k in detail.metadata}
    metadata.setdefault("index_source", detail.source)
    # the pages OCR read (1-based page -> confidence): the evidence gives each chunk its page's value
    if detail.metadata.get("ocr_pages"):
        metadata[OCR_PAGES] = detail.metadata["ocr_pages"]
    if detail.document_number:
        metadata.setdefault("document_number", detail.document_number)
    return DocumentInfo(
        filename=detail.filename,
        title=detail.title or None,
        language=detail.language,
        publication_date=detail.publication_date,
        source_type=suffix,
        metadata=metadata,
    )
