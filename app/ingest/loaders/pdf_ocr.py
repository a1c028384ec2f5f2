"""OCR inside PDFs: pages without a text layer, and (with PDF_EXTRACT_IMAGES) the pictures on pages.

A page is read by OCR when its text layer has fewer than OCR_MIN_CHARS non-space characters and it
draws something (an image, paths, or glyphs without a Unicode mapping): a scan, a page of outlined
text, a picture of a table. The threshold was measured on this machine's TeX-typeset PDFs (the
fewest characters on a page of text: 40, a part title) and on what scanners stamp on a scan (a page
number, "Scanned with ...": 5-25), see docs/performance.md.

The page is rendered by PDFium at OCR_DPI, scaled down to at most `WORK_PIXELS`; a page holding a
picture over OCR_MAX_PIXELS is not rendered at all (PDFium would decode it whole), and neither is
such a picture read on its own: both stay unread and are reported, the rest of the file is indexed.
With PDF_EXTRACT_IMAGES (rag_api's setting) the pictures on pages that have a text layer are read
too, and their text is added to the page, as rag_api's loader appends it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import pypdfium2
import pypdfium2.raw as pdfium_c

from app.errors import RagError
from app.ingest.loaders.ocr import WORK_PIXELS, OcrReader, OcrText, turn_on_hint

logger = logging.getLogger(__name__)

# Pictures smaller than this hold no line of text worth reading (bullets, rules, icons).
_MIN_IMAGE_SIDE = (48, 16)
_MIN_IMAGE_PIXELS = 4_000
# What a picture on a page of text must reach to be kept: photos without text read as noise.
_MIN_IMAGE_CONFIDENCE = 0.5
_MIN_IMAGE_ALNUM = 3
_MAX_LISTED_PAGES = 10


@dataclass(slots=True)
class PdfOcrReport:
    """What OCR did for one PDF: pages read (0-based, with confidence), and why others were not."""

    pages: dict[int, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    too_large: list[int] = field(default_factory=list)
    not_reached: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)


class PdfOcr:
    """OCR for the pages and pictures of one PDF, on the PDFium document its text came from."""

    def __init__(self, pdf: pypdfium2.PdfDocument | None, reader: OcrReader, *, images: bool) -> None:
        self.pdf = pdf
        self.reader = reader
        self.images = images
        self.report = PdfOcrReport()

    def wanted(self, number: int, text: str) -> bool:
        """True when the page's text layer is (almost) empty and the page draws something else."""
        if self.pdf is None or sum(1 for ch in text if not ch.isspace()) >= self.reader.options.min_chars:
            return False
        try:
            page = self.pdf[number]
        except Exception as exc:  # a page PDFium cannot load has nothing to render either
            logger.debug("pdf page %s not loaded for OCR: %s", number, exc)
            return False
        try:
            # text objects alone: their text layer is all there is (a short page, not a scan)
            return any(obj.type != pdfium_c.FPDF_PAGEOBJ_TEXT for obj in page.get_objects(max_depth=1))
        finally:
            page.close()

    def read_page(self, number: int) -> OcrText | None:
        """The rendered page's text; None when OCR is unavailable, spent, or the page is too large."""
        if self.pdf is None or not self.reader.available:
            return None
        if not self.reader.budget_left():
            self.report.not_reached.append(number)
            return None
        try:
            page = self.pdf[number]
        except Exception as exc:
            logger.debug("pdf page %s not loaded for OCR: %s", number, exc)
            return None
        try:
            largest = max((size for _, size in self._pictures(page)), key=_area, default=None)
            if largest is not None and _area(largest) > self.reader.options.max_pixels:
                self.report.too_large.append(number)
                return None
            dpi = self._dpi(page)
            image = page.render(scale=dpi / 72, grayscale=True).to_pil()
        except (RagError, MemoryError):
            raise
        except Exception as exc:  # PDFium could not draw it: the page stays unread, reported
            logger.debug("pdf page %s could not be rendered: %s", number, exc)
            return None
        finally:
            page.close()
        found = self.reader.read(image, dpi=dpi)
        if found is not None and found.timed_out:
            self.report.timed_out.append(number)
        if found is not None and found.text:
            self.report.pages[number] = found.confidence
        return found

    def read_images(self, number: int) -> OcrText | None:
        """The text of the pictures on a page with a text layer (PDF_EXTRACT_IMAGES), joined."""
        if not self.images or self.pdf is None or not self.reader.available:
            return None
        found: list[OcrText] = []
        try:
            page = self.pdf[number]
        except Exception as exc:
            logger.debug("pdf page %s not loaded for OCR: %s", number, exc)
            return None
        try:
            for picture, size in self._pictures(page):
                if _too_small(size):
                    continue
                if _area(size) > self.reader.options.max_pixels:
                    self.report.too_large.append(number)
                    continue
                if not self.reader.budget_left():
                    self.report.not_reached.append(number)
                    break
                text = self._read_picture(picture, number)
                if text is not None:
                    found.append(text)
        finally:
            page.close()
        if not found:
            return None
        confidence = sum(t.confidence for t in found) / len(found)
        self.report.pages.setdefault(number, round(confidence, 3))
        return OcrText(text="\n\n".join(t.text for t in found), confidence=round(confidence, 3))

    def notes(self, unreadable: list[int]) -> list[str]:
        """The log's and the answer's sentences: pages read by OCR, pictures that gave no text, why."""
        notes: list[str] = []
        if self.report.pages:
            mean = sum(self.report.pages.values()) / len(self.report.pages)
            verb = "was" if len(self.report.pages) == 1 else "were"
            read = pages_phrase(sorted(self.report.pages))
            notes.append(f"{read} {verb} read by OCR (mean confidence {mean:.2f})")
        if unreadable:
            verb = "shows" if len(unreadable) == 1 else "show"
            notes.append(f"{pages_phrase(unreadable)} {verb} a picture but gave no text: {self._why()}")
        return notes

    def refusal(self, filename: str) -> str:
        """The 422 detail for a PDF whose pages are all pictures, none of which gave text."""
        if not self.reader.available:
            return (
                f"{filename} has no text layer (its pages are scanned images), and reading them needs "
                f"OCR: {self.reader.status.detail}. To index it, {turn_on_hint(self.reader.status)}, "
                "or upload a PDF with a text layer"
            )
        if self.report.too_large:
            advice = "Scan it again at 300 dpi or less, or ask the operator to raise OCR_MAX_PIXELS"
        elif self.report.not_reached or self.report.timed_out:
            advice = "Split it into smaller files, or ask the operator to raise the limit"
        else:
            advice = "Upload a sharper scan (300 dpi, upright) or a PDF with a text layer"
        return f"{filename} has no text layer, and OCR read no text on its pages ({self._why()}). {advice}"

    def _why(self) -> str:
        reader, report = self.reader, self.report
        if not reader.available:
            return reader.status.detail
        reasons = []
        if report.too_large:
            verb = "holds" if len(report.too_large) == 1 else "hold"
            reasons.append(
                f"{pages_phrase(report.too_large)} {verb} a picture of more than "
                f"{reader.options.max_pixels:,} pixels (OCR_MAX_PIXELS)"
            )
        if report.timed_out:
            reasons.append(
                f"{pages_phrase(report.timed_out)} stopped at its deadline (OCR_PAGE_TIMEOUT_S or "
                "OCR_FILE_TIMEOUT_S)"
            )
        if report.not_reached and reader.stop_reason:
            reasons.append(f"{pages_phrase(report.not_reached)} not read: {reader.stop_reason}")
        return "; ".join(reasons) or "OCR found no text on them"

    def _read_picture(self, picture: pypdfium2.PdfImage, number: int) -> OcrText | None:
        try:
            image = picture.get_bitmap(render=True).to_pil()
        except (RagError, MemoryError):
            raise
        except Exception as exc:  # an image PDFium cannot decode: skipped
            logger.debug("pdf picture on page %s unreadable: %s", number, exc)
            return None
        text = self.reader.read(image)
        if text is None or text.confidence < _MIN_IMAGE_CONFIDENCE:
            return None
        if sum(1 for ch in text.text if ch.isalnum()) < _MIN_IMAGE_ALNUM:
            return None
        return text

    def _pictures(self, page: pypdfium2.PdfPage) -> Iterator[tuple[pypdfium2.PdfImage, tuple[int, int]]]:
        """The page's image objects (forms included) with their size in pixels, none decoded."""
        for picture in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=4):
            try:
                size = picture.get_px_size()
            except Exception as exc:  # no size: PDFium could not parse its dictionary, nor draw it
                logger.debug("pdf picture without a size: %s", exc)
                continue
            yield picture, size

    def _dpi(self, page: pypdfium2.PdfPage) -> int:
        """OCR_DPI, lowered where the page is so large that it would exceed `WORK_PIXELS`."""
        width, height = page.get_size()
        dpi = self.reader.options.dpi
        pixels = width * height * (dpi / 72) ** 2
        if pixels > WORK_PIXELS:
            dpi = max(1, int(dpi * (WORK_PIXELS / pixels) ** 0.5))
        return dpi


def pages_phrase(numbers: list[int]) -> str:
    """ "page 4" or "pages 1, 2, 3 and 7 more", numbered from 1 for people."""
    shown = ", ".join(str(n + 1) for n in numbers[:_MAX_LISTED_PAGES])
    if len(numbers) == 1:
        return f"page {shown}"
    rest = len(numbers) - _MAX_LISTED_PAGES
    return f"pages {shown}" + (f" and {rest} more" if rest > 0 else "")


def _too_small(size: tuple[int, int]) -> bool:
    return size[0] < _MIN_IMAGE_SIDE[0] or size[1] < _MIN_IMAGE_SIDE[1] or _area(size) < _MIN_IMAGE_PIXELS


def _area(size: tuple[int, int]) -> int:
    return int(size[0]) * int(size[1])
