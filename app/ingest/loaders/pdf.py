"""PDF via pypdf: one section per page with text, `page` 0-based as rag_api's PyPDFLoader stores it.

pypdf caps what a single stream may inflate to (its `LimitReachedError`), which defends against
PDF decompression bombs; we add nothing on top.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from app.errors import UnsupportedFileType
from app.ingest.chunking import clean_text
from app.ingest.loaders.text import normalise_newlines
from app.ingest.types import Block, LoadedDocument, Section

logger = logging.getLogger(__name__)
# pypdf reports damaged files at WARNING, quoting raw bytes of the document; document content has
# no place in our logs, and the loader reports the problem itself.
logging.getLogger("pypdf").setLevel(logging.ERROR)

# A line that is probably a heading: short, no sentence punctuation at its end, and numbered
# ("2.1 Scope"), ALL CAPS, or a Title Case phrase.
_NUMBERED = re.compile(r"^(\d+(?:\.\d+){0,5})\.?\s+\S")
_MAX_HEADING_CHARS = 80
_MAX_LISTED_PAGES = 10


def load_pdf(path: Path, filename: str, *, extract_images: bool = False) -> LoadedDocument:
    """Load a PDF's text layer: one section per page that has text, metadata as PyPDFLoader's."""
    warnings: list[str] = []
    if extract_images:
        warnings.append(
            "PDF_EXTRACT_IMAGES is set, but reading text from images (OCR) is not supported; "
            "only the PDF's text layer was indexed"
        )
    reader = _open(path, filename)
    try:
        pages = list(reader.pages)
    except Exception as exc:
        # pypdf raises many exception types on damaged files (KeyError, ValueError, zlib.error...).
        logger.debug("pdf page tree unreadable: %s", exc)
        raise UnsupportedFileType(_damaged(filename)) from None
    labels = _page_labels(reader, len(pages))
    sections: list[Section] = []
    blocks: list[Block] = []
    empty: list[int] = []
    failed: list[int] = []
    for number, page in enumerate(pages):
        try:
            text = page.extract_text()
        except Exception as exc:
            logger.debug("pdf page %s unreadable: %s", number, exc)
            failed.append(number)
            continue
        text = normalise_newlines(clean_text(text or ""))
        if not text.strip():
            empty.append(number)
            continue
        metadata = {"total_pages": len(pages), "page_label": labels[number]}
        sections.append(Section(text=text, page=number, metadata=metadata))
        blocks.extend(pdf_blocks(text, number))
    if pages and len(failed) == len(pages):
        raise UnsupportedFileType(_damaged(filename))
    if failed:
        warnings.append(
            f"{_pages(failed)} could not be read and {'was' if len(failed) == 1 else 'were'} skipped"
        )
    if empty:
        warnings.append(
            f"{_pages(empty)} {'has' if len(empty) == 1 else 'have'} no extractable text "
            "(scanned images? OCR is not supported)"
        )
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="pdf",
        content_type="application/pdf",
        page_count=len(pages),
        title=_title(reader),
        warnings=warnings,
    )


def _open(path: Path, filename: str) -> PdfReader:
    try:
        reader = PdfReader(path)
    except Exception as exc:
        logger.debug("pdf unreadable: %s", exc)
        raise UnsupportedFileType(_damaged(filename)) from None
    if not reader.is_encrypted:
        return reader
    # Many PDFs are encrypted only to restrict printing or copying: their user password is empty.
    try:
        decrypted = reader.decrypt("") != PasswordType.NOT_DECRYPTED
    except DependencyError as exc:
        logger.debug("pdf decryption needs a crypto library: %s", exc)
        raise UnsupportedFileType(
            f"{filename} is encrypted with a cipher this server cannot open. "
            "Remove the encryption (for example, print it to a new PDF) and upload it again"
        ) from None
    except Exception as exc:
        logger.debug("pdf decryption failed: %s", exc)
        decrypted = False
    if not decrypted:
        raise UnsupportedFileType(
            f"{filename} is password-protected. Remove the password and upload it again"
        )
    return reader


def _damaged(filename: str) -> str:
    return (
        f"{filename} could not be read as a PDF: the file is damaged or not a PDF. "
        "Re-export or re-download it and upload it again"
    )


def _page_labels(reader: PdfReader, count: int) -> list[str]:
    """Printed page labels ("iv", "12"); page numbers from 1 when the label tree is unreadable."""
    try:
        labels = list(reader.page_labels)
    except Exception as exc:
        logger.debug("pdf page labels unreadable: %s", exc)
        labels = []
    if len(labels) != count:
        return [str(n + 1) for n in range(count)]
    return labels


def _title(reader: PdfReader) -> str | None:
    try:
        metadata: Any = reader.metadata
        title = metadata.title if metadata is not None else None
    except Exception as exc:
        logger.debug("pdf metadata unreadable: %s", exc)
        return None
    if not isinstance(title, str):
        return None
    return clean_text(title).strip() or None


def _pages(numbers: list[int]) -> str:
    """ "page 4" or "pages 1, 2, 3 and 7 more", numbered from 1 for people."""
    shown = ", ".join(str(n + 1) for n in numbers[:_MAX_LISTED_PAGES])
    if len(numbers) == 1:
        return f"page {shown}"
    rest = len(numbers) - _MAX_LISTED_PAGES
    return f"pages {shown}" + (f" and {rest} more" if rest > 0 else "")


def is_heading_line(line: str, next_line: str | None) -> bool:
    """Best-effort guess that a line of PDF text is a heading (pypdf gives no font information)."""
    line = line.strip()
    if not line or len(line) > _MAX_HEADING_CHARS or next_line is None or not next_line.strip():
        return False
    if line[-1] in ".,;:!?" or not (line[0].isupper() or line[0].isdigit()):
        return False
    words = line.split()
    if len(words) > 12:
        return False
    if _NUMBERED.match(line):
        return any(ch.isalpha() for ch in line)
    letters = [ch for ch in line if ch.isalpha()]
    if len(letters) >= 3 and all(ch.isupper() for ch in letters):
        return True
    capitalised = [w for w in words if w[0].isupper() or len(w) <= 3]
    return len(words) >= 2 and len(capitalised) == len(words) and len(line) <= 60


def pdf_blocks(text: str, page: int) -> list[Block]:
    """A page's text as paragraphs (split at blank lines and guessed headings) and headings."""
    blocks: list[Block] = []
    paragraph: list[str] = []

    def flush() -> None:
        body = "\n".join(paragraph).strip()
        if body:
            blocks.append(Block(kind="paragraph", text=body, page=page))
        paragraph.clear()

    lines = text.split("\n")
    for i, line in enumerate(lines):
        next_line = lines[i + 1] if i + 1 < len(lines) else None
        if not line.strip():
            flush()
        elif is_heading_line(line, next_line) and not paragraph:
            blocks.append(Block(kind="heading", text=line.strip(), page=page, level=_heading_level(line)))
        elif is_heading_line(line, next_line) and paragraph and paragraph[-1].rstrip()[-1:] in ".:!?":
            flush()
            blocks.append(Block(kind="heading", text=line.strip(), page=page, level=_heading_level(line)))
        else:
            paragraph.append(line)
    flush()
    return blocks


def _heading_level(line: str) -> int:
    numbered = _NUMBERED.match(line.strip())
    return numbered.group(1).count(".") + 1 if numbered else 1
