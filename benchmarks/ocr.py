"""`scripts/bench ocr`: how well and how fast OCR reads scanned pages, English and German.

Run from the repository root (`scripts/test` or `scripts/serve` makes `.venv`):

    scripts/bench ocr                      # 3 pages of each PDF found, every variant
    scripts/bench ocr --pages 6 FILE.pdf   # 6 pages of the named files

The pages are real: the Debian Reference in English and German (`debian-reference-en`, `-de`) and
the German TeX Live guides (`texlive-lang-german`), pages with at least 800 characters spread over
each file. Each page is rendered by PDFium as a scanner would hand it over, in variants: clean at
150, 200 and 300 dpi; turned by 90 degrees and tilted by 2.5 degrees (200 dpi); "photographed"
(uneven light, blur, sensor noise, JPEG at quality 45; 200 dpi). Every variant is read by the
service's own OCR stage (`OcrReader`: Tesseract with OCR_LANGUAGES' default deu+eng, the
orientation check included) and, when the `rapidocr` package is importable, by RapidOCR for
comparison. Printed per engine, language and variant: the character error rate against the page's
text layer (Levenshtein distance over the text with whitespace collapsed, divided by its length;
reading order counts, so tables and side notes add error to every engine) and seconds per page.

Also printed: the text layer's non-space characters per page (what OCR_MIN_CHARS is set against) and
how long the hostile pictures of `tests/fixtures/scans.py` take to be refused. Nothing here asserts a
figure; docs/performance.md quotes them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pypdfium2
from PIL import Image, ImageFilter

DEFAULT_FILES = (
    Path("/usr/share/debian-reference/debian-reference.en.pdf"),
    Path("/usr/share/debian-reference/debian-reference.de.pdf"),
    Path("/usr/share/doc/texlive-doc/latex/lshort-german/l2kurz.pdf"),
    Path("/usr/share/doc/texlive-doc/generic/german/gerdoc.pdf"),
)
VARIANTS = ("150 dpi", "200 dpi", "300 dpi", "turned 90°", "tilted 2.5°", "photographed")
_MIN_PAGE_CHARS = 800

Reader = Callable[[Image.Image, int], str]


def levenshtein(a: str, b: str) -> int:
    """Edit distance (Myers' bit-parallel algorithm: one big-integer step per character of `a`)."""
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    masks: dict[str, int] = {}
    for i, ch in enumerate(b):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full, top = (1 << m) - 1, 1 << (m - 1)
    plus, minus, score = full, 0, m
    for ch in a:
        eq = masks.get(ch, 0)
        xv = eq | minus
        xh = (((eq & plus) + plus) ^ plus) | eq
        hp = minus | (~(xh | plus) & full)
        hm = plus & xh
        score += 1 if hp & top else 0
        score -= 1 if hm & top else 0
        hp = ((hp << 1) | 1) & full
        hm = (hm << 1) & full
        plus = hm | (~(xv | hp) & full)
        minus = hp & xv
    return score


def cer(found: str, reference: str) -> float:
    """Character error rate of `found` against `reference`, whitespace collapsed in both."""
    hyp, ref = " ".join(found.split()), " ".join(reference.replace("\ufffe", "").split())
    return levenshtein(hyp, ref) / max(1, len(ref))


@dataclass
class Page:
    """One rendered page of a PDF and its text layer."""

    file: str
    language: str
    number: int
    text: str


@dataclass
class Cell:
    """The measurements of one engine on one language and variant."""

    errors: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def _language(path: Path) -> str:
    return "en" if ".en." in path.name else "de"


def pick_pages(path: Path, count: int) -> tuple[list[Page], list[int]]:
    """`count` pages with enough text, spread over the file; and every page's non-space characters."""
    from app.ingest.loaders.pdf import pdfium_text

    pdf = pypdfium2.PdfDocument(path)
    try:
        texts = []
        for number in range(len(pdf)):
            page = pdf[number]
            textpage = page.get_textpage()
            texts.append(pdfium_text(textpage.get_text_range()))
            textpage.close()
            page.close()
    finally:
        pdf.close()
    sizes = [sum(1 for ch in text if not ch.isspace()) for text in texts]
    candidates = [n for n, size in enumerate(sizes) if size >= _MIN_PAGE_CHARS]
    step = max(1, len(candidates) // max(1, count))
    chosen = candidates[step // 2 :: step][:count]
    return [Page(path.name, _language(path), n, texts[n]) for n in chosen], sizes


def render(path: Path, number: int, dpi: int) -> Image.Image:
    """A page rendered in gray at `dpi`."""
    pdf = pypdfium2.PdfDocument(path)
    try:
        image: Image.Image = pdf[number].render(scale=dpi / 72, grayscale=True).to_pil()
    finally:
        pdf.close()
    return image


def photographed(image: Image.Image) -> Image.Image:
    """What a phone camera adds: uneven light, blur, sensor noise, JPEG compression."""
    pixels = np.asarray(image, dtype=np.float32)
    height, width = pixels.shape
    light = 0.75 + 0.25 * np.linspace(0.0, 1.0, width)[None, :] * np.linspace(0.0, 1.0, height)[:, None]
    blurred = Image.fromarray(np.clip(pixels * light, 0, 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(1.2)
    )
    noisy = np.asarray(blurred, dtype=np.float32) + np.random.default_rng(1).normal(0, 12, (height, width))
    with tempfile.SpooledTemporaryFile() as buffer:
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=45)
        buffer.seek(0)
        with Image.open(buffer) as jpeg:
            gray: Image.Image = jpeg.convert("L")
    return gray


def variant(path: Path, number: int, name: str) -> tuple[Image.Image, int]:
    """The page as the variant shows it, and the resolution it was rendered at."""
    if name.endswith("dpi"):
        dpi = int(name.split()[0])
        return render(path, number, dpi), dpi
    image = render(path, number, 200)
    if name.startswith("turned"):
        return image.rotate(90, expand=True, fillcolor=255), 200
    if name.startswith("tilted"):
        return image.rotate(2.5, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC), 200
    return photographed(image), 200


def tesseract_reader() -> Reader:
    """The service's own OCR stage, with its default options."""
    from app.ingest.limits import OcrOptions
    from app.ingest.loaders.ocr import OcrReader

    def read(image: Image.Image, dpi: int) -> str:
        reader = OcrReader(OcrOptions(max_pages=1_000_000, file_timeout_s=86_400), "bench")
        try:
            found = reader.read(image, dpi=dpi)
        finally:
            reader.close()
        return found.text if found is not None else ""

    return read


def rapidocr_reader() -> Reader | None:
    """RapidOCR (3.x, models in its wheel) when it is installed here, for comparison."""
    try:
        from rapidocr import RapidOCR  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    engine = RapidOCR()

    def read(image: Image.Image, dpi: int) -> str:
        result = engine(np.asarray(image.convert("RGB")))
        return "\n".join(result.txts or ())

    return read


def hostile_refusals() -> list[tuple[str, float, str]]:
    """How long each hostile picture takes to be refused by the loaders, in milliseconds."""
    from app.errors import RagError
    from app.ingest.loaders import load_document
    from tests.fixtures.scans import jpeg_declaring, pdf_with_huge_picture, png_bomb

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        builds = (
            ("PNG 30,000 x 30,000 (110 KB)", "bomb.png", png_bomb),
            ("JPEG declaring 30,000 x 30,000", "huge.jpg", lambda p: jpeg_declaring(p, 30_000, 30_000)),
            ("PDF page showing a 30,000 x 30,000 picture", "bomb.pdf", pdf_with_huge_picture),
        )
        for label, name, build in builds:
            path = build(Path(folder) / name)
            started = time.perf_counter()
            try:
                load_document(path, name)
                outcome = "read"
            except RagError as exc:
                outcome = str(exc.status_code)
            rows.append((label, (time.perf_counter() - started) * 1000, outcome))
    return rows


def main(argv: list[str]) -> int:
    """Run the OCR benchmark and print its tables."""
    parser = argparse.ArgumentParser(prog="scripts/bench ocr", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="PDFs with a text layer (default: Debian's)")
    parser.add_argument("--pages", type=int, default=3, help="pages per file (%(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants")
    args = parser.parse_args(argv)
    files = [f for f in (args.files or DEFAULT_FILES) if f.is_file()]
    if not files:
        parser.error("no PDF found: install debian-reference-en and -de, or name files")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    readers: dict[str, Reader] = {"tesseract (kept)": tesseract_reader()}
    rapid = rapidocr_reader()
    if rapid is not None:
        readers["rapidocr"] = rapid
    print(f"load average {os.getloadavg()[0]:.1f} at the start; {os.cpu_count()} cores\n")
    print("| file | pages | fewest non-space characters on a page with any text (5 lowest) |")
    print("| --- | --- | --- |")
    pages: list[tuple[Path, Page]] = []
    for path in files:
        chosen, sizes = pick_pages(path, args.pages)
        pages.extend((path, page) for page in chosen)
        lowest = sorted(size for size in sizes if size)[:5]
        print(f"| {path.name} | {len(sizes)} | {', '.join(map(str, lowest))} |")
    cells: dict[tuple[str, str, str], Cell] = {}
    for path, page in pages:
        for name in variants:
            image, dpi = variant(path, page.number, name)
            for engine, read in readers.items():
                started = time.perf_counter()
                text = read(image, dpi)
                cell = cells.setdefault((engine, page.language, name), Cell())
                cell.seconds.append(time.perf_counter() - started)
                cell.errors.append(cer(text, page.text))
    print(f"\n{len(pages)} pages; character error rate (mean, worst page) and seconds per page (median)\n")
    print("| engine | variant | CER en | CER de | s/page en | s/page de |")
    print("| --- | --- | --- | --- | --- | --- |")
    for engine in readers:
        for name in variants:
            row = [cells.get((engine, lang, name)) for lang in ("en", "de")]
            errors = [f"{statistics.mean(c.errors):.1%} ({max(c.errors):.1%})" if c else "-" for c in row]
            seconds = [f"{statistics.median(c.seconds):.2f}" if c else "-" for c in row]
            print(f"| {engine} | {name} | {errors[0]} | {errors[1]} | {seconds[0]} | {seconds[1]} |")
    print("\n| hostile picture | refused in | status |\n| --- | --- | --- |")
    for label, ms, outcome in hostile_refusals():
        print(f"| {label} | {ms:.1f} ms | {outcome} |")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0
