"""CSV/TSV (stdlib csv), XLSX (python-calamine within measured bounds, else openpyxl read-only and
streaming; see `workbook.py`) and legacy XLS (xlrd, optional).

Rows are rendered as `header: value` lines, one row after another. A chunk cut from the middle of
a table then still names every value it holds ("Customer: ACME / Year: 2023 / Revenue: 1200"), so a
question about a column retrieves it; a pipe table loses its header row after the first chunk.
It is also rag_api's CSV format (langchain's CSVLoader), so CSV and XLSX retrieve alike. The cost
is repeating the column names, roughly 1.5-2x the tokens of a bare table.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import logging
import math
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.utils import get_column_letter

try:  # optional: without xlrd, .xls files are refused with advice to save them as .xlsx
    import xlrd
except ImportError:  # pragma: no cover - depends on the installation
    xlrd = None

from app.errors import RagError, UnsupportedFileType
from app.ingest.limits import ParseGuard, current_guard
from app.ingest.loaders.archive import check_zip
from app.ingest.loaders.prescan import scan_package
from app.ingest.loaders.render import render_table
from app.ingest.loaders.text import load_text
from app.ingest.loaders.workbook import core_title, fast_read_allowed, fast_sheets, open_fast
from app.ingest.types import Block, LoadedDocument, Section

logger = logging.getLogger(__name__)

# Cells are counted against PARSE_MAX_CELLS and their text against PARSE_MAX_CHARS as they are
# read (`ParseGuard`): a sheet whose cells all point to one long shared string is refused after a
# few thousand cells, not after it has been expanded into gigabytes.
# csv's default field limit (128 KiB) rejects legitimate long text cells; a single larger field
# than this is not a table any more.
CSV_FIELD_LIMIT = 16 * 1024 * 1024
_SNIFF_CHARS = 64 * 1024
_DELIMITERS = ",;\t|"
_HEADER_SEARCH_ROWS = 10
_EXACT_INTEGER = 2**53
XLS_SUPPORTED = xlrd is not None
XLSX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# Named sheets, each an iterable of rows of raw cell values.
_Sheets = Iterable[tuple[str, Iterable[Sequence[Any]]]]


# ----------------------------------------------------------------------------------------- CSV


def load_csv(text: str, encoding: str, filename: str, *, tsv: bool = False) -> LoadedDocument:
    """Load CSV/TSV like langchain's CSVLoader: one section per data row, `{"row": i}` 0-based."""
    kind, content_type = ("tsv", "text/tab-separated-values") if tsv else ("csv", "text/csv")
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    dialect = _dialect(text, tsv=tsv)
    try:
        header, rows = _read_rows(csv.reader(io.StringIO(text, newline=""), dialect))
    except csv.Error as exc:
        # Text that is not a well-formed table is still worth indexing.
        logger.debug("csv unparsable, indexing as text: %s", exc)
        doc = load_text(text, encoding)
        return LoadedDocument(
            sections=doc.sections,
            blocks=doc.blocks,
            kind=kind,
            content_type=content_type,
            encoding=encoding,
            warnings=["the file is not a well-formed table; indexed as text"],
        )
    if header is None:
        return LoadedDocument(sections=[], blocks=[], kind=kind, content_type=content_type, encoding=encoding)
    keys = [key.strip() for key in header]
    sections: list[Section] = []
    for number, row in enumerate(rows):
        content = csv_row_text(keys, row)
        # A row of empty fields keeps its number (as in langchain) but makes no section.
        if any(value.strip() for value in row):
            sections.append(Section(text=content, metadata={"row": number}))
    table = Block(kind="table", text=render_table(rows, keys), page=None, rows=rows, headers=keys)
    return LoadedDocument(
        sections=sections, blocks=[table], kind=kind, content_type=content_type, encoding=encoding
    )


def csv_row_text(keys: Sequence[str], row: Sequence[str]) -> str:
    """One data row as langchain's CSVLoader renders it: `key: value` lines."""
    lines = [f"{key}: {value.strip()}" for key, value in zip(keys, row, strict=False)]
    # Missing trailing fields render empty (langchain writes "None"); extra ones as CSVLoader does.
    lines.extend(f"{key}: " for key in keys[len(row) :])
    if len(row) > len(keys):
        lines.append(f"None: {','.join(value.strip() for value in row[len(keys) :])}")
    return "\n".join(lines)


def _dialect(text: str, *, tsv: bool) -> type[csv.Dialect] | csv.Dialect:
    if tsv:
        return csv.excel_tab
    sample = text[:_SNIFF_CHARS]
    if len(text) > _SNIFF_CHARS and "\n" in sample:
        sample = sample[: sample.rindex("\n")]
    try:
        return csv.Sniffer().sniff(sample, delimiters=_DELIMITERS)
    except csv.Error:
        return csv.excel


def _read_rows(reader: Iterable[list[str]]) -> tuple[list[str] | None, list[list[str]]]:
    """The header and the data rows; blank lines are skipped, as csv.DictReader does."""
    header: list[str] | None = None
    rows: list[list[str]] = []
    guard = current_guard()
    for row in reader:
        if not row:
            continue
        guard.add_cells(len(row))
        if header is None:
            header = row
        else:
            rows.append(row)
    return header, rows


# ---------------------------------------------------------------------------------------- XLSX


def load_xlsx(path: Path, filename: str) -> LoadedDocument:
    """Load a workbook: one section per non-empty sheet (`{"sheet": name}`), rows as `header: value` lines."""
    check_zip(path, filename)
    # Every part is measured before a reader opens it: worksheets by their cells, the shared
    # strings by their entries, the rest by elements. Cells are counted again as they are read.
    shared_strings = _shared_strings_part(path)
    scan_package(path, shared_strings=shared_strings, worksheets=_is_worksheet)
    if fast_read_allowed(path, shared_strings, _is_worksheet, current_guard()):
        fast = _load_fast(path, filename)
        if fast is not None:
            return fast
    # A file object, not the path: openpyxl refuses paths whose extension is not .xlsx/.xlsm.
    with path.open("rb") as handle:
        try:
            workbook = openpyxl.load_workbook(handle, read_only=True, data_only=True)
        except (RagError, MemoryError):
            raise
        except Exception as exc:
            logger.debug("xlsx unreadable: %s", exc)
            raise UnsupportedFileType(_damaged(filename)) from None
        try:
            sections, blocks = _read_sheets(workbook, filename)
            title = workbook.properties.title or None
        finally:
            workbook.close()
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="xlsx",
        content_type=XLSX_CONTENT_TYPE,
        title=title,
    )


def _load_fast(path: Path, filename: str) -> LoadedDocument | None:
    """The workbook read by calamine (`workbook.py`); None when calamine cannot read it."""
    workbook = open_fast(path)
    if workbook is None:
        return None
    try:
        sections, blocks = _tables(fast_sheets(workbook), filename)
    except (RagError, MemoryError):
        raise
    except Exception as exc:  # a part calamine cannot read: openpyxl reads it, or says what is wrong
        logger.debug("calamine could not read a sheet: %s", type(exc).__name__)
        return None
    finally:
        workbook.close()
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="xlsx",
        content_type=XLSX_CONTENT_TYPE,
        title=core_title(path),
    )


def _read_sheets(workbook: Any, filename: str) -> tuple[list[Section], list[Block]]:
    def sheets() -> _Sheets:
        for sheet in workbook.worksheets:
            # Writers often declare wrong dimensions (A1:XFD1048576); read the cells actually there.
            sheet.reset_dimensions()
            yield sheet.title, sheet.iter_rows(values_only=True)

    try:
        return _tables(sheets(), filename)
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        logger.debug("xlsx sheet unreadable: %s", exc)
        raise UnsupportedFileType(_damaged(filename)) from None


def _tables(sheets: _Sheets, filename: str) -> tuple[list[Section], list[Block]]:
    """Sections and table blocks of named sheets of raw cell values; empty rows and sheets are skipped."""
    sections: list[Section] = []
    blocks: list[Block] = []
    guard = current_guard()
    for name, values in sheets:
        rows: list[list[str]] = []
        for raw in values:
            row = _row_text(raw, guard)
            while row and not row[-1]:
                row.pop()
            if not row:
                continue
            rows.append(row)
        if rows:
            section, block = _sheet(name, rows)
            sections.append(section)
            blocks.append(block)
    return sections, blocks


def _row_text(raw: Sequence[Any], guard: ParseGuard) -> list[str]:
    """A row's cells as text, counted (cells, and characters after shared strings are expanded)."""
    guard.add_cells(len(raw))
    row = [cell_text(value) for value in raw]
    guard.add_chars(sum(len(cell) for cell in row))
    return row


def _is_worksheet(name: str) -> bool:
    return name.startswith("xl/worksheets/") and not name.endswith(".rels")


def _shared_strings_part(path: Path) -> str | None:
    """The shared-string part's name (openpyxl reads it whole at load)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return next((n for n in archive.namelist() if n.lower().endswith("sharedstrings.xml")), None)
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


def load_xls(path: Path, filename: str) -> LoadedDocument:
    """Load a legacy Excel workbook (.xls, BIFF5-8) like an XLSX; needs xlrd (see `XLS_SUPPORTED`)."""
    if xlrd is None:
        raise UnsupportedFileType(
            f"{filename} is a legacy Excel workbook (.xls), which is not supported. "
            "Open it in Excel, save it as .xlsx or CSV, and upload that"
        )
    try:
        book = xlrd.open_workbook(str(path), on_demand=True)
    except Exception as exc:
        logger.debug("xls unreadable: %s", exc)
        if "encrypted" in str(exc).lower():
            raise UnsupportedFileType(
                f"{filename} is a password-protected Office document. "
                "Remove the password, save it, and upload it again"
            ) from None
        raise UnsupportedFileType(_damaged(filename, legacy=True)) from None

    def sheets() -> _Sheets:
        for index in range(book.nsheets):
            sheet = book.sheet_by_index(index)
            yield sheet.name, ([_xls_value(book, cell) for cell in sheet.row(r)] for r in range(sheet.nrows))
            book.unload_sheet(index)

    try:
        sections, blocks = _tables(sheets(), filename)
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        logger.debug("xls sheet unreadable: %s", exc)
        raise UnsupportedFileType(_damaged(filename, legacy=True)) from None
    finally:
        book.release_resources()
    return LoadedDocument(
        sections=sections, blocks=blocks, kind="xls", content_type="application/vnd.ms-excel"
    )


def _xls_value(book: Any, cell: Any) -> Any:
    """An xlrd cell as the Python value openpyxl would give (dates, booleans, error codes)."""
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            return xlrd.xldate.xldate_as_datetime(cell.value, book.datemode)
        except (ValueError, OverflowError, xlrd.xldate.XLDateError):
            return cell.value
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return bool(cell.value)
    if cell.ctype == xlrd.XL_CELL_ERROR:
        return xlrd.error_text_from_code.get(cell.value, "#ERROR")
    return cell.value


def _damaged(filename: str, *, legacy: bool = False) -> str:
    ext = ".xls" if legacy else ".xlsx"
    return (
        f"{filename} could not be read as an Excel workbook ({ext}): the file is damaged or not an "
        f"{ext[1:].upper()}. Open it in Excel, save it as .xlsx and upload it again"
    )


def _sheet(name: str, rows: list[list[str]]) -> tuple[Section, Block]:
    """A sheet's section and table block; rows above the header row (titles, notes) lead as text."""
    at = header_row_index(rows)
    preamble, header, data = rows[:at], rows[at], rows[at + 1 :]
    width = max(len(row) for row in rows[at:])
    padded = header + [""] * (width - len(header))
    headers = [cell or get_column_letter(i + 1) for i, cell in enumerate(padded)]
    parts = [f"## Sheet: {name}"]
    parts.extend(" | ".join(cell for cell in row if cell) for row in preamble)
    if data:
        for row in data:
            lines = [f"{key}: {value}" for key, value in zip(headers, row, strict=False) if value]
            parts.append("\n".join(lines))
    else:
        parts.append(" | ".join(header))
    section = Section(text="\n\n".join(parts), metadata={"sheet": name})
    block = Block(
        kind="table", text=render_table(data, headers), page=None, rows=data, headers=headers, title=name
    )
    return section, block


def header_row_index(rows: Sequence[Sequence[str]]) -> int:
    """The header row: the first of the top rows filled at least half as wide as the table.

    Sheets often start with a title or a note in A1 above the real header.
    """
    width = max(sum(1 for cell in row if cell) for row in rows[:50])
    for index, row in enumerate(rows[:_HEADER_SEARCH_ROWS]):
        if sum(1 for cell in row if cell) >= max(1, math.ceil(width / 2)):
            return index
    return 0


def cell_text(value: Any) -> str:
    """A cell value as people read it: integers without ".0", dates in ISO form, booleans as Excel."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        # every integer up to 2^53 is exact in a float; calamine gives each number as a float
        if value.is_integer() and abs(value) <= _EXACT_INTEGER:
            return str(int(value))
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0, 0):
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return " ".join(str(value).split())
