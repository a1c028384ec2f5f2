"""XLSX through calamine: the same text as openpyxl, and only when the pre-pass says what calamine
would build stays within the limits (real workbooks written by openpyxl and XlsxWriter)."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pytest
import xlsxwriter

from app.ingest.limits import ParseLimitExceeded, ParseLimits, guarded
from app.ingest.loaders import load_document, tabular, workbook
from app.ingest.loaders.workbook import column_number, sheet_extent, string_lengths
from tests.fixtures.documents import make_xlsx

pytestmark = pytest.mark.skipif(workbook.python_calamine is None, reason="python-calamine is not installed")


def _shared_strings_workbook(
    path: Path, sheets: dict[str, list[list[Any]]], title: str | None = None
) -> Path:
    """Written by XlsxWriter, which (like Excel) puts text in the shared-string table."""
    book = xlsxwriter.Workbook(str(path))
    if title:
        book.set_properties({"title": title})
    dates = book.add_format({"num_format": "yyyy-mm-dd"})
    for name, rows in sheets.items():
        sheet = book.add_worksheet(name)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                if isinstance(value, dt.datetime):
                    sheet.write_datetime(r, c, value, dates)
                elif value is not None:
                    sheet.write(r, c, value)
    book.close()
    return path


def _both_ways(
    path: Path, monkeypatch: pytest.MonkeyPatch, limits: ParseLimits | None = None
) -> tuple[Any, Any]:
    """The document read by calamine (asserted) and by openpyxl."""
    used: list[bool] = []
    real = tabular._load_fast

    def spy(p: Path, name: str) -> Any:
        doc = real(p, name)
        used.append(doc is not None)
        return doc

    monkeypatch.setattr(tabular, "_load_fast", spy)
    fast = load_document(path, path.name, limits=limits)
    assert used == [True], "calamine did not read it"
    monkeypatch.setattr(tabular, "fast_read_allowed", lambda *args: False)
    slow = load_document(path, path.name, limits=limits)
    return fast, slow


ROWS: list[list[Any]] = [
    ["Quarterly report", None, None, None],  # a title above the header row
    [None, None, None, None],
    ["Region", None, "Revenue", "Closed"],  # a missing header takes its column letter
    ["North", 3, 1200.5, dt.datetime(2024, 3, 31)],
    ["South  east", 4, 2**53, True],  # runs of spaces collapse; the largest exact integer
    ["West", None, 1e16, False],
    [None, None, None, None],
    ["Total", 7, 0.1 + 0.2, None],
]


@pytest.mark.parametrize("writer", ["xlsxwriter", "openpyxl"])
def test_calamine_gives_openpyxls_text_sections_and_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    sheets = {"Sales": ROWS, "Empty": [], "Notes": [[None, "only column B"], [None, "second"]]}
    if writer == "xlsxwriter":
        path = _shared_strings_workbook(tmp_path / "w.xlsx", sheets, title="Sales 2024")
    else:
        path = make_xlsx(tmp_path / "w.xlsx", sheets)  # inline strings
    fast, slow = _both_ways(path, monkeypatch)
    assert [(s.text, dict(s.metadata)) for s in fast.sections] == [
        (s.text, dict(s.metadata)) for s in slow.sections
    ]
    assert fast.blocks == slow.blocks and fast.title == slow.title
    assert (
        "Closed: 2024-03-31" in fast.sections[0].text and "Revenue: 9007199254740992" in fast.sections[0].text
    )
    assert [s.metadata["sheet"] for s in fast.sections] == ["Sales", "Notes"]


def test_the_test_suites_workbooks_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    books = {
        "a.xlsx": {"People": [["name", "age"], ["Ann", 31], ["Bob", 42]], "Cities": [["city"], ["Bonn"]]},
        "b.xlsx": {"S": [["id", None, "name"], [1, "x", "Ann"], [2, "y", "Bob"]]},
        "c.xlsx": {"S": [["a", "b"]] + [[i, i * 2] for i in range(50)]},
    }
    for name, sheets in books.items():
        for path in (
            make_xlsx(tmp_path / name, sheets),
            _shared_strings_workbook(tmp_path / f"x{name}", sheets),
        ):
            fast, slow = _both_ways(path, monkeypatch)
            assert [s.text for s in fast.sections] == [s.text for s in slow.sections], path.name
            monkeypatch.undo()


def test_a_far_corner_cell_is_left_to_openpyxl(tmp_path: Path) -> None:
    # A1 and XFD1048576: calamine would build 16,384 x 1,048,576 cells; openpyxl reads two
    path = _shared_strings_workbook(tmp_path / "corner.xlsx", {"S": [["a"]]})
    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet("S")
    sheet.write(0, 0, "top left")
    sheet.write(1048575, 16383, "bottom right")
    book.close()
    with guarded(ParseLimits(), "corner.xlsx") as guard:
        assert not workbook.fast_read_allowed(path, "xl/sharedStrings.xml", tabular._is_worksheet, guard)
    doc = load_document(path, "corner.xlsx")
    # "top left" is the header row (of column A, where the last row has nothing)
    assert doc.sections[0].text == "## Sheet: S\n\nXFD: bottom right"


def test_shared_string_amplification_is_left_to_openpyxl_which_stops_it(tmp_path: Path) -> None:
    # 600 cells pointing to one 5,000-character string: 3 million characters once calamine copies it
    # into each cell, over a 1 million limit; openpyxl streams and stops at the limit
    long = "word " * 1000
    path = _shared_strings_workbook(tmp_path / "amp.xlsx", {"S": [[long] * 6 for _ in range(100)]})
    limits = ParseLimits(max_chars=1_000_000)
    with guarded(limits, "amp.xlsx") as guard:
        assert not workbook.fast_read_allowed(path, "xl/sharedStrings.xml", tabular._is_worksheet, guard)
    with pytest.raises(ParseLimitExceeded, match="PARSE_MAX_CHARS"):
        load_document(path, "amp.xlsx", limits=limits)
    with guarded(ParseLimits(), "amp.xlsx") as guard:  # within the default limit: calamine may
        assert workbook.fast_read_allowed(path, "xl/sharedStrings.xml", tabular._is_worksheet, guard)


def test_sheet_extent_counts_the_grid_and_the_shared_string_characters() -> None:
    table = b"<sst><si><t>ab</t></si><si><t>long text</t></si></sst>"
    lengths = string_lengths(table)
    assert lengths is not None and lengths.tolist() == [18, 25]  # "<si><t>ab</t></si>": 4+3+2+4+5
    sheet = (
        b'<sheetData><row r="1"><c r="A1" t="s"><v>1</v></c><c r="C1" s="2" t="s"><v>1</v></c></row>'
        b'<row r="4"><c r="B4"><v>7</v></c><c r="AA4" t="s"><v>0</v></c></row></sheetData>'
    )
    # the grid: rows 1..4 x columns A..AA (27) = 108 cells; strings: 25 + 25 + 18 = 68 bytes
    assert sheet_extent(io.BytesIO(sheet), lengths) == (108, 68)
    assert (
        sheet_extent(io.BytesIO(sheet.replace(b"<v>0</v>", b"<v>9</v>")), lengths) is None
    )  # past the table
    assert sheet_extent(io.BytesIO(b'<row><c t="s"><v>0</v></c></row>'), lengths) is None  # no reference
    assert (column_number(b"A"), column_number(b"Z"), column_number(b"AA"), column_number(b"XFD")) == (
        1,
        26,
        27,
        16384,
    )
