"""Per-document metadata of the V2 index: title, language, document number, revision, publication date.

The language comes from the document's properties when it declares one, else from its text; the
document number, revision and date from its first blocks, where title pages put them (page headers
and footers, boilerplate to the chunker, are read too: "Doc. No. 4711 Rev. C" often stands only
there); a date property (published, date, created) is the fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from app.ingest.types import LoadedDocument
from app.text.entities import EntityConfig, EntityExtractor, default_extractor, detect_language

_LANGUAGE_TAG = re.compile(r"^([A-Za-z]{2,3})(?:[-_][A-Za-z0-9]+)*$")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


@dataclass(frozen=True, slots=True)
class DocumentMetadata:
    """What the documents table stores about one document."""

    title: str
    language: str | None = None
    document_number: str | None = None
    revision: str | None = None
    publication_date: str | None = None


def document_title(document: LoadedDocument, filename: str) -> str:
    """The document's own title, else its first top-level heading, else the file name without extension."""
    if document.title and document.title.strip():
        return " ".join(document.title.split())
    headings = [
        b for b in document.blocks if b.kind == "heading" and b.boilerplate is None and b.text.strip()
    ]
    if headings:
        top = min(headings, key=lambda b: (b.level or 1, document.blocks.index(b)))
        return " ".join(top.text.split())
    return PurePath(filename).stem or filename


def document_metadata(
    document: LoadedDocument,
    filename: str,
    *,
    extractor: EntityExtractor | None = None,
    config: EntityConfig | None = None,
    head_blocks: int = 40,
) -> DocumentMetadata:
    """Title, language, document number, revision and publication date of one document."""
    extractor = extractor or default_extractor()
    config = config or extractor.config
    properties = {key.casefold(): value for key, value in document.properties.items()}
    language = None
    tag = _LANGUAGE_TAG.match(properties.get("language", "").strip())
    if tag:
        language = tag.group(1).casefold()
    if language is None:
        sample = " ".join(b.text for b in document.blocks if b.boilerplate is None)
        language = detect_language(
            sample,
            sample_tokens=config.language_sample_tokens,
            min_hits=config.language_min_hits,
            min_ratio=config.language_min_ratio,
        )
    number = revision = date = None
    for block in document.blocks[:head_blocks]:
        if block.boilerplate not in (None, "header", "footer"):
            continue
        for entity in extractor.extract(f"{block.term or ''} {block.text}", language):
            if entity.kind == "document_number" and number is None:
                number = entity.raw
            elif entity.kind == "revision" and revision is None:
                revision = entity.raw
            elif entity.kind == "date" and date is None:
                date = entity.normalized
    # a date printed on the title page beats the file's creation date
    for key in ("published", "date", "created", "creationdate"):
        found = _ISO_DATE.search(properties.get(key, "")) if date is None else None
        if found:
            date = "-".join(found.groups())
    return DocumentMetadata(
        title=document_title(document, filename),
        language=language,
        document_number=number,
        revision=revision,
        publication_date=date,
    )
