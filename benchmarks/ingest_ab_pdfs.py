"""The PDFs `scripts/bench ingest-ab` uploads: Debian Reference chapters and generated manuals (en, de).

    pdfs = build_set("quick", cache)          # [(name, lang, path)], made once, then read from `cache`

A chapter is the Debian Reference HTML (/usr/share/debian-reference/<chapter>.<lang>.html) laid out
with fpdf2: headings, paragraphs, preformatted blocks and tables. A manual of N pages is made of the
same language's sentences, drawn by a seeded generator into chapters, sections, paragraphs and
small tables until page N is reached, so no page repeats another (a repeated block would be cheaper
to embed and dropped as boilerplate). Every PDF is named by a hash of what made it (the generator's
version, its source's bytes, the page count), so a second run reads it from the cache, and a changed
generator never reuses an old file. Core fonts only (Latin-1): the same bytes on every machine.
"""

from __future__ import annotations

import hashlib
import html.parser
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENERATOR_VERSION = "ingest-ab-pdfs-1"
DEBIAN_REFERENCE = Path("/usr/share/debian-reference")
CACHE = Path.home() / ".cache" / "ragoverlay" / "bench-ingest-ab" / "pdfs"
CHAPTERS = ("pr01", *(f"ch{n:02d}" for n in range(1, 13)), "apa")
# the sets: (chapters, manuals as (pages, language)); chapters come in both languages
SETS: dict[str, tuple[tuple[str, ...], tuple[tuple[int, str], ...]]] = {
    "quick": (("ch03", "ch04"), ((30, "en"),)),
    "middle": (("ch03", "ch04"), ((300, "en"), (300, "de"))),
    "full": (CHAPTERS, ((300, "en"), (300, "de"), (1400, "en"), (1400, "de"))),
    "big": ((), ((1400, "en"),)),  # the 1,400-page target alone
}
LANGUAGES = ("en", "de")
_BLOCKS = {"p", "h1", "h2", "h3", "h4", "li", "dt", "dd", "pre", "title", "div", "table", "tr"}
_SKIPPED_DIVS = {"navheader", "navfooter"}
_FIXED_DATE = datetime(2026, 1, 1, tzinfo=UTC)
_PUNCTUATION = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2013": "-",
     "\u2014": "-", "\u2026": "...", "\u00a0": " ", "\u2192": "->", "\u2022": "*", "\u2212": "-"}
)  # fmt: skip


@dataclass(frozen=True)
class Block:
    """One piece of a document: a heading (`h1`..`h4`), a paragraph (`p`), `pre` text or a table `row`."""

    kind: str
    text: str = ""
    cells: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchPdf:
    """One PDF of a set: its name in the report, its language, its file and its pages."""

    name: str
    lang: str
    path: Path
    pages: int


def latin1(text: str) -> str:
    """`text` as the core fonts can draw it: typographic punctuation made plain, the rest as `?`."""
    return text.translate(_PUNCTUATION).encode("latin-1", "replace").decode("latin-1")


class _Reader(html.parser.HTMLParser):
    """Blocks of a DocBook HTML page, in order (navigation headers and footers left out)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self._text: list[str] = []
        self._stack: list[str] = []
        self._skip = 0  # depth inside a skipped element (<head>, a navigation <div>)
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """A block starts: what came before it is one block."""
        if self._skip:
            self._skip += 1 if tag in ("div", "head") else 0
            return
        if tag == "head" or (tag == "div" and dict(attrs).get("class") in _SKIPPED_DIVS):
            self._skip = 1
            return
        if tag in _BLOCKS:
            self._flush()
            self._stack.append(tag)
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        """A block ends: its text is one block (a cell joins its row)."""
        if self._skip:
            self._skip -= 1 if tag in ("div", "head") else 0
            return
        if tag in ("td", "th") and self._row is not None:
            self._row.append(_squash("".join(self._text)))
            self._text = []
        elif tag == "tr" and self._row is not None:
            if any(self._row):
                self.blocks.append(Block("row", cells=tuple(self._row)))
            self._row = None
        if tag in _BLOCKS:
            self._flush()
            if self._stack:
                self._stack.pop()

    def handle_data(self, data: str) -> None:
        """Text of the current block."""
        if not self._skip:
            self._text.append(data)

    def _flush(self) -> None:
        if self._row is not None:
            return  # inside a table row: cells collect the text
        raw = "".join(self._text)
        self._text = []
        kind = self._stack[-1] if self._stack else "p"
        if kind == "pre":
            text = raw.strip("\n")
            if text.strip():
                self.blocks.append(Block("pre", text))
            return
        text = _squash(raw)
        if text:
            self.blocks.append(Block(kind if kind in ("h1", "h2", "h3", "h4") else "p", text))


def _squash(text: str) -> str:
    return " ".join(text.split())


def read_html(path: Path) -> list[Block]:
    """The blocks of one Debian Reference HTML page."""
    reader = _Reader()
    reader.feed(path.read_text(encoding="utf-8"))
    reader.close()
    return reader.blocks


def _new_pdf(title: str) -> Any:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_creation_date(_FIXED_DATE)  # the same bytes on every run
    pdf.set_title(latin1(title))
    pdf.set_producer("ragoverlay benchmarks")
    pdf.set_auto_page_break(True, margin=15)
    pdf.add_page()
    return pdf


def _heading(pdf: Any, level: int, text: str) -> None:
    pdf.set_font("Helvetica", "B", {1: 16, 2: 13, 3: 11}.get(level, 10))
    pdf.multi_cell(0, 7, latin1(text), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(1)


def _paragraph(pdf: Any, text: str) -> None:
    pdf.set_font("Helvetica", "", 10)
    pdf.multi_cell(0, 5, latin1(text), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)


def _pre(pdf: Any, text: str) -> None:
    pdf.set_font("Courier", "", 8)
    lines = [latin1(line)[:110] for line in text.splitlines()]
    pdf.multi_cell(0, 4, "\n".join(lines), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)


def _table(pdf: Any, rows: Sequence[Sequence[str]]) -> None:
    width = max(len(r) for r in rows)
    pdf.set_font("Helvetica", "", 8)
    with pdf.table(first_row_as_headings=True, line_height=4) as table:
        for cells in rows:
            row = table.row()
            for cell in [*cells, *[""] * (width - len(cells))]:
                row.cell(latin1(cell)[:400])
    pdf.ln(2)


def render(blocks: Iterable[Block], path: Path, title: str) -> None:
    """`blocks` laid out as a PDF at `path` (consecutive rows make one table)."""
    pdf = _new_pdf(title)
    rows: list[tuple[str, ...]] = []
    for block in [*blocks, Block("end")]:
        if block.kind == "row":
            rows.append(block.cells)
            continue
        if rows:
            _table(pdf, rows)
            rows = []
        if block.kind.startswith("h"):
            _heading(pdf, int(block.kind[1]), block.text)
        elif block.kind == "p":
            _paragraph(pdf, block.text)
        elif block.kind == "pre":
            _pre(pdf, block.text)
    pdf.output(str(path))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ])")


def sentence_pool(blocks: Iterable[Block]) -> tuple[list[str], list[str]]:
    """Sentences (40-300 characters) and section headings of `blocks`, in order, without repeats."""
    sentences: dict[str, None] = {}
    headings: dict[str, None] = {}
    for block in blocks:
        if block.kind in ("h2", "h3"):
            headings[re.sub(r"^[\d.]+\s*", "", block.text)] = None
        elif block.kind == "p":
            for sentence in _SENTENCE_END.split(block.text):
                if 40 <= len(sentence) <= 300:
                    sentences[sentence] = None
    return list(sentences), [h for h in headings if h]


def write_manual(path: Path, pages: int, sentences: Sequence[str], headings: Sequence[str], seed: str) -> int:
    """A manual of `pages` pages from `sentences` and `headings`, drawn by `seed`; its page count."""
    rng = random.Random(seed)
    pdf = _new_pdf(f"Manual of {pages} pages")
    chapter = section = 0
    paragraphs = 0
    while pdf.page_no() < pages:
        if paragraphs % 40 == 0:
            chapter, section = chapter + 1, 0
            if chapter > 1 and pdf.page_no() < pages - 1:
                pdf.add_page()
            _heading(pdf, 1, f"Chapter {chapter}. {rng.choice(headings)}")
        if paragraphs % 6 == 0:
            section += 1
            _heading(pdf, 2, f"{chapter}.{section}. {rng.choice(headings)}")
        _paragraph(pdf, " ".join(rng.sample(sentences, rng.randint(3, 6))))
        if paragraphs % 15 == 7:
            _table(pdf, _spec_table(rng, chapter, section))
        paragraphs += 1
    pdf.output(str(path))
    return int(pdf.page_no())


def _spec_table(rng: random.Random, chapter: int, section: int) -> list[tuple[str, ...]]:
    """A small ratings table whose rows differ from every other table's."""
    rows: list[tuple[str, ...]] = [("Model", "Power (kW)", "Weight (kg)", "Cache (MB)")]
    for n in range(rng.randint(3, 6)):
        rows.append(
            (
                f"K{chapter}-{section}{n}",
                f"{rng.uniform(0.5, 9.9):.1f}",
                str(rng.randint(3, 80)),
                str(rng.choice((64, 128, 256, 512, 1024))),
            )
        )
    return rows


def count_pages(path: Path) -> int:
    """Pages of a PDF (pypdf, which the service ships)."""
    from pypdf import PdfReader

    return len(PdfReader(str(path)).pages)


def cache_key(*parts: bytes | str) -> str:
    """12 hex digits of SHA-256 over the generator's version and `parts` (each length-prefixed)."""
    digest = hashlib.sha256(GENERATOR_VERSION.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:12]


def _cached(path: Path, make: Any) -> Path:
    """`path` made by `make(tmp_path)` unless it exists; written under another name, then renamed."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        make(tmp)
        tmp.replace(path)
    return path


def chapter_pdf(chapter: str, lang: str, cache: Path = CACHE, source: Path = DEBIAN_REFERENCE) -> Path:
    """The PDF of one Debian Reference chapter in `lang`, from the cache or made now."""
    html = source / f"{chapter}.{lang}.html"
    data = html.read_bytes()
    path = cache / f"debref-{chapter}-{lang}-{cache_key('chapter', data)}.pdf"
    return _cached(path, lambda tmp: render(read_html(html), tmp, f"Debian Reference {chapter} ({lang})"))


def manual_pdf(pages: int, lang: str, cache: Path = CACHE, source: Path = DEBIAN_REFERENCE) -> Path:
    """The generated manual of `pages` pages in `lang` (its sentences: every chapter's), cached."""
    htmls = [source / f"{c}.{lang}.html" for c in CHAPTERS]
    key = cache_key("manual", str(pages), *(h.read_bytes() for h in htmls))
    path = cache / f"manual-{pages}p-{lang}-{key}.pdf"

    def make(tmp: Path) -> None:
        blocks = [b for h in htmls for b in read_html(h)]
        sentences, headings = sentence_pool(blocks)
        write_manual(tmp, pages, sentences, headings, seed=f"{pages}-{lang}")

    return _cached(path, make)


def build_set(name: str, cache: Path = CACHE, source: Path = DEBIAN_REFERENCE) -> list[BenchPdf]:
    """Every PDF of set `name`, smallest kind first: chapters (en, de), then manuals."""
    chapters, manuals = SETS[name]
    out = []
    for chapter in chapters:
        for lang in LANGUAGES:
            path = chapter_pdf(chapter, lang, cache, source)
            out.append(BenchPdf(f"{chapter}.{lang}", lang, path, count_pages(path)))
    for pages, lang in manuals:
        path = manual_pdf(pages, lang, cache, source)
        out.append(BenchPdf(f"manual-{pages}p.{lang}", lang, path, count_pages(path)))
    return out


def variant(pdf: Path, folder: Path, tag: str) -> Path:
    """A copy of `pdf` whose bytes differ by a comment after %%EOF: a parse kept for one upload's
    bytes (the service keeps slow parses by SHA-256) is never read back for another's."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{pdf.stem}.{tag}.pdf"
    out.write_bytes(pdf.read_bytes() + f"\n%ragoverlay-bench {tag}\n".encode())
    return out
