"""Typed records that flow from the loaders to chunking and on to the index.

    load_document(path) -> LoadedDocument     (the service: await parse_in_worker(path, ...))
        .sections  what V1 chunks: a PDF page, a CSV row, a sheet, a slide, or a whole text
        .blocks    the structure in reading order (headings, paragraphs, tables...), for V2
    split_sections(sections) -> list[Chunk]

Everything here is plain data and pickles: a document crosses from the parsing worker process to
the service as a pickle, read back by an unpickler that accepts only these classes.

A chunk never crosses a section, so a chunk's page (or row, sheet, slide) is always exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal["heading", "paragraph", "table", "list_item", "code", "definition"]

# Why a loader marked a block as page furniture rather than content (V2 keeps it out of every
# embedded and lexical text). "toc" and "index" blocks come from navigation pages (a table of
# contents, a back-of-book or Sphinx index), which V1 keeps out of its results too.
BoilerplateKind = Literal["nav", "header", "footer", "toc", "index", "prev_next", "repeated"]


@dataclass(frozen=True, slots=True)
class Section:
    """One unit of text that chunking never crosses.

    `page` is the 0-based PDF page index, exactly as rag_api (PyPDFLoader) stores it; other formats
    leave it None and describe their unit in `metadata` instead: `{"row": 3}` (CSV, 0-based),
    `{"sheet": "Sales"}` (XLSX), `{"slide": 2}` (PPTX, 1-based).
    """

    text: str
    page: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Block:
    """A structural element of a document, in reading order.

    Tables carry their cells in `rows` (data rows only) and `headers` (the header row, when the
    format has one); `text` is always a readable rendering, so a consumer that ignores the cells
    still has the content. `level` is the heading depth (1 = top) or a list item's nesting depth.
    `title` names a table's caption or sheet, or a fenced code block's language. `page` is the
    0-based page index (PDF, form-feed pages of plain text); `page_label` the printed page label
    when the document has one. A `definition` block is one definition-list entry: `term` is the
    term and `text` its definition. `footnotes` are notes attached to a table. `boilerplate` is set
    when the loader recognised page furniture (navigation, header/footer bars, previous/next links,
    a table of contents); such blocks stay in the model so a consumer can decide, but V2 never
    indexes them.
    """

    kind: BlockKind
    text: str
    page: int | None
    level: int | None = None
    rows: list[list[str]] | None = None
    headers: list[str] | None = None
    title: str | None = None
    page_label: str | None = None
    term: str | None = None
    footnotes: tuple[str, ...] = ()
    boilerplate: BoilerplateKind | None = None


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """Everything a loader extracted from one file.

    A document with no text at all is valid: it has no sections and yields no chunks; whether that
    is an error is the caller's decision. Undecodable or unsupported files raise
    `UnsupportedFileType` instead of returning.
    """

    sections: list[Section]
    blocks: list[Block]
    kind: str
    content_type: str
    encoding: str | None = None
    page_count: int | None = None
    title: str | None = None
    warnings: list[str] = field(default_factory=list)
    # 0-based indexes of pages that show something but yielded no text, neither from a text layer nor
    # from OCR (a scan while OCR is off, a page OCR found nothing on or had no time left for)
    unreadable_pages: list[int] = field(default_factory=list)
    # 0-based indexes of pages (or a picture's frames) whose text OCR read, with its mean confidence
    # (0..1); the sections and blocks of those pages carry OCR's text
    ocr_pages: Mapping[int, float] = field(default_factory=dict)
    # document properties a format carries (author, created, subject, language, ...), as strings
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The whole text, sections joined by a newline (what rag_api's `POST /text` returns)."""
        return "\n".join(section.text for section in self.sections)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a section, ready to embed; `index` counts chunks across the whole document."""

    text: str
    index: int
    page: int | None
    metadata: Mapping[str, Any]
