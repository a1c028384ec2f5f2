"""Navigation pages (tables of contents, lists of figures, indexes; HTML link pages, Sphinx indexes)
told apart from pages of content, and marked by the loaders for V1 (section metadata) and V2 (blocks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from selectolax.lexbor import LexborHTMLParser

from app.ingest.chunking import split_sections
from app.ingest.loaders import load_document
from app.ingest.loaders.navigation import HtmlPageStats, html_navigation, html_page_stats, pdf_navigation
from tests.fixtures.documents import make_pdf

LEADERS = "\n".join(
    [
        "Debian Reference v",
        "1 GNU/Linux tutorials 1",
        "1.1 Console basics . . . . . . . . . . . . . . . . . . 1",
        "1.1.1 The shell prompt . . . . . . . . . . . . . . . . 1",
        "1.1.2 The shell prompt under GUI . . . . . . . . . . . 2",
        "1.1.3 The root account . . . . . . . . . . . . . . . . 2",
        "1.2 Unix-like filesystem ................................ 7",
    ]
)
# the short last page of a contents: three entries with leaders, nearly every line an entry
LAST_CONTENTS_PAGE = "Debian Reference xvi\nA Appendix 232\nA.1 The Debian maze . . . . . . . . 232\n" + (
    "A.2 Copyright history . . . . . . . . 232\nA.3 Document format . . . . . . . . 233"
)
GERMAN_CONTENTS = (
    "Inhaltsverzeichnis\n1 Einleitung 3\n1.1 Zweck 3\n1.2 Geltungsbereich 4\n2 Sicherheit 7\n2.1 Symbole 8"
)
# no title, no leaders: a long run of entries whose page numbers ascend
BARE_CONTENTS = "\n".join(
    f"{n}.{m} Section about topic {n}{m} {10 * n + m}" for n in range(1, 4) for m in range(1, 6)
)
INDEX = "\n".join(
    [
        "Index",
        "apt-get, 45, 67-69",
        "aptitude, 46",
        "bash, 12",
        "boot loader, 101 ff.",
        "chroot, 203",
        "kernel, see Linux",
    ]
)
# an index page without its title (a later page): alphabetical entries ending in page numbers
INDEX_CONTINUED = "\n".join(
    f"{word}, {n}, {n + 40}"
    for n, word in enumerate(
        [
            "mount",
            "mutt",
            "nano",
            "netplan",
            "nfs",
            "nmap",
            "ntp",
            "openssl",
            "parted",
            "perl",
            "pip",
            "ps",
            "python",
        ],
        3,
    )
)
PROSE = (
    "The relief valve opens at 6.5 bar. It is checked every 400 hours.\n"
    "Replace the seal kit when the valve drips.\nSee section 4.2 for the torque values."
)
# a table of measurements: lines end in numbers, but they neither ascend nor sit under a title
MEASUREMENTS = "\n".join(f"Pump P{n} flow rate {n * 37 % 90}" for n in range(1, 15))
NUMBERED_STEPS = (
    "1. Open the cover.\n2. Remove the filter.\n3. Clean it in water.\n4. Put it back.\n5. Close the cover."
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (LEADERS, "toc"),
        (LAST_CONTENTS_PAGE, "toc"),
        (GERMAN_CONTENTS, "toc"),
        (BARE_CONTENTS, "toc"),
        ("List of Tables\n1.1 Sizes 5\n1.2 Weights 9\n2.1 Limits 14\n2.2 Units 20", "toc"),
        (INDEX, "index"),
        (
            "Stichwortverzeichnis\nAbdeckung, 12\nDichtung, 14, 30\nFilter, 22-24\nPumpe, siehe Förderpumpe",
            "index",
        ),
        (INDEX_CONTINUED, "index"),
        (PROSE, None),
        (MEASUREMENTS, None),
        (NUMBERED_STEPS, None),
        ("", None),
    ],
)
def test_pdf_navigation(text: str, kind: str | None) -> None:
    assert pdf_navigation(text) == kind


def test_a_page_of_prose_that_cites_pages_is_content() -> None:
    text = "Contents of the box\nThe box holds the pump, see page 12.\nThe manual is on page 3.\nKeep it dry."
    assert pdf_navigation(text) is None


@pytest.mark.parametrize(
    ("stats", "kind"),
    [
        (HtmlPageStats(text_chars=19_626, link_chars=18_252, links=900), "toc"),  # almost all links
        (HtmlPageStats(text_chars=163_140, link_chars=24_653, links=2_000), None),  # a reference page
        (HtmlPageStats(text_chars=60, link_chars=58, links=3), None),  # too few links to say
        (HtmlPageStats(text_chars=759, link_chars=215, links=30, index_table=True), "index"),
        (HtmlPageStats(text_chars=717, link_chars=147, links=10, search_page=True), "index"),
    ],
)
def test_html_navigation(stats: HtmlPageStats, kind: str | None) -> None:
    assert html_navigation(stats) == kind


def test_html_page_stats_leave_nav_out_and_find_sphinx_markers() -> None:
    markup = (
        "<body><nav><a href='/'>Home</a> <a href='/x'>Elsewhere</a></nav>"
        "<h1 id='index'>Index</h1><p>Some text <a href='#a'>here</a>.</p></body>"
    )
    body = LexborHTMLParser(markup).body
    assert body is not None
    stats = html_page_stats(body)
    assert (stats.links, stats.link_chars, stats.index_table, stats.search_page) == (1, 4, True, False)
    assert stats.text_chars == len("IndexSometexthere.")


def test_a_pdf_contents_page_is_marked_for_v1_and_v2(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "manual.pdf", [LEADERS, PROSE, INDEX])
    doc = load_document(path, "manual.pdf", "application/pdf")
    assert [s.metadata.get("navigation") for s in doc.sections] == ["toc", None, "index"]
    assert {b.boilerplate for b in doc.blocks if b.page == 0} == {"toc"}
    assert {b.boilerplate for b in doc.blocks if b.page == 1} == {None}
    assert {b.boilerplate for b in doc.blocks if b.page == 2} == {"index"}
    chunks = split_sections(doc.sections, 1500, 100)
    assert [(c.page, c.metadata.get("navigation")) for c in chunks] == [(0, "toc"), (1, None), (2, "index")]


def test_a_sphinx_index_page_is_marked_and_a_content_page_is_not(tmp_path: Path) -> None:
    entries = "".join(f"<tr><td><a href='lib.html#{n}'>entry {n}</a></td></tr>" for n in range(30))
    index = tmp_path / "genindex-A.html"
    index.write_text(
        "<html><body><h1 id='index'>Index &ndash; A</h1>"
        f"<table class='indextable'>{entries}</table></body></html>"
    )
    doc = load_document(index, index.name, "text/html")
    assert [s.metadata.get("navigation") for s in doc.sections] == ["index"]
    assert doc.blocks and all(b.boilerplate is not None for b in doc.blocks)
    page = tmp_path / "os.html"
    page.write_text(
        "<html><body><h1>os</h1>"
        "<p>Portable use of <a href='x'>operating system</a> functions.</p></body></html>"
    )
    doc = load_document(page, page.name, "text/html")
    assert [dict(s.metadata) for s in doc.sections] == [{}]
    assert all(b.boilerplate is None for b in doc.blocks)


def test_passages_inside_named_anchors_are_content_not_links(tmp_path: Path) -> None:
    """DocBook wraps whole tables in <a id> anchors (the Debian Reference's chapters): no links."""
    rows = "".join(
        f"<tr><td><a href='https://packages.debian.org/p{n}'>pkg{n}</a></td>"
        f"<td>does a long thing worth a sentence or two of description for package {n}</td></tr>"
        for n in range(40)
    )
    page = tmp_path / "ch06.en.html"
    page.write_text(
        "<html><body><h1>Network applications</h1><p>Some prose before the table.</p>"
        f"<a id='listofpackages'><p class='title'>Table 6.1. List of packages</p><table>{rows}</table></a>"
        "</body></html>"
    )
    doc = load_document(page, page.name, "text/html")
    assert [dict(s.metadata) for s in doc.sections] == [{}]
    assert all(b.boilerplate is None for b in doc.blocks)
