"""The document model (V2's input): headings, pages and labels, tables with captions, headers and
footnotes, definitions and boilerplate marks land right in every format; V1's text is unchanged."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.ingest.loaders import load_document
from app.ingest.types import Block
from tests.fixtures.documents import make_html, make_text, make_xlsx

PAGE = """
<header><a href="/">Example site</a> <a href="/docs">Docs</a></header>
<nav aria-label="breadcrumb"><a href="/">Home</a> &gt; <a href="/m">Manual</a></nav>
<div class="navheader"><table><tr><th colspan="3">Chapter 3. Settings</th></tr>
<tr><td><a accesskey="p" href="ch2.html">Prev</a></td><td>Chapter 3</td>
<td><a accesskey="n" href="ch4.html">Next</a></td></tr></table></div>
<main>
<h1>Settings</h1>
<div class="toc"><ul><li><a href="#a">Limits</a></li><li><a href="#b">Units</a></li></ul></div>
<p>Set <code>max</code>_size to limit uploads.</p>
<h2 id="a">Limits</h2>
<table><caption>Table 3.1. <em>Upload</em> limits</caption>
<thead><tr><th>Name</th><th>Default</th></tr></thead>
<tbody><tr><td><code>max</code>_size</td><td>100&nbsp;MB</td></tr>
<tr><td>time<b>out</b></td><td>30 s</td></tr></tbody>
<tfoot><tr><td colspan="2">Sizes in MB (10^6 bytes).</td></tr></tfoot></table>
<h2 id="b">Units</h2>
<dl><dt><code>kW</code></dt><dd>kilowatt, 1000 watts</dd><dt>MB</dt><dd>megabyte</dd><dd>10^6 bytes</dd></dl>
<ol><li><a href="#a">Limits</a></li><li><a href="#b">Units</a></li><li><a href="#c">More</a></li></ol>
<article><header><h3>Note</h3></header><p>An article's own header is content.</p></article>
</main>
<div role="contentinfo">Copyright Example</div>
<div class="navfooter"><a rel="prev" href="ch2.html">Installation</a> |
<a rel="next" href="ch4.html">Usage</a></div>
"""


def _by_text(blocks: list[Block], text: str) -> Block:
    return next(b for b in blocks if text in b.text or (b.term and text in b.term))


def test_html_document_model(tmp_path: Path) -> None:
    doc = load_document(make_html(tmp_path / "settings.html", PAGE, title="Settings"), "settings.html")
    blocks = doc.blocks
    assert [(b.text, b.level) for b in blocks if b.kind == "heading"] == [
        ("Settings", 1),
        ("Limits", 2),
        ("Units", 2),
        ("Note", 3),
    ]
    table = next(b for b in blocks if b.kind == "table" and b.title)
    assert table.title == "Table 3.1. Upload limits"
    assert table.headers == ["Name", "Default"]
    assert table.rows == [["max_size", "100 MB"], ["timeout", "30 s"]]  # no word split by markup
    assert table.footnotes == ("Sizes in MB (10^6 bytes).",)
    assert table.boilerplate is None
    definitions = [(b.term, b.text) for b in blocks if b.kind == "definition"]
    assert definitions == [("kW", "kilowatt, 1000 watts"), ("MB", "megabyte\n\n10^6 bytes")]
    assert _by_text(blocks, "Set max_size").kind == "paragraph"

    marks = {b.text: b.boilerplate for b in blocks if b.boilerplate}
    assert marks["Example site Docs"] == "header"
    assert marks["Home > Manual"] == "nav"
    assert _by_text(blocks, "Chapter 3. Settings").boilerplate == "prev_next"
    assert [b.boilerplate for b in blocks if b.kind == "list_item"] == ["toc"] * 5
    assert marks["Copyright Example"] == "footer"
    assert marks["Installation | Usage"] == "prev_next"
    # An <article>'s own header is content, not the page's banner.
    assert _by_text(blocks, "Note").boilerplate is None
    assert all(b.boilerplate is None for b in blocks if b.kind == "definition")

    # V1: nav is left out as before; every other block (furniture included) is kept, in order.
    text = doc.text
    assert "Home > Manual" not in text
    assert "Example site Docs" in text and "Installation | Usage" in text
    assert "Table 3.1. Upload limits\nName | Default\nmax_size | 100 MB\ntimeout | 30 s\n" in text
    assert "Sizes in MB (10^6 bytes)." in text
    assert "kW\n\nkilowatt, 1000 watts\n\nMB\n\nmegabyte\n\n10^6 bytes" in text
    assert "max _size" not in text and "time out" not in text


def test_html_inline_markup_in_headings_and_cells(tmp_path: Path) -> None:
    body = (
        "<h2>The <code>max</code>_size <em>setting</em></h2>"
        "<table><tr><th>Key</th><th>Unit</th></tr><tr><td><b>k</b>W<br>peak</td><td><p>a</p><p>b</p></td></tr>"
        "</table>"
    )
    doc = load_document(make_html(tmp_path / "i.html", body), "i.html")
    heading, table = doc.blocks
    assert heading.text == "The max_size setting"
    assert table.rows == [["kW peak", "a b"]]


def test_html_list_of_links_is_not_a_toc_unless_they_point_into_the_page(tmp_path: Path) -> None:
    body = "<ul><li><a href='/a'>A</a></li><li><a href='/b'>B</a></li><li><a href='/c'>C</a></li></ul>"
    doc = load_document(make_html(tmp_path / "l.html", body), "l.html")
    assert [b.boilerplate for b in doc.blocks] == [None, None, None]


def test_html_next_in_prose_is_content(tmp_path: Path) -> None:
    body = "<p>Read the <a href='n.html'>next</a> chapter before you install anything at all.</p>"
    (block,) = load_document(make_html(tmp_path / "p.html", body), "p.html").blocks
    assert block.boilerplate is None


def _pdf(path: Path) -> Path:
    """Four pages: a table of contents (roman labels), a page with a ruled table, a scanned page
    (an image, no text) and a plain page; arabic labels from the second page on."""
    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.set_page_label(label_style="r")
    pdf.multi_cell(0, 6, "Contents", new_x="LMARGIN", new_y="NEXT")
    for entry, page in [("1 Scope", 1), ("2 Ratings", 1), ("3 Scans", 2), ("4 Notes", 3), ("Index", 9)]:
        pdf.multi_cell(0, 6, f"{entry} {'.' * 40} {page}", new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    pdf.set_page_label(label_style="D", label_start=1)
    pdf.multi_cell(0, 6, "2 Ratings\nThe ratings below apply to every model.", new_x="LMARGIN", new_y="NEXT")
    with pdf.table(col_widths=(40, 30, 30)) as table:
        for row in [["Model", "Power (kW)", "Weight (kg)"], ["K 25", "2.5", "10"], ["K 28", "2.8", "12"]]:
            cells = table.row()
            for value in row:
                cells.cell(value)
    pdf.multi_cell(0, 6, "Values are measured at 20 C.", new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    image = io.BytesIO()
    Image.new("RGB", (60, 80), "white").save(image, format="PNG")
    pdf.image(image, x=10, y=10, w=100)
    pdf.add_page()
    pdf.multi_cell(0, 6, "4 Notes\nNothing else to add.", new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))
    return path


def test_pdf_document_model(tmp_path: Path) -> None:
    doc = load_document(_pdf(tmp_path / "manual.pdf"), "manual.pdf")
    assert doc.page_count == 4
    # V1: pypdf's text per page, 0-based pages, PyPDFLoader's metadata, as before.
    assert [s.page for s in doc.sections] == [0, 1, 3]
    assert [s.metadata["page_label"] for s in doc.sections] == ["i", "1", "3"]
    assert "K 25 2.5 10" in doc.sections[1].text
    # the "scan" is a blank picture: OCR reads it and finds nothing, and a warning says so
    assert doc.unreadable_pages == [2] and doc.ocr_pages == {}
    assert "page 3 shows a picture but gave no text: OCR found no text on them" in doc.warnings

    toc = [b for b in doc.blocks if b.page == 0]
    assert toc and all(b.boilerplate == "toc" and b.page_label == "i" for b in toc)
    (table,) = [b for b in doc.blocks if b.kind == "table"]
    assert (table.page, table.page_label) == (1, "1")
    assert table.headers == ["Model", "Power (kW)", "Weight (kg)"]
    assert table.rows == [["K 25", "2.5", "10"], ["K 28", "2.8", "12"]]
    page_two = [b for b in doc.blocks if b.page == 1]
    # The text around the table is read region by region: the table's cells are in no paragraph.
    assert [b.kind for b in page_two] == ["heading", "paragraph", "table", "paragraph"]
    assert page_two[0].text == "2 Ratings" and page_two[3].text == "Values are measured at 20 C."
    assert not any("K 25" in b.text for b in page_two if b.kind != "table")
    assert all(b.boilerplate is None for b in page_two)


def test_a_table_ruled_only_in_its_middle_columns_loses_no_word(tmp_path: Path) -> None:
    """Package tables of the Debian Reference: rules frame the middle columns, while the package name
    and its description stand left and right of them; the band is read as text, every word kept."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    pdf.add_page()
    pdf.multi_cell(0, 6, "Table 6.11: List of print servers and utilities", new_x="LMARGIN", new_y="NEXT")
    rows = [("lpr", "V:3", "367", "printer daemon"), ("cups", "V:116", "1027", "commands lpmove and lpinfo")]
    y = 30.0
    for package, popcon, size, description in rows:
        pdf.set_xy(12, y)
        pdf.cell(30, 8, package)
        pdf.rect(45, y, 25, 8)  # only the middle columns are ruled
        pdf.rect(70, y, 25, 8)
        pdf.set_xy(45, y)
        pdf.cell(25, 8, popcon)
        pdf.cell(25, 8, size)
        pdf.set_xy(100, y)
        pdf.cell(80, 8, description)
        y += 8
    pdf.output(str(tmp_path / "packages.pdf"))
    doc = load_document(tmp_path / "packages.pdf", "packages.pdf")
    words = " ".join(b.text for b in doc.blocks)
    for word in ("lpr", "cups", "lpmove", "lpinfo", "printer", "1027"):
        assert word in words, word


def test_pdf_without_page_labels_has_none_on_blocks(tmp_path: Path) -> None:
    from tests.fixtures.documents import make_pdf

    doc = load_document(make_pdf(tmp_path / "p.pdf", ["first page", "second page"]), "p.pdf")
    assert [b.page_label for b in doc.blocks] == [None, None]
    assert [s.metadata["page_label"] for s in doc.sections] == ["1", "2"]  # V1 as PyPDFLoader


def _docx(path: Path) -> Path:
    """Headings, a TOC (a TOC field over "toc 1" paragraphs), a table with a marked header row."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    document = docx.Document()
    document.core_properties.author = "A. Writer"
    document.add_heading("Manual", level=0)
    toc_style = document.styles.add_style("toc 1", WD_STYLE_TYPE.PARAGRAPH)
    begin = document.add_paragraph("Introduction\t1", style=toc_style)
    begin._p.insert(0, parse_xml(f'<w:r {nsdecls("w")}><w:fldChar w:fldCharType="begin"/></w:r>'))
    begin._p.insert(1, parse_xml(f'<w:r {nsdecls("w")}><w:instrText> TOC \\o "1-3" \\h </w:instrText></w:r>'))
    begin._p.insert(2, parse_xml(f'<w:r {nsdecls("w")}><w:fldChar w:fldCharType="separate"/></w:r>'))
    entry = document.add_paragraph("Ratings\t2")  # a field entry without the TOC style
    entry._p.append(parse_xml(f'<w:r {nsdecls("w")}><w:fldChar w:fldCharType="end"/></w:r>'))
    document.add_heading("Introduction", level=1)
    document.add_paragraph("The manual covers ratings.")
    document.add_heading("Ratings", level=2)
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate([["Model", "Power"], ["K 25", "2.5 kW"], ["K 28", "2.8 kW"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("After the table.")
    document.save(str(path))
    return path


def test_docx_document_model(tmp_path: Path) -> None:
    doc = load_document(_docx(tmp_path / "m.docx"), "m.docx")
    assert [(b.kind, b.level, b.text, b.boilerplate) for b in doc.blocks] == [
        ("heading", 1, "Manual", None),
        ("paragraph", None, "Introduction\t1", "toc"),
        ("paragraph", None, "Ratings\t2", "toc"),
        ("heading", 1, "Introduction", None),
        ("paragraph", None, "The manual covers ratings.", None),
        ("heading", 2, "Ratings", None),
        ("table", None, "Model | Power\nK 25 | 2.5 kW\nK 28 | 2.8 kW", None),
        ("paragraph", None, "After the table.", None),
    ]
    table = doc.blocks[6]
    assert table.headers == ["Model", "Power"] and table.rows == [["K 25", "2.5 kW"], ["K 28", "2.8 kW"]]
    assert doc.properties["author"] == "A. Writer"
    assert "Introduction\t1" in doc.text  # V1 keeps the table of contents, as before


def test_xlsx_each_sheet_is_a_table(tmp_path: Path) -> None:
    path = make_xlsx(
        tmp_path / "b.xlsx",
        {"Prices": [["Model", "Price"], ["K 25", 100], ["K 28", 120]], "Notes": [["Note"], ["ok"]]},
    )
    doc = load_document(path, "b.xlsx")
    assert [(b.kind, b.title, b.headers, b.rows) for b in doc.blocks] == [
        ("table", "Prices", ["Model", "Price"], [["K 25", "100"], ["K 28", "120"]]),
        ("table", "Notes", ["Note"], [["ok"]]),
    ]


def test_markdown_pipe_table_and_headings(tmp_path: Path) -> None:
    text = "# Guide\n\n## Ratings\n\n| Model | Power (kW) |\n|---|---:|\n| K 25 | 2.5 |\n| `K` 28 | 2.8 |\n"
    doc = load_document(make_text(tmp_path / "g.md", text), "g.md")
    assert [(b.kind, b.level, b.text) for b in doc.blocks if b.kind == "heading"] == [
        ("heading", 1, "Guide"),
        ("heading", 2, "Ratings"),
    ]
    (table,) = [b for b in doc.blocks if b.kind == "table"]
    assert table.headers == ["Model", "Power (kW)"] and table.rows == [["K 25", "2.5"], ["K 28", "2.8"]]
    assert doc.text == text  # V1: the Markdown as written


@pytest.mark.parametrize("code", [False, True])
def test_form_feeds_are_pages(tmp_path: Path, code: bool) -> None:
    name = "report.py" if code else "report.txt"
    text = "Page one.\n\nStill one.\fPage two.\f\fPage four."
    doc = load_document(make_text(tmp_path / name, text), name)
    assert doc.text == text  # V1: one section, the whole text
    assert doc.page_count == 4
    assert [(b.page, b.text) for b in doc.blocks] == [
        (0, "Page one."),
        (0, "Still one."),
        (1, "Page two."),
        (3, "Page four."),
    ]
