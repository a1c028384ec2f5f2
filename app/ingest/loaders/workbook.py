"""XLSX through python-calamine (Rust), when a pre-pass shows what it will hold is within the limits.

calamine reads a sheet several times faster than openpyxl (`scripts/bench ingest --xlsx`), but it
builds the whole sheet before Python sees a cell: a dense grid from the first to the last cell
(one cell at XFD1048576 means 17 billion), each shared-string cell with its own copy of the string
(100,000 cells pointing to one 20 KB string are 2 GB). openpyxl streams, and the loader's counters
stop it at PARSE_MAX_CELLS and PARSE_MAX_CHARS; calamine cannot be stopped half-way. So a byte-level
pass over the worksheets measures first, at C speed, what calamine would build: the grid's cells
(last row times last column, per sheet) and the characters of every shared-string cell (the bytes
of each referenced `<si>` entry, markup included: an upper bound). Only a workbook within both
limits, whose cells are all written the plain way (`<c r="B7" ...>`, as Excel, LibreOffice,
openpyxl and XlsxWriter write them), goes to calamine; any other goes to openpyxl as before, which
also reads whatever calamine refuses. The cells and characters are counted again as the loader
renders them, either way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from lxml import etree

from app.errors import RagError
from app.ingest.limits import BoundedZipFile, ParseGuard

try:  # optional: without it every workbook is read by openpyxl
    import python_calamine
except ImportError:  # pragma: no cover - depends on the installation
    python_calamine = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_STEP = 1024 * 1024
# Every cell opens with its reference; shared-string cells carry their index in <v>.
_CELL_START = b'<c r="'
_CELL_ROW = re.compile(rb'<c r="[A-Z]{1,3}(\d{1,7})"')
_STRING_REF = re.compile(rb'<c r="[A-Z]{1,3}\d{1,7}"(?: s="\d+")? t="s"(?: [^>]*)?><v>(\d+)</v>')
_COLUMN = {k: re.compile(rb'<c r="([A-Z]{%d})\d' % k) for k in (3, 2, 1)}
_SI_START = re.compile(rb"<si[\s>]")
_SI_END = re.compile(rb"</si>")
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
# Rows of raw cell values, by sheet name (what `tabular._tables` renders).
Sheets = Iterator[tuple[str, Sequence[Sequence[Any]]]]


def column_number(letters: bytes) -> int:
    """`A` -> 1, `Z` -> 26, `AA` -> 27, `XFD` -> 16384."""
    number = 0
    for char in letters:
        number = number * 26 + char - 64
    return number


def string_lengths(table: bytes) -> np.ndarray | None:
    """Bytes of each entry of a shared-string table, in order; None when its entries are not plain."""
    starts = np.fromiter((m.start() for m in _SI_START.finditer(table)), dtype=np.int64)
    ends = np.fromiter((m.end() for m in _SI_END.finditer(table)), dtype=np.int64)
    if len(starts) != len(ends) or bool((ends < starts).any()):
        return None
    return ends - starts


def sheet_extent(member: IO[bytes], lengths: np.ndarray | None) -> tuple[int, int] | None:
    """(cells of the dense grid, characters of its shared-string cells) of one worksheet part.

    None when a cell is written another way than the plain one, or points past the string table:
    then nobody can say cheaply what calamine would build.
    """
    last_row = last_column = chars = 0
    carry = b""
    while True:
        block = member.read(_STEP)
        data = carry + block
        # whole rows only, so no cell is cut in two (the last block takes the rest)
        cut = data.rfind(b"</row>") + len(b"</row>") if block else len(data)
        if block and cut < len(b"</row>"):
            carry = data
            continue
        part, carry = data[:cut], data[cut:]
        if part.count(b"<c ") + part.count(b"<c>") + part.count(b"<c/") != part.count(_CELL_START):
            return None
        rows = _CELL_ROW.findall(part)
        if rows:
            last_row = max(last_row, int(np.array(rows).astype(np.int64).max()))
            last_column = max(last_column, _widest(part))
        refs = _STRING_REF.findall(part)
        if len(refs) != part.count(b' t="s"'):
            return None
        if refs:
            index = np.array(refs).astype(np.int64)
            if lengths is None or int(index.max()) >= len(lengths):
                return None
            chars += int(lengths[index].sum())
        if not block:
            return last_row * last_column, chars


def _widest(part: bytes) -> int:
    """The last column any cell of `part` is in (the longest letters first: few cells have them)."""
    for pattern in _COLUMN.values():
        if pattern.search(part):
            return max(column_number(letters) for letters in set(pattern.findall(part)))
    return 0


def fast_read_allowed(
    path: Path, shared_strings: str | None, is_worksheet: Callable[[str], bool], guard: ParseGuard
) -> bool:
    """True when calamine is installed and what it would build stays within the parse's limits."""
    if python_calamine is None:
        return False
    try:
        with BoundedZipFile(path) as archive:
            lengths = None
            if shared_strings is not None:
                with archive.open(shared_strings) as member:
                    lengths = string_lengths(member.read())
                if lengths is None:
                    return False
            cells = chars = 0
            for name in archive.namelist():
                if not is_worksheet(name):
                    continue
                with archive.open(name) as member:
                    extent = sheet_extent(member, lengths)
                if extent is None:
                    return False
                cells, chars = cells + extent[0], chars + extent[1]
    except (RagError, MemoryError):
        raise
    except Exception as exc:  # damaged (zip, zlib, CRC...): openpyxl reads it or says what is wrong
        logger.debug("workbook pre-pass failed: %s", type(exc).__name__)
        return False
    return cells <= guard.limits.max_cells and chars <= guard.limits.max_chars


def open_fast(path: Path) -> Any | None:
    """A calamine workbook, or None when calamine cannot read the file (openpyxl then tries)."""
    assert python_calamine is not None
    try:
        return python_calamine.CalamineWorkbook.from_path(str(path))
    except Exception as exc:  # calamine's own errors, or a panic surfaced as one
        logger.debug("calamine could not open the workbook: %s", type(exc).__name__)
        return None


def fast_sheets(workbook: Any) -> Sheets:
    """The workbook's worksheets (not chart or macro sheets), each as rows from A1, as openpyxl gives."""
    assert python_calamine is not None
    for index, meta in enumerate(workbook.sheets_metadata):
        if meta.typ != python_calamine.SheetTypeEnum.WorkSheet:
            continue
        # from A1, not from the first filled cell: a header's column letters stay openpyxl's
        yield meta.name, workbook.get_sheet_by_index(index).to_python(skip_empty_area=False)


def core_title(path: Path) -> str | None:
    """The document title from `docProps/core.xml` (what openpyxl reports as the workbook title)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        with BoundedZipFile(path) as archive, archive.open("docProps/core.xml") as member:
            root = etree.fromstring(member.read(), parser=parser)
    except (RagError, MemoryError):
        raise
    except Exception:  # no such part, or a damaged one: no title, as openpyxl
        return None
    node = root.find(_DC_TITLE)
    return (node.text or None) if node is not None else None
