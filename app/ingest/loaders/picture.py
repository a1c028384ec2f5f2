"""Pictures (PNG, JPEG, TIFF, and GIF, BMP, WebP): their text read by OCR, one section per frame.

A photo of a table, a nameplate, a scanned page saved as an image: each frame (the pages of a
multi-page TIFF) is one section with `page` its 0-based index, as a PDF page, and its metadata says
`ocr` and `ocr_confidence`. Pillow opens only these formats (never its EPS reader, which would run
Ghostscript), and the size a picture declares is checked before a pixel is decoded: a picture over
OCR_MAX_PIXELS is refused (413) at once, whatever its file size (a decompression bomb is a small
file that declares a huge picture). Frames are walked one by one up to OCR_MAX_PAGES, never counted
first (a TIFF can chain millions of them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from app.errors import NoExtractableText, RagError, UnsupportedFileType
from app.ingest.limits import ParseLimitExceeded, current_guard
from app.ingest.loaders.ocr import WORK_PIXELS, OcrReader, OcrText, turn_on_hint
from app.ingest.loaders.pdf import pdf_blocks
from app.ingest.loaders.pdf_ocr import pages_phrase
from app.ingest.types import Block, LoadedDocument, Section

logger = logging.getLogger(__name__)

FORMATS = ("PNG", "JPEG", "TIFF", "GIF", "BMP", "WEBP")
_CONTENT_TYPES = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "TIFF": "image/tiff",
    "GIF": "image/gif",
    "BMP": "image/bmp",
    "WEBP": "image/webp",
}
# A picture's read order: frames of an animated GIF are one picture moving, not pages.
_PAGED = ("TIFF",)


def load_picture(path: Path, filename: str) -> LoadedDocument:
    """The text of a picture's frames, read by OCR; 422 when OCR is off or finds nothing."""
    options = current_guard().limits.ocr
    reader = OcrReader(options, filename)
    if not reader.available:
        raise NoExtractableText(
            f"{filename} is a picture, and reading its text needs OCR: {reader.status.detail}. To "
            f"index it, {turn_on_hint(reader.status)}, or upload its text (or a PDF with a text layer)"
        )
    sections: list[Section] = []
    blocks: list[Block] = []
    read: dict[int, float] = {}
    empty: list[int] = []
    notes: list[str] = []
    with _opened(path, filename, options.max_pixels) as image:
        kind = image.format or "PNG"
        try:
            for number, frame in _frames(image, filename, options.max_pixels):
                if not reader.budget_left():
                    notes.append(
                        f"{pages_phrase([number])} and any after it were not read: {reader.stop_reason}"
                    )
                    break
                found = _read(reader, frame)
                if found is None or not found.text:
                    empty.append(number)
                    continue
                current_guard().add_chars(len(found.text))
                read[number] = found.confidence
                metadata = {"ocr": True, "ocr_confidence": found.confidence}
                sections.append(Section(text=found.text, page=number, metadata=metadata))
                blocks.extend(pdf_blocks(found.text, number))
        finally:
            reader.close()
    if not sections:
        raise NoExtractableText(
            f"OCR read no text in {filename}. Upload a sharper picture (the text upright, about "
            "30 pixels high or more) or the text itself"
        )
    if read:
        mean = sum(read.values()) / len(read)
        notes.insert(0, f"{pages_phrase(sorted(read))} read by OCR (mean confidence {mean:.2f})")
    if empty:
        notes.append(f"OCR found no text on {pages_phrase(empty)}")
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="image",
        content_type=_CONTENT_TYPES.get(kind, "application/octet-stream"),
        page_count=len(read) + len(empty),
        warnings=notes,
        unreadable_pages=empty,
        ocr_pages=read,
    )


@contextlib.contextmanager
def _opened(path: Path, filename: str, max_pixels: int) -> Iterator[Image.Image]:
    """The picture opened (its header parsed, no pixel decoded) and its declared size checked."""
    limit = Image.MAX_IMAGE_PIXELS
    # open() parses the header only: the size is checked right after, with a message that says it
    Image.MAX_IMAGE_PIXELS = None
    try:
        image = Image.open(path, formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        logger.debug("picture unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} could not be read as a picture: the file is damaged or a kind of picture "
            "this service does not read (it reads PNG, JPEG, TIFF, GIF, BMP and WebP). Save it as "
            "PNG or JPEG and upload it again"
        ) from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    try:
        yield image
    finally:
        image.close()


def _frames(image: Image.Image, filename: str, max_pixels: int) -> Iterator[tuple[int, Image.Image]]:
    """Each frame (one unless a TIFF has pages), its size checked before it is decoded."""
    number = 0
    while True:
        width, height = image.size
        if width * height > max_pixels:
            raise _too_large(filename, (width, height), max_pixels)
        yield number, image
        if image.format not in _PAGED:
            return
        number += 1
        try:
            image.seek(number)
        except EOFError:
            return


def _read(reader: OcrReader, frame: Image.Image) -> OcrText | None:
    pixels = frame.width * frame.height
    dpi = frame.info.get("dpi")
    if frame.format == "JPEG" and pixels > WORK_PIXELS:
        # a JPEG decodes at 1/2, 1/4 or 1/8 of its size for free: no more pixels than OCR reads
        factor = (WORK_PIXELS / pixels) ** 0.5
        frame.draft("L", (int(frame.width * factor), int(frame.height * factor)))
        dpi = None
    try:
        frame.load()
        return reader.read(frame, dpi=int(dpi[0]) if dpi and dpi[0] >= 70 else None)
    except (RagError, MemoryError):
        raise
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # a truncated or damaged frame
        logger.debug("picture frame unreadable: %s", exc)
        return None


def _too_large(filename: str, size: tuple[int, int], max_pixels: int) -> ParseLimitExceeded:
    return ParseLimitExceeded(
        f"{filename} was refused: the picture is {size[0]:,} x {size[1]:,} pixels, more than OCR reads "
        f"({max_pixels:,} pixels, OCR_MAX_PIXELS). Scale it down (a page at 300 dpi is about 9 million "
        "pixels) and upload it again, or ask the operator to raise the limit"
    )
