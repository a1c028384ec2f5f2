"""DOCX, PPTX, ODT and EPUB loading; damaged files and zip bombs."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from app.errors import UnsupportedFileType
from app.ingest.loaders import load_document
from tests.fixtures.documents import make_docx, make_epub, make_odt, make_pptx

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def test_docx_blocks_in_body_order(tmp_path: Path) -> None:
    path = make_docx(
        tmp_path / "report.docx",
        ["Opening paragraph.", (2, "Details"), "Second paragraph."],
        headings=[(1, "Quarterly Report")],
        bullets=["first point", "second point"],
        table=[["Region", "Revenue"], ["North", "1,200"], ["South", "900"]],
        title="Q3",
    )
    doc = load_document(path, "report.docx")
    assert doc.kind == "docx" and doc.content_type == DOCX_TYPE and doc.title == "Q3"
    assert [(b.kind, b.level, b.text) for b in doc.blocks[:6]] == [
        ("heading", 1, "Quarterly Report"),
        ("paragraph", None, "Opening paragraph."),
        ("heading", 2, "Details"),
        ("paragraph", None, "Second paragraph."),
        ("list_item", None, "first point"),
        ("list_item", None, "second point"),
    ]
    table = doc.blocks[6]
    assert table.kind == "table"
    assert table.headers == ["Region", "Revenue"]
    assert table.rows == [["North", "1,200"], ["South", "900"]]
    assert table.text == "Region | Revenue\nNorth | 1,200\nSouth | 900"
    (section,) = doc.sections
    assert section.page is None and section.metadata == {}
    assert section.text == (
        "# Quarterly Report\n\nOpening paragraph.\n\n## Details\n\nSecond paragraph.\n\n"
        "- first point\n- second point\n\nRegion | Revenue\nNorth | 1,200\nSouth | 900"
    )


def test_docx_merged_cells_appear_once(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Merged"
    table.cell(0, 2).text = "C"
    table.cell(1, 0).text, table.cell(1, 1).text, table.cell(1, 2).text = "1", "2", "3"
    document.save(str(tmp_path / "m.docx"))
    (block,) = load_document(tmp_path / "m.docx", "m.docx").blocks
    assert block.headers == ["Merged", "C"]
    assert block.rows == [["1", "2", "3"]]


def test_empty_docx_has_no_sections(tmp_path: Path) -> None:
    doc = load_document(make_docx(tmp_path / "empty.docx", []), "empty.docx")
    assert doc.sections == [] and doc.blocks == [] and doc.text == ""


def test_pptx_one_section_per_slide(tmp_path: Path) -> None:
    path = make_pptx(
        tmp_path / "deck.pptx",
        [
            {"title": "Welcome", "body": ["Agenda item one", "Agenda item two"], "notes": "Say hello"},
            {"title": ""},  # an empty slide makes no section, but keeps its number
            {"title": "Numbers", "table": [["Quarter", "Sales"], ["Q1", "10"], ["Q2", "12"]]},
        ],
    )
    doc = load_document(path, "deck.pptx")
    assert doc.kind == "pptx"
    assert [dict(s.metadata) for s in doc.sections] == [{"slide": 1}, {"slide": 3}]
    assert doc.sections[0].text == "# Welcome\n\nAgenda item one\nAgenda item two\n\nNotes: Say hello"
    assert doc.sections[1].text == "# Numbers\n\nQuarter | Sales\nQ1 | 10\nQ2 | 12"
    headings = [(b.text, b.level) for b in doc.blocks if b.kind == "heading"]
    assert headings == [("Welcome", 1), ("Numbers", 1)]
    (table,) = [b for b in doc.blocks if b.kind == "table"]
    assert table.headers == ["Quarter", "Sales"] and table.rows == [["Q1", "10"], ["Q2", "12"]]


def test_odt(tmp_path: Path) -> None:
    doc = load_document(make_odt(tmp_path / "a.odt", [(1, "Title"), "Body text.", (2, "Part")]), "a.odt")
    assert doc.kind == "odt"
    assert [(b.kind, b.level, b.text) for b in doc.blocks] == [
        ("heading", 1, "Title"),
        ("paragraph", None, "Body text."),
        ("heading", 2, "Part"),
    ]
    assert doc.text == "# Title\n\nBody text.\n\n## Part"


def test_epub_chapters_in_spine_order(tmp_path: Path) -> None:
    path = make_epub(
        tmp_path / "book.epub", [("Chapter One", "It began."), ("Chapter Two", "It ended.")], title="A Book"
    )
    doc = load_document(path, "book.epub")
    assert doc.kind == "epub" and doc.title == "A Book"
    assert [s.text for s in doc.sections] == ["# Chapter One\n\nIt began.", "# Chapter Two\n\nIt ended."]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("broken.docx", "could not be read as a Word document (.docx)"),
        ("broken.pptx", "could not be read as a PowerPoint presentation (.pptx)"),
        ("broken.xlsx", "could not be read as an Excel workbook (.xlsx)"),
    ],
)
def test_zip_that_is_not_the_format_is_415(tmp_path: Path, name: str, expected: str) -> None:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "not an office document")
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, name)
    assert expected in info.value.detail
    assert "upload it again" in info.value.detail


def test_truncated_docx_is_415(tmp_path: Path) -> None:
    full = make_docx(tmp_path / "full.docx", ["some text"] * 50).read_bytes()
    path = tmp_path / "cut.docx"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "cut.docx")
    assert info.value.detail.startswith("cut.docx is damaged: its zip container cannot be read")


def test_random_bytes_named_docx_is_415(tmp_path: Path) -> None:
    path = tmp_path / "x.docx"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "x.docx")
    assert "x.docx" in info.value.detail and info.value.status_code == 415


def test_docx_renamed_pdf_is_read_as_docx(tmp_path: Path) -> None:
    path = make_docx(tmp_path / "letter.pdf", ["Dear reader,"])
    doc = load_document(path, "letter.pdf", "application/pdf")
    assert doc.kind == "docx" and doc.text == "Dear reader,"
    assert doc.warnings == [
        "the file is named like a PDF file but is a DOCX file; it was read as a DOCX file"
    ]


def test_docx_named_doc_is_read_as_docx(tmp_path: Path) -> None:
    doc = load_document(make_docx(tmp_path / "old.doc", ["Modern inside"]), "old.doc")
    assert doc.kind == "docx" and doc.text == "Modern inside"


def _retype(source: Path, target: Path, old: str, new: str) -> Path:
    """Copy an OOXML package, changing its main part's content type (docx -> docm, pptx -> ppsx)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "[Content_Types].xml":
                assert old.encode() in data
                data = data.replace(old.encode(), new.encode())
            dst.writestr(info, data)
    return target


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("macro.docm", "application/vnd.ms-word.document.macroEnabled.main+xml"),
        ("template.dotx", "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml"),
    ],
)
def test_word_templates_and_macro_documents(tmp_path: Path, name: str, content_type: str) -> None:
    source = make_docx(tmp_path / "plain.docx", ["Body of the template."])
    path = _retype(
        source,
        tmp_path / name,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
        content_type,
    )
    doc = load_document(path, name)
    assert doc.kind == "docx" and doc.text == "Body of the template."


def test_slide_show(tmp_path: Path) -> None:
    source = make_pptx(tmp_path / "plain.pptx", [{"title": "Show time"}])
    path = _retype(
        source,
        tmp_path / "deck.ppsx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml",
        "application/vnd.openxmlformats-officedocument.presentationml.slideshow.main+xml",
    )
    doc = load_document(path, "deck.ppsx")
    assert doc.kind == "pptx" and doc.text == "# Show time"


def test_docx_title_style_and_custom_heading_style(tmp_path: Path) -> None:
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    document.add_heading("Document Title", level=0)  # the "Title" style
    custom = document.styles.add_style("Chapter Head", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = document.styles["Heading 2"]
    document.add_paragraph("Based on Heading 2", style="Chapter Head")
    document.add_paragraph("Plain text.")
    document.save(str(tmp_path / "s.docx"))
    doc = load_document(tmp_path / "s.docx", "s.docx")
    assert [(b.kind, b.level, b.text) for b in doc.blocks] == [
        ("heading", 1, "Document Title"),
        ("heading", 2, "Based on Heading 2"),
        ("paragraph", None, "Plain text."),
    ]
