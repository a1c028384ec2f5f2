"""Headings from a PDF's own structure (outline, else typography, else the words), never from code,
addresses or numbered list items; running headers and footers out of V2's prose, V1's text as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.ingest.loaders import load_document
from app.ingest.loaders.pdf_structure import (
    DocumentStructure,
    LineStyle,
    OutlineEntry,
    PageLines,
    guess_rule,
    is_heading_line,
    line_key,
    page_blocks,
    running_lines,
)
from app.ingest.types import LoadedDocument


@pytest.mark.parametrize(
    "line",
    [
        "7. Run the postinst script",  # a numbered list item
        "a) Remove the cover",
        "PATH=/usr/local/bin:/usr/bin",  # configuration
        "ListenAddress 0.0.0.0; Port 22",
        "$ sudo apt-get update",
        "# Comment Line",
        "Max-Mustermann-Str. 12",  # an address
        "D-70565 Stuttgart",
        "70565 Stuttgart",
        "Tel. +49 711 1234",
        "2.6 and 3.x kernel series",  # a sentence that starts with a number
    ],
)
def test_the_guess_never_takes_code_addresses_or_list_items(line: str) -> None:
    assert not is_heading_line(line, "The text goes on.")


@pytest.mark.parametrize(
    "line", ["2.1 Scope of Work", "INTRODUCTION", "Results and Discussion", "A.3 Document Format"]
)
def test_the_guess_still_takes_headings(line: str) -> None:
    assert is_heading_line(line, "The text goes on.")


def _pages(count: int, body: str = "Body text of page") -> list[str]:
    return [f"ACME Pump Manual {n + 1} / {count}\n{body} {n + 1}.\nPage {n + 1}" for n in range(count)]


def test_running_lines_are_found_and_split_off() -> None:
    texts = _pages(6)
    running = running_lines(texts)
    assert running.top == frozenset({"acme pump manual"}) and running.bottom == frozenset({"#"})
    blocks = page_blocks(texts[2], 2, guess_rule, running)
    assert [(b.kind, b.text, b.boilerplate) for b in blocks] == [
        ("paragraph", "ACME Pump Manual 3 / 6", "header"),
        ("paragraph", "Body text of page 3.", None),
        ("paragraph", "Page 3", "footer"),
    ]


def test_a_line_on_few_pages_is_not_running() -> None:
    texts = (
        ["Chapter 1\nIntroduction\nText."]
        + _pages(2, "Other text.")
        + ["Plain page\nwith text\nending here"] * 3
    )
    running = running_lines(texts)
    assert "chapter" not in running.top and "acme pump manual" not in running.top  # 1 and 2 of 6 pages


def test_outline_headings_win_over_guesses_and_wrapped_titles_join() -> None:
    pages = [
        PageLines("Chapter 2\nInstallation\nUNPACK THE BOX CAREFULLY\nThe pump ships in one box."),
        PageLines("2.1 Mounting the pump on\nthe base plate\nUse four bolts.\n2.2 Wiring\nConnect L and N."),
    ]
    outline = [
        OutlineEntry("Installation", 0, 0),
        OutlineEntry("Mounting the pump on the base plate", 1, 1),
        OutlineEntry("Wiring", 1, 1),
    ]
    structure = DocumentStructure.build(outline, pages)
    assert structure.source == "outline"
    first = page_blocks(pages[0].text, 0, structure.rule(0), structure.running)
    # "Chapter 2" joins its title; the capitals line is no heading, because the outline says so
    assert [(b.kind, b.text, b.level) for b in first] == [
        ("heading", "Installation", 1),
        ("paragraph", "UNPACK THE BOX CAREFULLY\nThe pump ships in one box.", None),
    ]
    second = page_blocks(pages[1].text, 1, structure.rule(1), structure.running)
    assert [(b.kind, b.text, b.level) for b in second] == [
        ("heading", "2.1 Mounting the pump on the base plate", 2),
        ("paragraph", "Use four bolts.", None),
        ("heading", "2.2 Wiring", 2),
        ("paragraph", "Connect L and N.", None),
    ]


def test_an_outline_that_is_not_on_its_pages_is_not_used() -> None:
    pages = [PageLines("Some text\nmore text")] * 2
    structure = DocumentStructure.build(
        [OutlineEntry("Elsewhere", 0, 0), OutlineEntry("Nowhere", 0, 1)], pages
    )
    assert structure.source == "guess"


def _styled(lines: dict[str, LineStyle]) -> PageLines:
    return PageLines("\n".join(lines), {line_key(line): style for line, style in lines.items()})


def test_typography_finds_headings_by_size_and_bold_numbering() -> None:
    body, bold = LineStyle(10, False), LineStyle(10, True)
    page = _styled(
        {
            "Safety Instructions": LineStyle(18, True),
            "Read these instructions before you install the pump and keep them.": body,
            "1.2 Electrical connection": bold,
            "The pump needs a separate fuse of 16 A and a residual current device.": body,
            "Note": bold,  # bold at body size, unnumbered: an admonition label
            "3. Tighten the four screws.": bold,  # a list item at body size
            "max_pressure = 6.5": LineStyle(10, False),
        }
    )
    structure = DocumentStructure.build([], [page])
    assert structure.source == "typography"
    blocks = page_blocks(page.text, 0, structure.rule(0), structure.running)
    assert [(b.text, b.level) for b in blocks if b.kind == "heading"] == [
        ("Safety Instructions", 1),
        ("1.2 Electrical connection", 2),
    ]


def test_one_size_and_no_bold_falls_back_to_the_guess() -> None:
    page = _styled({"2 Ratings": LineStyle(10, False), "Values are measured at 20 C.": LineStyle(10, False)})
    assert DocumentStructure.build([], [page]).source == "guess"


def _manual(path: Path, *, outline: bool) -> Path:
    """Three pages: a running header, a 16 pt chapter title and a 12 pt numbered section (in the
    outline when `outline`), body text, a numbered list and a configuration line at 10 pt."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    for number, (chapter, section) in enumerate(
        [("Installation", "1.1 Unpacking"), ("Operation", "2.1 Start-up"), ("Maintenance", "3.1 Filter")], 1
    ):
        pdf.add_page()
        pdf.set_font("Helvetica", size=9)
        pdf.text(20, 12, f"ACME Pump Manual {number} / 3")
        if outline:
            pdf.start_section(chapter, level=0)
        pdf.set_font("Helvetica", "B", size=16)
        pdf.text(20, 30, chapter)
        pdf.set_font("Helvetica", size=10)
        pdf.text(20, 40, f"This chapter covers {chapter.lower()} of the pump in everyday use.")
        pdf.text(20, 46, "1. Open the cover of the terminal box.")
        pdf.text(20, 52, "LISTEN_PORT=8080")
        if outline:
            pdf.start_section(section.split(" ", 1)[1], level=1)
        pdf.set_font("Helvetica", "B", size=12)
        pdf.text(20, 62, section)
        pdf.set_font("Helvetica", size=10)
        pdf.text(20, 72, f"Keep the original packing for transport and storage ({number}).")
    pdf.output(str(path))
    return path


def _headings(doc: LoadedDocument) -> list[tuple[int | None, str, int | None]]:
    return [(b.page, b.text, b.level) for b in doc.blocks if b.kind == "heading"]


@pytest.mark.parametrize("outline", [True, False])
def test_a_pdfs_headings_and_running_header(tmp_path: Path, outline: bool) -> None:
    doc = load_document(_manual(tmp_path / "manual.pdf", outline=outline), "manual.pdf", "application/pdf")
    assert _headings(doc) == [
        (0, "Installation", 1),
        (0, "1.1 Unpacking", 2),
        (1, "Operation", 1),
        (1, "2.1 Start-up", 2),
        (2, "Maintenance", 1),
        (2, "3.1 Filter", 2),
    ]
    headers = [b.text for b in doc.blocks if b.boilerplate == "header"]
    assert headers == ["ACME Pump Manual 1 / 3", "ACME Pump Manual 2 / 3", "ACME Pump Manual 3 / 3"]
    assert not any("ACME" in b.text for b in doc.blocks if b.boilerplate is None)
    assert {b.boilerplate for b in doc.blocks if "packing" in b.text} == {None}
    # V1's page text is what it was: the running header stays in it
    assert doc.sections[1].text.startswith("ACME Pump Manual 2 / 3\nOperation\n")
