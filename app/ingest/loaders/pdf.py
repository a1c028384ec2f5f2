"""PDF: one section per page with text, `page` 0-based as rag_api's PyPDFLoader stores it.

The text is PDFium's (pypdfium2's text page): TeX and other typesetters position words without
space characters, and pypdf (rag_api's extractor) then returns whole justified lines as one token;
PDFium inserts the spaces the layout shows (docs/decisions.md has the measurements). pypdf opens the
file first (damage, encryption, page tree, labels, metadata) and is the fallback where PDFium cannot
read the file or a page. The blocks (V2) add what the layout shows: on pages that draw lines or
rectangles, pdfplumber finds ruled tables (header row, data rows) and the text around them is read
region by region, so no table text is repeated in a paragraph. Blocks carry the printed page label
when the PDF defines labels. A page with (almost) no text layer that draws something, a scan, is
read by OCR (`pdf_ocr.py`; its sections say `ocr` and `ocr_confidence`); with PDF_EXTRACT_IMAGES the
text of pictures on text pages is added. A page with a picture that gave no text is listed in
`unreadable_pages`. A navigation page (a table of contents, a list of figures, a back-of-book index:
`navigation.py`) says so in its section's `navigation` metadata, which keeps it out of V1's search
results, and its blocks are marked (`boilerplate="toc"` or `"index"`), which keeps them out of V2.

pypdf caps what a single stream may inflate to (its `LimitReachedError`); PDFium and pdfplumber
(pdfminer) have no such cap and run only on files pypdf could read, inside the worker's memory limit.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pypdfium2
from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError

from app.errors import NoExtractableText, RagError, UnsupportedFileType
from app.ingest.chunking import clean_text
from app.ingest.limits import current_guard
from app.ingest.loaders.navigation import pdf_navigation
from app.ingest.loaders.ocr import OcrReader
from app.ingest.loaders.pdf_ocr import PdfOcr
from app.ingest.loaders.pdf_ocr import pages_phrase as _pages
from app.ingest.loaders.render import render_table
from app.ingest.loaders.text import normalise_newlines
from app.ingest.types import Block, BoilerplateKind, LoadedDocument, Section

logger = logging.getLogger(__name__)
# pypdf reports damaged files at WARNING, quoting raw bytes of the document; document content has
# no place in our logs, and the loader reports the problem itself.
logging.getLogger("pypdf").setLevel(logging.ERROR)
logging.getLogger("pdfminer").setLevel(logging.ERROR)

# A line that is probably a heading: short, no sentence punctuation at its end, and numbered
# ("2.1 Scope"), ALL CAPS, or a Title Case phrase.
_NUMBERED = re.compile(r"^(\d+(?:\.\d+){0,5})\.?\s+\S")
_MAX_HEADING_CHARS = 80
# Path-painting operators (rectangles, lines): the page may draw a ruled table.
_DRAWS = re.compile(rb"(?:^|\s)(?:re|l)(?:\s|$)")
# pdfplumber joins characters closer than this (its default, 3 pt, glues TeX's narrow spaces).
_X_TOLERANCE = 1.5
# C0 controls but tab and newline: PDFium returns them for glyphs without a Unicode mapping.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# 30+ letters without a break: words glued together (German compounds rarely reach 30).
GLUED_RUN = re.compile(r"[^\W\d_]{30,}")


def load_pdf(path: Path, filename: str, *, extract_images: bool = False) -> LoadedDocument:
    """Load a PDF's text layer, OCR where it has none: one section per page that has text."""
    reader = _open(path, filename)
    try:
        pages = list(reader.pages)
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        # pypdf raises many exception types on damaged files (KeyError, ValueError, zlib.error...).
        logger.debug("pdf page tree unreadable: %s", exc)
        raise UnsupportedFileType(_damaged(filename)) from None
    walk = _PageWalk(path, filename, pages, _page_labels(reader, len(pages)), extract_images)
    walk.printed = walk.labels if _has_page_labels(reader) else None
    try:
        for number, page in enumerate(pages):
            walk.page(number, page)
    finally:
        walk.close()
    if pages and len(walk.failed) == len(pages):
        raise UnsupportedFileType(_damaged(filename))
    warnings = walk.warnings()
    if not walk.sections and walk.unreadable:
        raise NoExtractableText(walk.ocr.refusal(filename))
    return LoadedDocument(
        sections=walk.sections,
        blocks=walk.blocks,
        kind="pdf",
        content_type="application/pdf",
        page_count=len(pages),
        title=_title(reader),
        warnings=warnings,
        unreadable_pages=walk.unreadable,
        ocr_pages=walk.ocr.report.pages,
        properties=_properties(reader),
    )


class _PageWalk:
    """The pages of one PDF read in order: text layer, OCR where it is missing, layout, blocks."""

    def __init__(
        self, path: Path, filename: str, pages: list[PageObject], labels: list[str], images: bool
    ) -> None:
        self.filename = filename
        self.labels = labels
        self.printed: list[str] | None = None
        self.count = len(pages)
        self.guard = current_guard()
        self.sections: list[Section] = []
        self.blocks: list[Block] = []
        self.empty: list[int] = []
        self.failed: list[int] = []
        self.unreadable: list[int] = []
        self.layout = _Layout(path)
        self.text_layer = _TextLayer(path, len(pages))
        self.ocr = PdfOcr(self.text_layer.document, OcrReader(self.guard.limits.ocr, filename), images=images)

    def page(self, number: int, page: PageObject) -> None:
        """Read one page into sections and blocks, or note why it yielded nothing."""
        text = self.text_layer.page_text(number)
        if text is None:
            try:
                text = _pypdf_text(page)
            except (RagError, MemoryError):
                raise
            except Exception as exc:
                logger.debug("pdf page %s unreadable: %s", number, exc)
                self.failed.append(number)
                return
        self.guard.add_chars(len(text))
        scanned = None
        if self.ocr.wanted(number, text):
            scanned = self.ocr.read_page(number)
            if scanned is not None and scanned.text:
                text = scanned.text
                self.guard.add_chars(len(text))
            else:
                scanned = None
                if _has_image(page):
                    self.unreadable.append(number)
        if not text.strip():
            self.empty.append(number)
            if _has_image(page) and number not in self.unreadable:
                self.unreadable.append(number)
            return
        metadata: dict[str, object] = {"total_pages": self.count, "page_label": self.labels[number]}
        if scanned is not None:
            metadata.update(ocr=True, ocr_confidence=scanned.confidence)
        navigation = pdf_navigation(text)
        if navigation is not None:
            metadata["navigation"] = navigation
        self.sections.append(Section(text=text, page=number, metadata=metadata))
        if scanned is not None:
            page_blocks = pdf_blocks(text, number)
        else:
            page_blocks = (self.layout.blocks(number) if _draws(page) else None) or pdf_blocks(text, number)
        self._add_blocks(page_blocks, number, navigation)
        if scanned is None:
            self._pictures(number)

    def _add_blocks(self, page_blocks: list[Block], number: int, mark: BoilerplateKind | None) -> None:
        label = self.printed[number] if self.printed is not None else None
        self.blocks.extend(_with(block, label, mark) for block in page_blocks)

    def _pictures(self, number: int) -> None:
        """PDF_EXTRACT_IMAGES: the text of the page's pictures, after the page's own text."""
        found = self.ocr.read_images(number)
        if found is None:
            return
        self.guard.add_chars(len(found.text))
        metadata = {
            "total_pages": self.count,
            "page_label": self.labels[number],
            "ocr": True,
            "ocr_confidence": found.confidence,
        }
        self.sections.append(Section(text=found.text, page=number, metadata=metadata))
        self._add_blocks(pdf_blocks(found.text, number), number, None)

    def warnings(self) -> list[str]:
        """What the reader should know: pages skipped, read by OCR, or left without text."""
        notes: list[str] = []
        if self.failed:
            verb = "was" if len(self.failed) == 1 else "were"
            notes.append(f"{_pages(self.failed)} could not be read and {verb} skipped")
        notes.extend(self.ocr.notes(self.unreadable))
        blank = [n for n in self.empty if n not in self.unreadable]
        if blank:
            verb = "has" if len(blank) == 1 else "have"
            notes.append(f"{_pages(blank)} {verb} no extractable text and no picture (blank)")
        return notes

    def close(self) -> None:
        """Free the layout reader, PDFium's document and the OCR engine."""
        self.layout.close()
        self.ocr.reader.close()
        self.text_layer.close()


def _with(block: Block, label: str | None, mark: BoilerplateKind | None) -> Block:
    if label is None and mark is None:
        return block
    return dataclasses.replace(block, page_label=label, boilerplate=mark or block.boilerplate)


class _TextLayer:
    """PDFium's text of each page of a file pypdf could open; None where PDFium cannot read it."""

    def __init__(self, path: Path, page_count: int) -> None:
        self._pdf: pypdfium2.PdfDocument | None = None
        try:
            pdf = pypdfium2.PdfDocument(path, password="")
        except Exception as exc:  # pypdf's reading of the page tree stands, and its text with it
            logger.debug("pdfium cannot open the pdf: %s", exc)
            return
        if len(pdf) != page_count:  # the two disagree on a damaged page tree: keep pypdf's pages
            pdf.close()
            return
        self._pdf = pdf

    @property
    def document(self) -> pypdfium2.PdfDocument | None:
        """PDFium's document (None where PDFium cannot read the file): OCR renders its pages."""
        return self._pdf

    def page_text(self, number: int) -> str | None:
        """The page's text (words apart, lines joined where PDFium removed a hyphen), or None."""
        if self._pdf is None:
            return None
        try:
            page = self._pdf[number]
            try:
                textpage = page.get_textpage()
                try:
                    raw = textpage.get_text_range()
                finally:
                    textpage.close()
            finally:
                page.close()
        except MemoryError:
            raise
        except Exception as exc:
            logger.debug("pdfium cannot read page %s: %s", number, exc)
            return None
        return pdfium_text(raw)

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def pdfium_text(raw: str) -> str:
    """PDFium's page text made plain: LF line ends, no control characters, hyphenation undone.

    PDFium writes U+FFFE where it removed a hyphen at a line end and joins the lines: before a
    lower-case letter the word was split by hyphenation ("einge-bunden"), before anything else the
    hyphen is the word's own ("PDF-Format"), so it comes back.
    """
    text = _CONTROLS.sub("", normalise_newlines(clean_text(raw)))
    if "\ufffe" not in text:
        return text
    parts = text.split("\ufffe")
    out = [parts[0]]
    for part in parts[1:]:
        out.append(part if part[:1].islower() else "-" + part)
    return "".join(out)


def _pypdf_text(page: PageObject) -> str:
    return normalise_newlines(clean_text(page.extract_text() or ""))


class _Layout:
    """pdfplumber over the same file, opened on first use: tables and the text around them."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._pdf: Any = None
        self._failed = False

    def blocks(self, number: int) -> list[Block] | None:
        """The page's blocks in reading order when it holds a ruled table; None otherwise."""
        if self._failed:
            return None
        try:
            if self._pdf is None:
                import pdfplumber

                self._pdf = pdfplumber.open(self._path, password="")
            page = self._pdf.pages[number]
            try:
                return _layout_blocks(page, number)
            finally:
                page.close()  # pdfplumber caches every parsed object per page
        except (RagError, MemoryError):
            raise
        except Exception as exc:  # pdfminer on a file pypdf could read: keep pypdf's text
            logger.debug("pdf layout of page %s unreadable: %s", number, exc)
            self._failed = self._pdf is None
            return None

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _layout_blocks(page: Any, number: int) -> list[Block] | None:
    tables = sorted(page.find_tables(), key=lambda table: table.bbox[1])
    if not tables:
        return None
    blocks: list[Block] = []
    top = float(page.bbox[1])
    x0, bottom, x1 = float(page.bbox[0]), float(page.bbox[3]), float(page.bbox[2])
    for table in tables:
        blocks.extend(_region_blocks(page, (x0, top, x1, table.bbox[1]), number))
        block = _table_block(table.extract(x_tolerance=_X_TOLERANCE), number)
        if block is not None:
            blocks.append(block)
        top = max(top, float(table.bbox[3]))
    blocks.extend(_region_blocks(page, (x0, top, x1, bottom), number))
    return blocks


def _region_blocks(page: Any, bbox: tuple[float, float, float, float], number: int) -> list[Block]:
    if bbox[3] - bbox[1] < 1:
        return []
    text = page.within_bbox(bbox).extract_text(x_tolerance=_X_TOLERANCE) or ""
    return pdf_blocks(normalise_newlines(clean_text(text)), number)


def _table_block(raw: list[list[str | None]], number: int) -> Block | None:
    rows = [[" ".join((cell or "").split()) for cell in row] for row in raw]
    rows = [row for row in rows if any(row)]
    if not rows:
        return None
    current_guard().add_cells(sum(len(row) for row in rows))
    # A ruled table's first row is its header when every cell of it is filled and more rows follow.
    headers = rows[0] if len(rows) >= 2 and all(rows[0]) else None
    body = rows[1:] if headers is not None else rows
    return Block(kind="table", text=render_table(body, headers), page=number, rows=body, headers=headers)


def _draws(page: PageObject) -> bool:
    """True when the page paints lines or rectangles, itself or in a form XObject (a cheap test
    before layout analysis: a page of text and photos has no ruled table)."""
    try:
        contents = page.get_contents()
        data = contents.get_data() if contents is not None else b""
        return bool(_DRAWS.search(data)) or _xobjects_of(page.get("/Resources"), "/Form")
    except (RagError, MemoryError):
        raise
    except Exception:
        return False


def _has_image(page: PageObject) -> bool:
    """True when the page shows an image (directly or in a form XObject): a scan, not a blank page."""
    try:
        return _xobjects_of(page.get("/Resources"), "/Image", depth=2)
    except (RagError, MemoryError):
        raise
    except Exception:
        return False


def _xobjects_of(resources: Any, subtype: str, depth: int = 1) -> bool:
    """True when the resources hold an XObject of `subtype` (looking `depth` forms deep)."""
    resources = resources.get_object() if resources is not None else None
    xobjects = resources.get("/XObject") if resources is not None else None
    if xobjects is None or depth <= 0:
        return False
    xobjects = xobjects.get_object()
    for key in list(xobjects.keys())[:100]:
        xobject = xobjects[key].get_object()
        found = xobject.get("/Subtype")
        if found == subtype:
            return True
        if found == "/Form" and _xobjects_of(xobject.get("/Resources"), subtype, depth - 1):
            return True
    return False


def _has_page_labels(reader: PdfReader) -> bool:
    try:
        return "/PageLabels" in reader.trailer["/Root"].get_object()  # type: ignore[operator]
    except Exception:
        return False


def _properties(reader: PdfReader) -> dict[str, str]:
    """Author, subject, keywords and creation date from the document information, as strings."""
    try:
        metadata: Any = reader.metadata
        if metadata is None:
            return {}
        found = {
            "author": metadata.author,
            "subject": metadata.subject,
            "keywords": metadata.get("/Keywords"),
            "created": metadata.creation_date.isoformat() if metadata.creation_date else None,
        }
    except Exception as exc:
        logger.debug("pdf metadata unreadable: %s", exc)
        return {}
    return {key: clean_text(str(value)).strip() for key, value in found.items() if value}


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
