"""Parse one upload in a child process that has a memory and a time limit.

    doc = await parse_in_worker(path, filename, content_type, limits=ParseLimits.from_settings(s))

A hostile file that slips past every counter in `app/ingest/limits.py` can still only exhaust its
own process: the child sets `RLIMIT_AS` to its start size plus `PARSE_MEMORY_MB` (a MemoryError,
or a kill, answers 413), and the parent kills it (422) when it stops advancing or outruns its time
budget. The service's memory then holds only the parsed result.

Time scales with the work, so a big honest file is never cut for its size or a busy machine. The
child's guard publishes its counters (pages, OCR pages, characters, cells, elements, bytes
unzipped) in shared memory; the parent reads them every second or so and kills the child when
they have not moved for `PARSE_STALL_TIMEOUT_S` (a parser stuck in C code, a hostile page), or
when its age passes `ParseLimits.budget_s`: `PARSE_TIMEOUT_S` plus `PARSE_SECONDS_PER_PAGE` per page
read plus `OCR_PAGE_TIMEOUT_S` per page OCR began. The counters are the child's own word: one that
lies earns at most `ParseLimits.ceiling_s`, the budget of the largest file the size limits admit.
The child's CPU limit follows the same budget (`_follow_budget`). A parse inside a job tells the
job's deadline that it advances (`watching_parses`).

Why one process per upload from a fork server, measured on the 2-core development machine (idle:
a child that only imports the loaders and answers; in brackets `python -m benchmarks.parsing
--overhead`, a tiny DOCX end to end at load average 5-7): a fork-server child starts in ~14 ms
(65 ms, the same as parsing in-process); `spawn` imports the parsers every time, ~850 ms (2 s);
`fork` of the service ~6 ms (250 ms, it copies a large process) and copies threads (the event
loop's helpers, onnxruntime), which can deadlock the child; a `ProcessPoolExecutor` with
`max_tasks_per_child=1` on a fork server is as fast when a worker is ready (72-85 ms), but one task
cannot be killed without breaking the whole pool.

Only plain data crosses the boundary: the request is a small record of strings and numbers (and the
shared counters), the answer is
a pickle of `LoadedDocument` streamed through a pipe (never held whole in memory) and read back by
an unpickler that accepts nothing but the document model's classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import forkserver
from pathlib import Path
from typing import Any, Literal

from app.errors import NoExtractableText, PayloadTooLarge, RagError, UnsupportedFileType
from app.ingest import codec
from app.ingest.limits import (
    PAGE_CHARS,
    PROGRESS_SLOTS,
    Board,
    ParseLimitExceeded,
    ParseLimits,
    ParseProgress,
    parse_listener,
    read_board,
)
from app.ingest.types import LoadedDocument

logger = logging.getLogger(__name__)

_CONTEXT = multiprocessing.get_context("forkserver")
# The fork server imports the loaders once; every child starts with them loaded (and Tesseract's
# library, ~0.3 s to import, where it is installed: a missing module is skipped by the preload).
_CONTEXT.set_forkserver_preload(["app.ingest.worker", "app.ingest.loaders", "tesserocr"])
_EXIT_MEMORY = 75
_ERRORS: dict[str, type[RagError]] = {
    "UnsupportedFileType": UnsupportedFileType,
    "PayloadTooLarge": PayloadTooLarge,
    # a scan or picture OCR could not read (or OCR is off): the detail says what to do
    "NoExtractableText": NoExtractableText,
}


# `load_document`'s signature: (path, filename, content_type, *, pdf_extract_images, limits, board)
Loader = Callable[..., LoadedDocument]
# How often the child raises its CPU limit to the budget it has earned, and the slack above it.
_CPU_FOLLOW_S = 1.0
_CPU_SLACK_S = 5


@dataclass(frozen=True, slots=True)
class _Request:
    path: str
    filename: str
    content_type: str | None
    limits: ParseLimits
    pdf_extract_images: bool
    board: Board  # shared memory: the child's guard writes its counters, the parent reads them
    loader: Loader | None = None  # None: `load_document` (tests name another, importable, function)


@dataclass(frozen=True, slots=True)
class _Stopped:
    """Why the parent killed the child: no progress for the stall limit, or past its budget."""

    why: Literal["stalled", "budget"]
    progress: ParseProgress
    elapsed_s: float
    budget_s: float


def start_worker_server() -> None:
    """Start the fork server in the background, so the first upload does not wait for it (~0.6 s)."""
    threading.Thread(target=forkserver.ensure_running, name="parse-forkserver", daemon=True).start()


async def parse_in_worker(
    path: Path,
    filename: str,
    content_type: str | None = None,
    *,
    limits: ParseLimits,
    pdf_extract_images: bool = False,
    loader: Loader | None = None,
) -> LoadedDocument:
    """Load `path` like `load_document`, in a child process bounded by `limits`."""
    board = _CONTEXT.RawArray("q", PROGRESS_SLOTS)
    request = _Request(str(path), filename, content_type, limits, pdf_extract_images, board, loader)
    reader, writer = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(target=_child, args=(request, writer), name="ragoverlay-parse", daemon=True)
    started = time.monotonic()
    try:
        await asyncio.to_thread(process.start)  # a round trip to the fork server: blocking I/O
    except BaseException:
        reader.close()
        raise
    finally:
        writer.close()
    # The reading thread owns `reader` and closes it; it ends when the child exits or is killed.
    receiving = asyncio.ensure_future(asyncio.to_thread(_receive, reader))
    try:
        stopped = await _watch(receiving, limits, board, started)
        if stopped is not None:
            process.kill()
        outcome = await receiving
    finally:
        if process.is_alive():
            process.kill()  # cancelled (the client went away): never leave a parser running
        with contextlib.suppress(Exception):
            await asyncio.to_thread(process.join, 5)
    return _result(outcome, process.exitcode, stopped, request)


async def _watch(
    receiving: asyncio.Future[tuple[Any, ...] | None], limits: ParseLimits, board: Board, started: float
) -> _Stopped | None:
    """Wait for the child's answer, reading its progress; why to stop it, when it must be stopped."""
    listener = parse_listener()
    poll_s = min(1.0, limits.stall_s / 4)
    seen, advanced = read_board(board), time.monotonic()
    while True:
        done, _ = await asyncio.wait({receiving}, timeout=poll_s)
        if done:
            return None
        now = time.monotonic()
        progress = read_board(board)
        if progress != seen:
            seen, advanced = progress, now
            if listener is not None:
                listener(progress)
        budget = limits.budget_s(progress)
        if now - advanced >= limits.stall_s:
            return _Stopped("stalled", progress, now - started, budget)
        if now - started >= budget:
            return _Stopped("budget", progress, now - started, budget)


def _result(
    outcome: tuple[Any, ...] | None, exitcode: int | None, stopped: _Stopped | None, request: _Request
) -> LoadedDocument:
    name = request.filename
    if outcome is not None and outcome[0] == "ok":
        document: LoadedDocument = outcome[1]
        return document
    if outcome is not None and outcome[0] == "error":
        _, kind, status, detail = outcome
        logger.info("Refused %r (%s): %s", name, status, detail)
        error_type = _ERRORS.get(kind)
        raise error_type(detail) if error_type is not None else ParseLimitExceeded(detail, status)
    if stopped is not None:
        raise _out_of_time(name, stopped, request.limits)
    if (outcome is not None and outcome[0] == "memory") or exitcode in (_EXIT_MEMORY, -signal.SIGKILL):
        logger.warning("Parsing %r ran out of memory (PARSE_MEMORY_MB)", name)
        raise ParseLimitExceeded(
            f"{name} was refused: reading it needs more than {request.limits.memory_mb} MB of memory "
            "(PARSE_MEMORY_MB). Split it into smaller files and upload them separately, or ask the "
            "operator to raise the limit"
        )
    reason = outcome[1] if outcome is not None and outcome[0] == "crash" else f"exit code {exitcode}"
    logger.warning("Parsing %r failed in the worker: %s", name, reason)
    raise ParseLimitExceeded(
        f"{name} could not be read: the parser failed on it. Re-export or re-save the file "
        "(for example print it to PDF) and upload it again",
        status_code=422,
    )


def _out_of_time(name: str, stopped: _Stopped, limits: ParseLimits) -> ParseLimitExceeded:
    """The 422 for a child killed for time: which limit, how far it had come, what to do."""
    progress = stopped.progress
    if stopped.why == "stalled":
        read = _read_so_far(progress)
        logger.warning(
            "Parsing %r stopped: no progress for %s s (PARSE_STALL_TIMEOUT_S), %s read in %.0f s",
            name,
            _seconds(limits.stall_s),
            read,
            stopped.elapsed_s,
        )
        return ParseLimitExceeded(
            f"{name} was refused: reading it made no progress for {_seconds(limits.stall_s)} seconds "
            f"(PARSE_STALL_TIMEOUT_S; {read} read by then). The file may be damaged: re-export or "
            "re-save it (for example print it to PDF) and upload it again, or ask the operator to "
            "raise the limit",
            status_code=422,
        )
    per_page = f"PARSE_SECONDS_PER_PAGE ({limits.seconds_per_page:g} s) for each"
    if progress.pages:
        earned = f"{per_page} of the {progress.pages:,} pages read"
    else:
        earned = f"{per_page} {PAGE_CHARS:,} characters of the {progress.chars:,} read"
    if progress.ocr_pages:
        earned += (
            f", and OCR_PAGE_TIMEOUT_S ({limits.ocr.page_timeout_s:g} s) for each of the "
            f"{progress.ocr_pages:,} pages OCR began"
        )
    logger.warning(
        "Parsing %r stopped after %.0f s: past its time budget, %s read",
        name,
        stopped.elapsed_s,
        _read_so_far(progress),
    )
    return ParseLimitExceeded(
        f"{name} was refused: reading it took longer than its time budget of {_seconds(stopped.budget_s)} "
        f"seconds: PARSE_TIMEOUT_S ({limits.timeout_s:g} s) plus {earned}. Split it into smaller "
        "files and upload them separately, or ask the operator to raise the limits",
        status_code=422,
    )


def _read_so_far(progress: ParseProgress) -> str:
    """How much of the file had been read: its pages, or its characters of text."""
    if progress.pages:
        return "1 page" if progress.pages == 1 else f"{progress.pages:,} pages"
    return f"{progress.chars:,} characters of text" if progress.chars else "nothing"


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def _receive(reader: multiprocessing.connection.Connection) -> tuple[Any, ...] | None:
    """The child's answer, unpickled while it streams in; None when the child died without one."""
    try:
        with os.fdopen(reader.fileno(), "rb", buffering=1024 * 1024, closefd=False) as stream:
            answer = codec.load(stream)
    except (*codec.UNREADABLE, MemoryError, OSError):
        return None
    finally:
        reader.close()
    return answer if isinstance(answer, tuple) and answer else None


# ------------------------------------------------------------------------------- in the child


def _child(request: _Request, writer: multiprocessing.connection.Connection) -> None:
    """Runs in the worker: apply the limits, parse, stream the answer back."""
    _follow_budget(request.limits, request.board)  # first: its stack counts in the address space
    _apply_limits(request.limits)
    answer: tuple[Any, ...]
    try:
        from app.ingest.loaders import load_document

        load = request.loader or load_document
        doc = load(
            Path(request.path),
            request.filename,
            request.content_type,
            pdf_extract_images=request.pdf_extract_images,
            limits=request.limits,
            board=request.board,
        )
        answer = ("ok", doc)
    except RagError as exc:
        answer = ("error", type(exc).__name__, exc.status_code, exc.detail)
    except MemoryError:
        answer = ("memory",)
    except Exception as exc:  # a parser bug on hostile input: a 422 for the file, never a 500
        answer = ("crash", f"{type(exc).__name__}: {str(exc)[:200]}")
    try:
        with os.fdopen(writer.fileno(), "wb", buffering=1024 * 1024, closefd=False) as stream:
            codec.dump(answer, stream)
    except MemoryError:
        os._exit(_EXIT_MEMORY)
    except BrokenPipeError:  # the service gave up on us
        os._exit(1)
    finally:
        writer.close()


def _apply_limits(limits: ParseLimits) -> None:
    """Cap this process: address space (start size + budget), CPU time, no core files, lower priority."""
    budget = limits.memory_mb * 1024 * 1024
    size = _address_space()
    if size is not None:
        resource.setrlimit(resource.RLIMIT_AS, (size + budget,) * 2)
    # CPU time: the parent's wall-clock budget is the limit, and it grows with the pages read.
    # This process (PDFium, Tesseract here: single-threaded) spends at most its wall time in CPU
    # time, so a CPU limit that follows the same budget never cuts a file the parent lets run; it
    # ends a parse stuck in a loop even when no parent is left to kill it (`_follow_budget` raises
    # the soft limit as the budget grows; the hard limit is the largest budget a file can earn).
    cpu = int(limits.timeout_s) + _CPU_SLACK_S
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, _cpu_ceiling(limits)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Parsing is batch work; on a small machine the service's event loop comes first. Should the
    # machine (or a container's cgroup) run out of memory anyway, the kernel kills a worker first.
    with contextlib.suppress(OSError):
        os.nice(5)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adjust:
        adjust.write("1000")


def _cpu_ceiling(limits: ParseLimits) -> int:
    return int(limits.ceiling_s) + 2 * _CPU_SLACK_S


def _follow_budget(limits: ParseLimits, board: Board) -> None:
    """Raise this process's CPU limit to the time budget its progress has earned, once a second.

    A thread of the child: while a loader holds the interpreter in C code without progress, the
    limit stays where it was, as it should.
    """

    def follow() -> None:
        granted = limits.timeout_s
        while True:
            time.sleep(_CPU_FOLLOW_S)
            budget = limits.budget_s(read_board(board))
            if budget > granted:
                granted = budget
                soft = min(int(budget) + _CPU_SLACK_S, _cpu_ceiling(limits))
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(resource.RLIMIT_CPU, (soft, _cpu_ceiling(limits)))

    threading.stack_size(256 * 1024)  # it needs little, and all it takes counts in RLIMIT_AS
    threading.Thread(target=follow, name="parse-cpu-budget", daemon=True).start()


def _address_space() -> int | None:
    """This process's current virtual size in bytes (the loaded libraries are most of it)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None  # not Linux: no address-space cap, the time limit still applies
