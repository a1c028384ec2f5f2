"""Bounds on what parsing one file may cost, and the counters that enforce them while it runs.

A hostile file can be small and still expand without end: a zip member that inflates to gigabytes,
shared strings that every cell of a sheet points to, HTML nested a hundred thousand levels deep.
The loaders therefore count as they go (bytes inflated from each zip member, elements, depth,
cells, extracted characters) against `ParseLimits` and stop at the first limit crossed with a
`ParseLimitExceeded` whose detail names the limit and what to do. Memory and wall time are bounded
outside the loaders, by the worker process they run in (`app/ingest/worker.py`).

    with guarded(limits, filename, board):   # installs the counters for this parse (a ContextVar)
        current_guard().add_chars(n)         # any loader, anywhere below
        current_guard().reached_page(n)      # a PDF's page read: the time budget grows with pages

The same counters are the parse's progress: written into `board` (shared memory the worker's parent
reads), they tell the parent that the parse advances and how much work it has done, which sets
its time budget (`ParseLimits.budget_s`).

Zip members are counted while they are read, not from the sizes their headers declare: the
libraries' own zip reads (python-docx, python-pptx, openpyxl) go through `BoundedZipFile`.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import types
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import IO, Any, Protocol

from app.errors import RagError

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class OcrOptions:
    """What OCR may do in one parse: the engine, its languages, and what it may cost (OCR_* settings).

    `engine` is "auto" (Tesseract when it is installed with the languages' data), "tesseract" or
    "off". A page or picture is scaled to at most `max_pixels` before it is read, and a picture
    larger than that is refused unread (413); a file has at most `max_pages` pages or pictures read,
    each for at most `page_timeout_s`; the file's OCR time grows by `page_timeout_s` with each page
    begun, and `file_timeout_s`, when set, caps it. A PDF page is read when its text layer has fewer
    than `min_chars` non-space characters and it draws something.
    """

    engine: str = "auto"
    languages: tuple[str, ...] = ("deu", "eng")
    max_pixels: int = 50_000_000
    max_pages: int = 100
    page_timeout_s: float = 30.0
    file_timeout_s: float | None = None
    dpi: int = 200
    min_chars: int = 30


# Characters of text that count as one page for formats without pages (a dense printed page).
PAGE_CHARS = 3000
# A parse whose stall limit is shorter than one OCR page could be killed while Tesseract reads one
# page, which reports nothing until it is done: the limit is at least that page's time plus this.
OCR_STALL_MARGIN_S = 30.0


@dataclass(frozen=True, slots=True)
class ParseProgress:
    """How far one parse is: what its guard has counted so far (the worker's parent reads it)."""

    pages: int = 0  # pages of a PDF reached (the highest page read, in any pass over the file)
    ocr_pages: int = 0  # pages or pictures OCR has begun to read
    steps: int = 0  # other units of work: each pass over a page, each OCR read
    chars: int = 0
    cells: int = 0
    elements: int = 0
    unzipped: int = 0

    @property
    def work(self) -> float:
        """Pages read, or for formats without pages every PAGE_CHARS characters of text."""
        return max(float(self.pages), self.chars / PAGE_CHARS)


PROGRESS_SLOTS = len(fields(ParseProgress))
_PAGES, _OCR_PAGES, _STEPS, _CHARS, _CELLS, _ELEMENTS, _UNZIPPED = range(PROGRESS_SLOTS)


class Board(Protocol):
    """Where a guard publishes its counters: a shared array of integers (one slot per counter)."""

    def __getitem__(self, index: int) -> int: ...

    def __setitem__(self, index: int, value: int) -> None: ...


def read_board(board: Board) -> ParseProgress:
    """The progress published on `board`."""
    return ParseProgress(*(int(board[i]) for i in range(PROGRESS_SLOTS)))


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What one parse may consume; every field has its own setting (see `from_settings`).

    Time: a parse that advances may take `timeout_s` plus `seconds_per_page` for each page it has
    read (`ParseProgress.work`) plus `ocr.page_timeout_s` for each page OCR has begun; one that
    reports no progress for `stall_s` is stopped however young it is.
    """

    max_unzipped_bytes: int = 256 * _MIB
    max_cells: int = 2_000_000
    max_shared_strings: int = 1_000_000
    max_elements: int = 2_000_000
    max_depth: int = 512
    max_chars: int = 50_000_000
    timeout_s: float = 300.0
    seconds_per_page: float = 2.0
    stall_s: float = 120.0
    memory_mb: int = 1024
    ocr: OcrOptions = OcrOptions()

    def budget_s(self, progress: ParseProgress) -> float:
        """Seconds the parse may have taken so far, given how far it is (never above `ceiling_s`)."""
        earned = self.seconds_per_page * progress.work + self.ocr.page_timeout_s * progress.ocr_pages
        return min(self.timeout_s + earned, self.ceiling_s)

    @property
    def ceiling_s(self) -> float:
        """The largest budget a file within the size limits can earn: `max_chars` of text and
        `ocr.max_pages` read by OCR. It bounds a parse whose counters lie (they are its own word)."""
        most = (
            self.seconds_per_page * self.max_chars / PAGE_CHARS + self.ocr.page_timeout_s * self.ocr.max_pages
        )
        return self.timeout_s + most

    @classmethod
    def from_settings(cls, settings: Any) -> ParseLimits:
        """The limits configured in `Settings` (PARSE_* and OCR_* variables)."""
        return cls(
            max_unzipped_bytes=settings.parse_max_unzipped_bytes,
            max_cells=settings.parse_max_cells,
            max_shared_strings=settings.parse_max_shared_strings,
            max_elements=settings.parse_max_elements,
            max_depth=settings.parse_max_depth,
            max_chars=settings.parse_max_chars,
            timeout_s=settings.parse_timeout_s,
            seconds_per_page=settings.parse_seconds_per_page,
            stall_s=max(settings.parse_stall_timeout_s, settings.ocr_page_timeout_s + OCR_STALL_MARGIN_S),
            memory_mb=settings.parse_memory_mb,
            ocr=OcrOptions(
                engine=settings.ocr_engine,
                languages=tuple(settings.ocr_languages),
                max_pixels=settings.ocr_max_pixels,
                max_pages=settings.ocr_max_pages,
                page_timeout_s=settings.ocr_page_timeout_s,
                # no cap of its own unless set: the parse's budget grows by OCR_PAGE_TIMEOUT_S with
                # each page OCR begins, so OCR can no longer outrun it and lose the pages it read
                file_timeout_s=settings.ocr_file_timeout_s,
                dpi=settings.ocr_dpi,
                min_chars=settings.ocr_min_chars,
            ),
        )


class ParseLimitExceeded(RagError):
    """A file crossed a parsing limit: 413 for size-like limits, 422 for depth, time and crashes."""

    def __init__(self, detail: str, status_code: int = 413) -> None:
        self.status_code = status_code
        super().__init__(detail)

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses the worker boundary by pickle; the default reduce would lose the status code.
        return (type(self), (self.detail, self.status_code))


def _mib(size: int) -> str:
    return f"{size / _MIB:,.0f} MiB"


class ParseGuard:
    """The running counters of one parse, checked against its `ParseLimits` and published on `board`."""

    def __init__(self, limits: ParseLimits, filename: str, board: Board | None = None) -> None:
        self.limits = limits
        self.filename = filename
        self.board = board
        self.unzipped = 0
        self.chars = 0
        self.cells = 0
        self.elements = 0
        self.pages = 0
        self.ocr_pages = 0
        self.steps = 0
        # one file per parse: a member read again (a pre-scan, then the library) counts once
        self._members: dict[str, int] = {}

    def _publish(self, slot: int, value: int) -> None:
        if self.board is not None:
            self.board[slot] = value

    def reached_page(self, number: int) -> None:
        """A pass over the file has read page `number` (0-based): the parse advances."""
        self.pages = max(self.pages, number + 1)
        self._publish(_PAGES, self.pages)
        self.step()

    def began_ocr_page(self) -> None:
        """OCR begins to read a page or picture (each one adds `ocr.page_timeout_s` to the budget)."""
        self.ocr_pages += 1
        self._publish(_OCR_PAGES, self.ocr_pages)

    def step(self) -> None:
        """Any other unit of work done (an OCR read finished): the parse advances."""
        self.steps += 1
        self._publish(_STEPS, self.steps)

    def _too_large(self, what: str, setting: str) -> ParseLimitExceeded:
        return ParseLimitExceeded(
            f"{self.filename} was refused: {what} ({setting}). Split it into smaller files and "
            "upload them separately, or ask the operator to raise the limit"
        )

    def inflated(self, member: str, position: int) -> None:
        """Count bytes inflated from a zip member; a member read twice counts once (its furthest read)."""
        seen = self._members.get(member, 0)
        if position <= seen:
            return
        self._members[member] = position
        self.unzipped += position - seen
        self._publish(_UNZIPPED, self.unzipped)
        if self.unzipped > self.limits.max_unzipped_bytes:
            raise self._too_large(
                f"it unpacks to more than {_mib(self.limits.max_unzipped_bytes)}",
                "PARSE_MAX_UNZIPPED_BYTES",
            )

    def add_chars(self, count: int) -> None:
        """Count extracted characters."""
        self.chars += count
        self._publish(_CHARS, self.chars)
        if self.chars > self.limits.max_chars:
            raise self._too_large(
                f"it holds more than {self.limits.max_chars:,} characters of text", "PARSE_MAX_CHARS"
            )

    def add_cells(self, count: int) -> None:
        """Count spreadsheet or CSV cells read (empty cells inside a row included)."""
        self.cells += count
        self._publish(_CELLS, self.cells)
        if self.cells > self.limits.max_cells:
            raise self._too_large(f"it has more than {self.limits.max_cells:,} cells", "PARSE_MAX_CELLS")

    def add_elements(self, count: int) -> None:
        """Count markup elements (HTML, XML, the XML parts of office files)."""
        self.elements += count
        self._publish(_ELEMENTS, self.elements)
        if self.elements > self.limits.max_elements:
            raise self._too_large(
                f"it has more than {self.limits.max_elements:,} markup elements", "PARSE_MAX_ELEMENTS"
            )

    def check_shared_strings(self, count: int) -> None:
        """Refuse a workbook whose shared-string table has too many entries."""
        if count > self.limits.max_shared_strings:
            raise self._too_large(
                f"its shared-string table has more than {self.limits.max_shared_strings:,} entries",
                "PARSE_MAX_SHARED_STRINGS",
            )

    def check_depth(self, depth: int) -> None:
        """Refuse markup nested deeper than the limit (422: the content is not too big, but malformed)."""
        if depth > self.limits.max_depth:
            raise self.too_deep(self.limits.max_depth)

    def too_deep(self, levels: int) -> ParseLimitExceeded:
        """The refusal for markup nested more than `levels` deep."""
        return ParseLimitExceeded(
            f"{self.filename} was refused: its markup is nested more than {levels} levels deep "
            "(PARSE_MAX_DEPTH), which no real document needs. Repair or re-export the file "
            "(unclosed tags are the usual cause) and upload it again",
            status_code=422,
        )


_GUARD: contextvars.ContextVar[ParseGuard | None] = contextvars.ContextVar("parse_guard", default=None)


def current_guard() -> ParseGuard:
    """The active parse's guard; outside `guarded()` a fresh guard with default limits."""
    guard = _GUARD.get()
    return guard if guard is not None else ParseGuard(ParseLimits(), "the file")


@contextlib.contextmanager
def guarded(limits: ParseLimits, filename: str, board: Board | None = None) -> Iterator[ParseGuard]:
    """Install a guard for one parse (publishing its counters on `board`, when given)."""
    guard = ParseGuard(limits, filename, board)
    token = _GUARD.set(guard)
    try:
        yield guard
    finally:
        _GUARD.reset(token)


# Told the progress of every parse in a worker process that advances, in the service (a job's
# deadline listens: a parse that advances is the job's progress, though the job reports nothing).
ParseListener = Callable[[ParseProgress], None]
_LISTENER: contextvars.ContextVar[ParseListener | None] = contextvars.ContextVar(
    "ragoverlay_parse_listener", default=None
)


@contextlib.contextmanager
def watching_parses(listener: ParseListener) -> Iterator[None]:
    """Within this block, `listener(progress)` is called whenever a worker's parse advances."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def parse_listener() -> ParseListener | None:
    """The listener `watching_parses` installed here, if any."""
    return _LISTENER.get()


# ------------------------------------------------------------------------------------ zip reads

_READ_SIZE = 1024 * 1024


class _CountedMember(io.BufferedIOBase):
    """A zip member opened for reading whose inflated bytes are counted as they come out."""

    def __init__(self, member: Any, guard: ParseGuard, name: str) -> None:
        super().__init__()
        self._member = member
        self._guard = guard
        self._name = name

    def _count(self) -> None:
        self._guard.inflated(self._name, self._member.tell())

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            # Never let the member inflate in one call: read in steps and count each one.
            parts = bytearray()
            while block := self._member.read(_READ_SIZE):
                parts += block
                self._count()
            return bytes(parts)
        data: bytes = self._member.read(size)
        self._count()
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self._member.read1(size if size >= 0 else _READ_SIZE)
        self._count()
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._member.readline(size if size is not None else -1)
        self._count()
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._member.seekable())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = int(self._member.seek(offset, whence))
        self._count()
        return position

    def tell(self) -> int:
        return int(self._member.tell())

    def close(self) -> None:
        self._member.close()
        super().close()


class BoundedZipFile(zipfile.ZipFile):
    """A ZipFile whose members, opened for reading, count their inflated bytes against the guard."""

    def open(self, name: Any, mode: Any = "r", pwd: bytes | None = None, **kwargs: Any) -> IO[bytes]:
        member = super().open(name, mode, pwd, **kwargs)
        if mode != "r":
            return member
        label = name.filename if isinstance(name, zipfile.ZipInfo) else str(name)
        return _CountedMember(member, current_guard(), label)  # type: ignore[return-value]


def _bounded_zipfile_module() -> types.ModuleType:
    """A stand-in for the `zipfile` module whose ZipFile is `BoundedZipFile`."""
    shim = types.ModuleType("zipfile")
    shim.__dict__.update({k: v for k, v in vars(zipfile).items() if not k.startswith("__")})
    shim.ZipFile = BoundedZipFile  # type: ignore[attr-defined]
    return shim


def install_parser_bounds() -> None:
    """Route the office libraries' zip reads through `BoundedZipFile` (idempotent), and more.

    python-docx, python-pptx and openpyxl open packages with their own `ZipFile`; replacing the name
    in their modules (not in `zipfile` itself) bounds exactly their reads. `tests/unit/test_parse_limits`
    proves each library is covered, so a library that changes how it opens zips fails a test.

    openpyxl's read-only worksheet also scans a whole sheet at load when the sheet declares no
    dimensions (a hostile sheet omits them): we reset the dimensions anyway, so it never scans.
    """
    import docx.opc.phys_pkg
    import openpyxl.reader.excel
    import pptx.opc.serialized
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    # the libraries are untyped here: the replaced names are module attributes, not an API
    class _UnmeasuredWorksheet(ReadOnlyWorksheet):  # type: ignore[misc]
        def _get_size(self) -> None:
            """Skip the dimension scan; the loader calls `reset_dimensions()` and reads what is there."""

    docx.opc.phys_pkg.ZipFile = BoundedZipFile  # type: ignore[attr-defined]
    openpyxl.reader.excel.ZipFile = BoundedZipFile
    if openpyxl.reader.excel.ReadOnlyWorksheet is ReadOnlyWorksheet:  # not replaced yet
        openpyxl.reader.excel.ReadOnlyWorksheet = _UnmeasuredWorksheet
    if pptx.opc.serialized.zipfile.ZipFile is not BoundedZipFile:  # type: ignore[attr-defined]
        pptx.opc.serialized.zipfile = _bounded_zipfile_module()  # type: ignore[attr-defined]
