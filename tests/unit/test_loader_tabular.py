"""CSV, TSV and XLSX loading: one section per row (CSV) or sheet (XLSX), encodings, caps."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from app.errors import UnsupportedFileType
from app.ingest.limits import ParseLimitExceeded, ParseLimits
from app.ingest.loaders import load_document
from app.ingest.loaders.tabular import cell_text, csv_row_text, header_row_index
from tests.fixtures.documents import make_csv, make_text, make_xlsx

PEOPLE = [["name", "city"], ["José", "Málaga"], ["Renée", "Besançon"], ["Zoë", "Köln"]]


def test_csv_rows_like_langchain(tmp_path: Path) -> None:
    doc = load_document(make_csv(tmp_path / "p.csv", PEOPLE), "p.csv")
    assert doc.kind == "csv" and doc.content_type == "text/csv" and doc.encoding == "utf-8"
    assert [(s.text, dict(s.metadata), s.page) for s in doc.sections] == [
        ("name: José\ncity: Málaga", {"row": 0}, None),
        ("name: Renée\ncity: Besançon", {"row": 1}, None),
        ("name: Zoë\ncity: Köln", {"row": 2}, None),
    ]
    (table,) = doc.blocks
    assert table.kind == "table" and table.headers == ["name", "city"] and table.rows == PEOPLE[1:]
    assert doc.text == "name: José\ncity: Málaga\nname: Renée\ncity: Besançon\nname: Zoë\ncity: Köln"


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1", "utf-8-sig", "utf-16"])
def test_csv_encodings(tmp_path: Path, encoding: str) -> None:
    doc = load_document(make_csv(tmp_path / "p.csv", PEOPLE, encoding=encoding), "p.csv")
    # The BOM never leaks into the first column name.
    assert doc.sections[0].text == "name: José\ncity: Málaga"
    assert doc.sections[2].text == "name: Zoë\ncity: Köln"


def test_csv_semicolon_delimiter_is_sniffed(tmp_path: Path) -> None:
    rows = [["product", "price"], ["apple", "1,20"], ["pear", "0,90"]]  # decimal commas
    doc = load_document(make_csv(tmp_path / "p.csv", rows, delimiter=";"), "p.csv")
    assert [s.text for s in doc.sections] == ["product: apple\nprice: 1,20", "product: pear\nprice: 0,90"]


def test_tsv(tmp_path: Path) -> None:
    doc = load_document(make_csv(tmp_path / "p.tsv", PEOPLE, delimiter="\t"), "p.tsv")
    assert doc.kind == "tsv" and doc.content_type == "text/tab-separated-values"
    assert doc.sections[0].text == "name: José\ncity: Málaga"


def test_csv_quoted_newlines_blank_lines_and_ragged_rows(tmp_path: Path) -> None:
    text = 'id,note,extra\n1,"two\nlines",x\n\n2,short\n3,a,b,c\n,,\n4,last,y\n'
    doc = load_document(make_text(tmp_path / "r.csv", text), "r.csv")
    assert [(dict(s.metadata), s.text) for s in doc.sections] == [
        ({"row": 0}, "id: 1\nnote: two\nlines\nextra: x"),
        ({"row": 1}, "id: 2\nnote: short\nextra: "),
        ({"row": 2}, "id: 3\nnote: a\nextra: b\nNone: c"),
        # row 3 (",,") has no value: no section, but the numbering goes on as langchain's
        ({"row": 4}, "id: 4\nnote: last\nextra: y"),
    ]


def test_csv_field_over_the_stdlib_limit(tmp_path: Path) -> None:
    big = "x" * 200_000  # csv's default limit is 131,072 characters per field
    doc = load_document(make_csv(tmp_path / "big.csv", [["k", "v"], ["a", big]]), "big.csv")
    assert doc.sections[0].text == f"k: a\nv: {big}"


def test_csv_with_only_a_header(tmp_path: Path) -> None:
    doc = load_document(make_csv(tmp_path / "h.csv", [["a", "b"]]), "h.csv")
    assert doc.sections == []


def test_csv_row_text() -> None:
    assert csv_row_text(["a", "b"], [" 1 ", "2"]) == "a: 1\nb: 2"
    assert csv_row_text(["a", "b"], ["1"]) == "a: 1\nb: "
    assert csv_row_text(["a"], ["1", "2", "3"]) == "a: 1\nNone: 2,3"


def test_csv_cell_cap(tmp_path: Path) -> None:
    # header 2 cells + 5 rows * 2 cells = 12 cells > 10
    path = make_csv(tmp_path / "many.csv", [["a", "b"]] + [[str(i), str(i)] for i in range(5)])
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, "many.csv", limits=ParseLimits(max_cells=10))
    assert info.value.status_code == 413
    assert info.value.detail == (
        "many.csv was refused: it has more than 10 cells (PARSE_MAX_CELLS). Split it into smaller "
        "files and upload them separately, or ask the operator to raise the limit"
    )


def test_xlsx_one_section_per_sheet(tmp_path: Path) -> None:
    path = make_xlsx(
        tmp_path / "book.xlsx",
        {
            "Sales": [
                ["Quarterly sales"],  # a title above the header row
                [],
                ["Customer", "Year", "Revenue", "Paid"],
                ["ACME", 2023, 1200.5, True],
                [None, None, None, None],  # empty rows are skipped
                ["Beta", 2024, 800.0, None],
            ],
            "Empty": [],
            "Dates": [
                ["When", "What"],
                [dt.datetime(2024, 3, 1), "launch"],
                [dt.datetime(2024, 3, 2, 14, 30), "party"],
            ],
        },
    )
    doc = load_document(path, "book.xlsx")
    assert doc.kind == "xlsx"
    assert [dict(s.metadata) for s in doc.sections] == [{"sheet": "Sales"}, {"sheet": "Dates"}]
    assert doc.sections[0].text == (
        "## Sheet: Sales\n\nQuarterly sales\n\n"
        "Customer: ACME\nYear: 2023\nRevenue: 1200.5\nPaid: TRUE\n\n"
        "Customer: Beta\nYear: 2024\nRevenue: 800"
    )
    assert doc.sections[1].text == (
        "## Sheet: Dates\n\nWhen: 2024-03-01\nWhat: launch\n\nWhen: 2024-03-02 14:30:00\nWhat: party"
    )
    sales = doc.blocks[0]
    assert sales.kind == "table" and sales.title == "Sales"
    assert sales.headers == ["Customer", "Year", "Revenue", "Paid"]
    assert sales.rows == [["ACME", "2023", "1200.5", "TRUE"], ["Beta", "2024", "800"]]


def test_xlsx_missing_headers_use_column_letters(tmp_path: Path) -> None:
    path = make_xlsx(tmp_path / "b.xlsx", {"S": [["id", None, "name"], [1, "x", "Ann"], [2, "y", "Bob"]]})
    doc = load_document(path, "b.xlsx")
    assert doc.blocks[0].headers == ["id", "B", "name"]
    assert doc.sections[0].text.split("\n\n")[1] == "id: 1\nB: x\nname: Ann"


def test_xlsx_cell_cap(tmp_path: Path) -> None:
    path = make_xlsx(tmp_path / "big.xlsx", {"S": [["a", "b"], [1, 2], [3, 4]]})  # 6 cells > 5
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, "big.xlsx", limits=ParseLimits(max_cells=5))
    assert "PARSE_MAX_CELLS" in info.value.detail


def test_xlsx_named_csv_is_read_as_xlsx(tmp_path: Path) -> None:
    doc = load_document(make_xlsx(tmp_path / "export.csv", {"S": [["a"], [1]]}), "export.csv")
    assert doc.kind == "xlsx"
    assert doc.warnings and "XLSX" in doc.warnings[0]


def test_csv_text_named_xls_is_read_as_csv(tmp_path: Path) -> None:
    # Web apps often export CSV text with an .xls name.
    doc = load_document(make_csv(tmp_path / "export.xls", PEOPLE), "export.xls")
    assert doc.kind == "csv" and doc.sections[0].text == "name: José\ncity: Málaga"
    assert doc.warnings == ["the file is named like an XLS file but holds text; it was read as a CSV file"]


def test_header_row_index() -> None:
    assert header_row_index([["a", "b", "c"], ["1", "2", "3"]]) == 0
    assert header_row_index([["Title"], ["a", "b", "c"], ["1", "2", "3"]]) == 1
    assert header_row_index([["only"]]) == 0


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "TRUE"),
        (False, "FALSE"),
        (3, "3"),
        (3.0, "3"),
        (0.1, "0.1"),
        (1e20, "1e+20"),
        (dt.datetime(2024, 1, 2), "2024-01-02"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02 03:04:05"),
        (dt.date(2024, 1, 2), "2024-01-02"),
        (dt.time(9, 30), "09:30:00"),
        ("  two\nlines ", "two lines"),
    ],
)
def test_cell_text(value: object, text: str) -> None:
    assert cell_text(value) == text


def test_legacy_xls(tmp_path: Path) -> None:
    pytest.importorskip("xlrd")
    pytest.importorskip("xlwt")
    from tests.fixtures.documents import make_xls

    path = make_xls(
        tmp_path / "old.xls",
        {
            "Sales": [["Customer", "When", "Amount", "Paid"], ["ACME", dt.datetime(2024, 3, 1), 12.5, True]],
            "Blank": [],
        },
    )
    doc = load_document(path, "old.xls")
    assert doc.kind == "xls"
    (section,) = doc.sections
    assert section.metadata == {"sheet": "Sales"}
    assert section.text == "## Sheet: Sales\n\nCustomer: ACME\nWhen: 2024-03-01\nAmount: 12.5\nPaid: TRUE"


def test_damaged_xls_is_415(tmp_path: Path) -> None:
    pytest.importorskip("xlrd")
    path = tmp_path / "bad.xls"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504 + "Workbook".encode("utf-16-le") * 4)
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "bad.xls")
    assert info.value.detail.startswith("bad.xls could not be read as an Excel workbook (.xls)")


def test_xls_without_xlrd_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.ingest.loaders as loaders

    monkeypatch.setattr(loaders, "XLS_SUPPORTED", False)
    path = tmp_path / "old.xls"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504 + "Workbook".encode("utf-16-le"))
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "old.xls")
    assert "save it as .xlsx or CSV" in info.value.detail
