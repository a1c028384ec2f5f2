"""Evidence: ranked candidates shaped as the contract's `/query_v2` results, and the last allow-list check.

`page` is the 1-based page in the file, what a PDF viewer shows and where a citation must send the
reader; `page_label` carries the printed label when the document defines one ("iv", "382"), and
`metadata.physical_page` repeats `page` for clients that read it there. `score` is the
reranker's score when the window was reranked, else the fused score, clipped to 0..1.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from app.evidence.query.records import Fused
from app.evidence.query.schemas import EvidenceItem
from app.text.entities import language_of_tokens

logger = logging.getLogger(__name__)


def citation_id(rank: int) -> str:
    """ "V2-<rank>", rank 1-based."""
    return f"V2-{rank}"


def display_page(page: int | None) -> int | None:
    """The page to show: the 1-based page in the file, None when there is none."""
    # Never the printed label: a manual's 438th page printed "382" sent readers 56 pages away.
    return page if page is not None and page >= 1 else None


def allowed_only(items: Sequence[Fused], allowed_file_ids: Collection[str]) -> tuple[list[Fused], int]:
    """The items whose file is in the request's allow-list, and how many were not (should be 0)."""
    allowed = set(allowed_file_ids)
    kept = [item for item in items if item.candidate.file_id in allowed]
    dropped = len(items) - len(kept)
    if dropped:
        # the SQL predicate should make this impossible; a non-zero count is a bug worth an alarm
        logger.error("V2 evidence held %d item(s) outside the request's allow-list; dropped", dropped)
    return kept, dropped


# The key of a document's metadata that maps each page OCR read (1-based, as a string) to OCR's mean
# confidence (0..1); the V2 document row stores it, a result shows its own page's value only.
OCR_PAGES = "ocr_pages"


def ocr_confidence(pages: object, page: int | None) -> float | None:
    """OCR's confidence in a chunk on `page` (a chunk never crosses a page); None for a text layer."""
    if not isinstance(pages, Mapping) or page is None:
        return None
    value = pages.get(str(page))
    return float(value) if isinstance(value, (int, float)) else None


def build_evidence(items: Sequence[Fused], allowed_file_ids: Collection[str], k: int) -> list[EvidenceItem]:
    """Up to k results, re-checked against the allow-list, numbered V2-1, V2-2, ... in order."""
    kept, _ = allowed_only(items, allowed_file_ids)
    out: list[EvidenceItem] = []
    for rank, item in enumerate(kept[:k], start=1):
        c, place, document = item.candidate, item.candidate.place, item.candidate.document
        metadata = dict(document.metadata)
        confidence = ocr_confidence(metadata.pop(OCR_PAGES, None), place.page)
        if confidence is not None:
            metadata.update(ocr=True, ocr_confidence=confidence)
        metadata.setdefault("chunk_id", c.chunk_id)
        if place.page is not None:
            metadata.setdefault("physical_page", place.page)
        out.append(
            EvidenceItem(
                citation_id=citation_id(rank),
                file_id=c.file_id,
                filename=document.filename,
                title=document.title,
                content=c.content,
                page=display_page(place.page),
                page_label=place.page_label,
                section=list(place.section),
                chunk_kind=place.kind,
                table_title=place.table_caption,
                row_label=place.row_label,
                headers=list(place.headers),
                row_values=list(place.row_values),
                units=list(place.units),
                footnotes=list(place.footnotes),
                source_type=document.source_type,
                channels=list(item.channels),
                score=min(max(float(item.final_score), 0.0), 1.0),
                language=language_of_tokens(c.search_text.split()) or document.language,
                publication_date=document.publication_date,
                metadata=metadata,
            )
        )
    return out
