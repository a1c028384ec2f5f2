"""`scripts/bench pdf-text`: how well each PDF text extractor keeps words apart, and how fast.

Run from the repository root (`scripts/test` or `scripts/serve` makes `.venv`):

    scripts/bench pdf-text                       # the PDFs found on this machine, 40 pages each
    scripts/bench pdf-text --pages 0 FILE.pdf    # every page of the named files

The corpus is what Debian installs: the Debian Reference (`debian-reference-en`, `-de`, TeX-typeset)
and the German TeX Live guides (`texlive-lang-german`), plus an office PDF this script writes as a
DOCX and converts with LibreOffice headless when `soffice` is installed. For every extractor and
file it prints the share of text lines holding a run of 30+ letters (words glued together), the
share of words not in the system word lists (`wamerican`, `wngerman`; German compounds keep this
above zero for every extractor, so compare rows, not the absolute figure), and milliseconds per page.
Nothing here asserts a figure; docs/decisions.md quotes them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.ingest.loaders.pdf import GLUED_RUN

DEFAULT_FILES = (
    Path("/usr/share/debian-reference/debian-reference.en.pdf"),
    Path("/usr/share/debian-reference/debian-reference.de.pdf"),
    Path("/usr/share/doc/texlive-doc/latex/lshort-german/l2kurz.pdf"),
    Path("/usr/share/doc/texlive-doc/generic/german/gerdoc.pdf"),
)
WORD_LISTS = (Path("/usr/share/dict/american-english"), Path("/usr/share/dict/ngerman"))
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")

Extractor = Callable[[Path, int], Iterator[str]]


def _pypdf(layout: bool) -> Extractor:
    def run(path: Path, pages: int) -> Iterator[str]:
        from pypdf import PdfReader

        for page in PdfReader(path).pages[: pages or None]:
            yield page.extract_text(extraction_mode="layout" if layout else "plain") or ""

    return run


def _pdfplumber(**options: object) -> Extractor:
    def run(path: Path, pages: int) -> Iterator[str]:
        import pdfplumber

        with pdfplumber.open(path) as pdf:
            for page in pdf.pages[: pages or None]:
                yield page.extract_text(**options) or ""
                page.close()

    return run


def _pdfium(path: Path, pages: int) -> Iterator[str]:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(path)
    try:
        for number in range(min(len(pdf), pages or len(pdf))):
            page = pdf[number]
            textpage = page.get_textpage()
            yield textpage.get_text_range()
            textpage.close()
            page.close()
    finally:
        pdf.close()


def _service(path: Path, pages: int) -> Iterator[str]:
    """What the service's loader stores (V1's per-page sections; pages without text left out)."""
    from app.ingest.loaders.pdf import load_pdf

    for section in load_pdf(path, path.name).sections:
        if pages and section.page is not None and section.page >= pages:
            break
        yield section.text


EXTRACTORS: dict[str, Extractor] = {
    "pypdf plain": _pypdf(layout=False),
    "pypdf layout": _pypdf(layout=True),
    "pdfplumber x_tolerance=3 (default)": _pdfplumber(),
    "pdfplumber x_tolerance=1.5": _pdfplumber(x_tolerance=1.5),
    "pdfplumber x_tolerance=1 use_text_flow": _pdfplumber(x_tolerance=1, use_text_flow=True),
    "pdfplumber x_tolerance_ratio=0.15": _pdfplumber(x_tolerance_ratio=0.15),
    "pypdfium2 text page": _pdfium,
    "service loader": _service,
}


@dataclass
class Score:
    """One extractor on one file."""

    lines: int
    glued_lines: int
    words: int
    unknown_words: int
    pages: int
    seconds: float

    @property
    def glued(self) -> float:
        """Share of non-empty lines with a run of 30+ letters."""
        return self.glued_lines / self.lines if self.lines else 0.0

    @property
    def unknown(self) -> float:
        """Share of words (2+ letters) in no word list."""
        return self.unknown_words / self.words if self.words else 0.0


def load_words() -> set[str]:
    """The system word lists, lower-cased (empty when none is installed)."""
    words: set[str] = set()
    for path in WORD_LISTS:
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace")
            words.update(w.strip().lower() for w in text.split())
    return words


def score(texts: list[str], words: set[str], seconds: float) -> Score:
    """Glued lines and unknown words of a file's page texts."""
    lines = [line for text in texts for line in text.splitlines() if line.strip()]
    tokens = [t for line in lines for t in _WORD.findall(line) if len(t) >= 2]
    # a word hyphenated at a line end is not the extractor's fault: count whole words only
    unknown = sum(1 for t in tokens if t.lower() not in words) if words else 0
    return Score(
        lines=len(lines),
        glued_lines=sum(1 for line in lines if GLUED_RUN.search(line)),
        words=len(tokens),
        unknown_words=unknown,
        pages=len(texts),
        seconds=seconds,
    )


def office_pdf(folder: Path) -> Path | None:
    """A justified English and German DOCX converted to PDF by LibreOffice; None without soffice."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        return None
    from docx import Document
    from docx.enum.text import WD_ALIGN_PARAGRAPH

    document = Document()
    document.add_heading("Betriebsanleitung Kompressor KX-200", level=1)
    paragraphs = [
        "Vor der ersten Inbetriebnahme ist die Druckluftleitung auf Dichtheit zu prüfen. Der "
        "Betriebsdruck darf 10 bar nicht überschreiten; die Sicherheitsventile sind jährlich von "
        "einer befähigten Person zu kontrollieren und das Ergebnis ist im Wartungsbuch einzutragen.",
        "Before commissioning, check the compressed air line for leaks. The operating pressure must "
        "not exceed 10 bar; the safety valves must be inspected yearly by a competent person and "
        "the result recorded in the maintenance log together with the serial number of the unit.",
    ]
    for n in range(12):
        heading = document.add_heading(f"{n + 1}. Wartung und Pflege / Maintenance", level=2)
        heading.alignment = WD_ALIGN_PARAGRAPH.LEFT
        for text in paragraphs:
            document.add_paragraph(text).alignment = WD_ALIGN_PARAGRAPH.JUSTIFY
    docx = folder / "office-export.docx"
    document.save(str(docx))
    subprocess.run(
        [soffice, "--headless", "--convert-to", "pdf", "--outdir", str(folder), str(docx)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    pdf = folder / "office-export.pdf"
    return pdf if pdf.exists() else None


def cut(path: Path, pages: int, folder: Path) -> Path:
    """The file's first `pages` pages as a PDF of their own (the file itself when pages is 0)."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(path)
    if not pages or len(reader.pages) <= pages:
        return path
    writer = PdfWriter()
    for page in reader.pages[:pages]:
        writer.add_page(page)
    out = folder / f"first-{pages}-{path.name}"
    writer.write(out)
    return out


def measure(files: list[Path], pages: int, names: list[str], folder: Path) -> list[tuple[str, str, Score]]:
    """Every named extractor on the first `pages` pages of every file (cut beforehand, untimed)."""
    words = load_words()
    rows = []
    for path in files:
        part = cut(path, pages, folder)
        for name in names:
            started = time.perf_counter()
            texts = list(EXTRACTORS[name](part, 0))
            rows.append((path.name, name, score(texts, words, time.perf_counter() - started)))
    return rows


def report(rows: list[tuple[str, str, Score]]) -> str:
    """A markdown table, one row per extractor and file, then the mean over files."""
    out = ["| file | extractor | pages | glued lines | unknown words | ms/page |", "|---" * 6 + "|"]
    for file, name, s in rows:
        out.append(
            f"| {file} | {name} | {s.pages} | {s.glued:.1%} | {s.unknown:.1%} | "
            f"{1000 * s.seconds / max(s.pages, 1):.1f} |"
        )
    out += ["", "| extractor | mean glued lines | mean unknown words | mean ms/page |", "|---|---|---|---|"]
    for name in dict.fromkeys(name for _, name, _ in rows):
        mine = [s for _, n, s in rows if n == name]
        out.append(
            f"| {name} | {statistics.mean(s.glued for s in mine):.1%} | "
            f"{statistics.mean(s.unknown for s in mine):.1%} | "
            f"{statistics.mean(1000 * s.seconds / max(s.pages, 1) for s in mine):.1f} |"
        )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Measure and print the table."""
    p = argparse.ArgumentParser(prog="scripts/bench pdf-text", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="PDFs (default: Debian's manuals found here)")
    p.add_argument("--pages", type=int, default=40, help="pages per file, 0 for all (%(default)s)")
    p.add_argument(
        "--extractors",
        default=",".join(EXTRACTORS),
        help="comma-separated names (default: all): " + "; ".join(EXTRACTORS),
    )
    p.add_argument("--no-office", action="store_true", help="skip the LibreOffice-exported PDF")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.extractors.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXTRACTORS]
    if unknown:
        p.error(f"unknown extractors: {unknown}")
    files = a.files or [f for f in DEFAULT_FILES if f.exists()]
    with tempfile.TemporaryDirectory() as folder:
        office = None if a.no_office or a.files else office_pdf(Path(folder))
        if office is not None:
            files.append(office)
        if not files:
            print("no PDF found: install debian-reference-en or name files", file=sys.stderr)
            return 2
        print(report(measure(files, a.pages, names, Path(folder))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
