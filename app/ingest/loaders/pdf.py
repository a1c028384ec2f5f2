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
import pypdfium2.raw as pdfium_c
from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError

from app.errors import NoExtractableText, RagError, UnsupportedFileType
from app.ingest.chunking import clean_text
from app.ingest.limits import current_guard
from app.ingest.loaders.navigation import pdf_navigation
from app.ingest.loaders.ocr import OcrReader
from app.ingest.loaders.pdf_layout_speed import install as install_plain_first
from app.ingest.loaders.pdf_ocr import PdfOcr
from app.ingest.loaders.pdf_ocr import pages_phrase as _pages
from app.ingest.loaders.pdf_structure import (
    DocumentStructure,
    HeadingRule,
    LineStyle,
    OutlineEntry,
    PageLines,
    RunningLines,
    line_key,
    page_blocks,
)
from app.ingest.loaders.render import render_table
from app.ingest.loaders.text import normalise_newlines
from app.ingest.types import Block, BoilerplateKind, LoadedDocument, Section

logger = logging.getLogger(__name__)
# pypdf reports damaged files at WARNING, quoting raw bytes of the document; document content has
# no place in our logs, and the loader reports the problem itself.
logging.getLogger("pypdf").setLevel(logging.ERROR)
logging.getLogger("pdfminer").setLevel(logging.ERROR)

# Path-painting operators (rectangles, lines): the page may draw a ruled table.
_DRAWS = re.compile(rb"(?:^|\s)(?:re|l)(?:\s|$)")
# pdfplumber joins characters closer than this (its default, 3 pt, glues TeX's narrow spaces).
_X_TOLERANCE = 1.5
# C0 controls but tab and newline: PDFium returns them for glyphs without a Unicode mapping.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# bookmarks read at most (a hostile outline may hold millions), and the weight of a bold font
_MAX_OUTLINE = 20_000
_BOLD = 600
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
        walk.prepare()
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
        self.lines: list[PageLines | None] = []
        self.structure = DocumentStructure(RunningLines(), "guess")

    def prepare(self) -> None:
        """Read every page's text first: running headers, the outline's fit and the body size are
        decided over the whole document before any page becomes blocks."""
        self.lines = [self._lines(n) for n in range(self.count)]
        known = [lines or PageLines("") for lines in self.lines]
        self.structure = DocumentStructure.build(self.text_layer.outline(), known)

    def _lines(self, number: int) -> PageLines | None:
        lines = self.text_layer.page_lines(number)
        self.guard.reached_page(number)  # progress: the worker's time budget grows with the pages read
        return lines

    def page(self, number: int, page: PageObject) -> None:
        """Read one page into sections and blocks, or note why it yielded nothing."""
        self.guard.reached_page(number)
        lines = self.lines[number]
        text = lines.text if lines is not None else None
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
            found = pdf_blocks(text, number)
        else:
            rule, running = self.structure.rule(number), self.structure.running
            laid_out = self.layout.blocks(number, rule, running) if _draws(page) else None
            found = laid_out or page_blocks(text, number, rule, running)
        self._add_blocks(found, number, navigation)
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

    def page_lines(self, number: int) -> PageLines | None:
        """The page's text (words apart, lines joined where PDFium removed a hyphen) and the style
        of each line, or None."""
        if self._pdf is None:
            return None
        try:
            page = self._pdf[number]
            try:
                textpage = page.get_textpage()
                try:
                    raw = textpage.get_text_range()
                    styles = _line_styles(textpage, raw)
                finally:
                    textpage.close()
            finally:
                page.close()
        except MemoryError:
            raise
        except Exception as exc:
            logger.debug("pdfium cannot read page %s: %s", number, exc)
            return None
        return PageLines(pdfium_text(raw), styles)

    def outline(self) -> list[OutlineEntry]:
        """The document's bookmarks with a page, at most _MAX_OUTLINE of them; [] when unreadable."""
        if self._pdf is None:
            return []
        entries: list[OutlineEntry] = []
        try:
            for bookmark in self._pdf.get_toc(max_depth=8):
                destination = bookmark.get_dest()
                page = destination.get_index() if destination is not None else None
                title = " ".join(clean_text(bookmark.get_title() or "").split())
                if page is not None and title:
                    entries.append(OutlineEntry(title, bookmark.level, page))
                if len(entries) >= _MAX_OUTLINE:
                    break
        except MemoryError:
            raise
        except Exception as exc:
            logger.debug("pdf outline unreadable: %s", exc)
            return []
        return entries

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _line_styles(textpage: Any, raw: str) -> dict[str, LineStyle]:
    """The font size and weight of each line's first letter or digit, by the line's key."""
    styles: dict[str, LineStyle] = {}
    start = 0
    for line in raw.split("\n"):
        first = next((i for i, ch in enumerate(line) if ch.isalnum()), None)
        key = line_key(line)
        if first is not None and key and key not in styles:
            index = start + first
            size = pdfium_c.FPDFText_GetFontSize(textpage.raw, index)
            weight = pdfium_c.FPDFText_GetFontWeight(textpage.raw, index)
            styles[key] = LineStyle(round(float(size), 1), weight >= _BOLD)
        start += len(line) + 1
    return styles


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

    def blocks(self, number: int, rule: HeadingRule, running: RunningLines) -> list[Block] | None:
        """The page's blocks in reading order when it holds a ruled table; None otherwise."""
        if self._failed:
            return None
        try:
            if self._pdf is None:
                import pdfplumber

                install_plain_first()
                self._pdf = pdfplumber.open(self._path, password="")
            page = self._pdf.pages[number]
            try:
                return _layout_blocks(page, number, rule, running)
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


def _layout_blocks(page: Any, number: int, rule: HeadingRule, running: RunningLines) -> list[Block] | None:
    tables = sorted(page.find_tables(), key=lambda table: table.bbox[1])
    if not tables:
        return None
    blocks: list[Block] = []
    top = float(page.bbox[1])
    x0, bottom, x1 = float(page.bbox[0]), float(page.bbox[3]), float(page.bbox[2])
    for table in tables:
        t0, t_top, t1, t_bottom = (float(v) for v in table.bbox)
        blocks.extend(_region_blocks(page, (x0, top, x1, t_top), number, rule, running))
        if _text_beside(page, (t0, t_top, t1, t_bottom), x0, x1):
            # the rules frame only some of the table's columns (package names and descriptions left
            # and right of them): its rows would lose those words, so the band is read as text
            blocks.extend(_region_blocks(page, (x0, t_top, x1, t_bottom), number, rule, running))
        else:
            block = _table_block(table.extract(x_tolerance=_X_TOLERANCE), number)
            if block is not None:
                blocks.append(block)
        top = max(top, t_bottom)
    blocks.extend(_region_blocks(page, (x0, top, x1, bottom), number, rule, running))
    return blocks


def _text_beside(page: Any, bbox: tuple[float, float, float, float], x0: float, x1: float) -> bool:
    """True when words stand left or right of the ruled table's frame, at its height."""
    left, top, right, bottom = bbox
    for side in ((x0, top, left, bottom), (right, top, x1, bottom)):
        if side[2] - side[0] >= 1 and bottom - top >= 1:
            text = page.within_bbox(side).extract_text(x_tolerance=_X_TOLERANCE) or ""
            if any(ch.isalnum() for ch in text):
                return True
    return False


def _region_blocks(
    page: Any, bbox: tuple[float, float, float, float], number: int, rule: HeadingRule, running: RunningLines
) -> list[Block]:
    if bbox[3] - bbox[1] < 1:
        return []
    text = page.within_bbox(bbox).extract_text(x_tolerance=_X_TOLERANCE) or ""
    return page_blocks(normalise_newlines(clean_text(text)), number, rule, running)


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


def pdf_blocks(text: str, page: int) -> list[Block]:
    """A page's text as paragraphs and headings guessed from the words alone (OCR text)."""
    return page_blocks(text, page)
