"""Parse one upload in a child process that has a memory and a time limit.

    doc = await parse_in_worker(path, filename, content_type, limits=ParseLimits.from_settings(s))

A hostile file that slips past every counter in `app/ingest/limits.py` can still only exhaust its
own process: the child sets `RLIMIT_AS` to its start size plus `PARSE_MEMORY_MB` (a MemoryError,
or a kill, answers 413) and is killed when `PARSE_TIMEOUT_S` passes (422). The service's memory
then holds only the parsed result.

Why one process per upload from a fork server, measured on the 2-core development machine (idle:
a child that only imports the loaders and answers; in brackets `python -m benchmarks.parsing
--overhead`, a tiny DOCX end to end at load average 5-7): a fork-server child starts in ~14 ms
(65 ms, the same as parsing in-process); `spawn` imports the parsers every time, ~850 ms (2 s);
`fork` of the service ~6 ms (250 ms, it copies a large process) and copies threads (the event
loop's helpers, onnxruntime), which can deadlock the child; a `ProcessPoolExecutor` with
`max_tasks_per_child=1` on a fork server is as fast when a worker is ready (72-85 ms), but one task
cannot be killed without breaking the whole pool.

Only plain data crosses the boundary: the request is a small record of strings and numbers, the answer is
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
import pickle
import resource
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from app.errors import NoExtractableText, PayloadTooLarge, RagError, UnsupportedFileType
from app.ingest.limits import ParseLimitExceeded, ParseLimits
from app.ingest.types import Block, LoadedDocument, Section

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
_ALLOWED = {
    ("app.ingest.types", "LoadedDocument"): LoadedDocument,
    ("app.ingest.types", "Section"): Section,
    ("app.ingest.types", "Block"): Block,
}


@dataclass(frozen=True, slots=True)
class _Request:
    path: str
    filename: str
    content_type: str | None
    limits: ParseLimits
    pdf_extract_images: bool


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
) -> LoadedDocument:
    """Load `path` like `load_document`, in a child process bounded by `limits`."""
    request = _Request(str(path), filename, content_type, limits, pdf_extract_images)
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
    timed_out = False
    try:
        done, _ = await asyncio.wait({receiving}, timeout=limits.timeout_s)
        if not done:
            timed_out = True
            process.kill()
        outcome = await receiving
    finally:
        if process.is_alive():
            process.kill()  # cancelled (the client went away): never leave a parser running
        with contextlib.suppress(Exception):
            await asyncio.to_thread(process.join, 5)
    elapsed = time.monotonic() - started
    return _result(outcome, process.exitcode, timed_out, request, elapsed)


def _result(
    outcome: tuple[Any, ...] | None, exitcode: int | None, timed_out: bool, request: _Request, elapsed: float
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
    if timed_out:
        logger.warning("Parsing %r stopped after %.0f s (PARSE_TIMEOUT_S)", name, elapsed)
        raise ParseLimitExceeded(
            f"{name} was refused: reading it took longer than {request.limits.timeout_s:g} seconds "
            "(PARSE_TIMEOUT_S). Split it into smaller files and upload them separately, or ask the "
            "operator to raise the limit",
            status_code=422,
        )
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


class _DocumentUnpickler(pickle.Unpickler):
    """Accepts only the document model: a worker that was subverted cannot run code here."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}") from None


def _receive(reader: multiprocessing.connection.Connection) -> tuple[Any, ...] | None:
    """The child's answer, unpickled while it streams in; None when the child died without one."""
    try:
        with os.fdopen(reader.fileno(), "rb", buffering=1024 * 1024, closefd=False) as stream:
            answer = _DocumentUnpickler(stream).load()
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, MemoryError, OSError):
        return None
    finally:
        reader.close()
    return answer if isinstance(answer, tuple) and answer else None


# ------------------------------------------------------------------------------- in the child


def _child(request: _Request, writer: multiprocessing.connection.Connection) -> None:
    """Runs in the worker: apply the limits, parse, stream the answer back."""
    _apply_limits(request.limits)
    answer: tuple[Any, ...]
    try:
        from app.ingest.loaders import load_document

        doc = load_document(
            Path(request.path),
            request.filename,
            request.content_type,
            pdf_extract_images=request.pdf_extract_images,
            limits=request.limits,
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
            pickle.dump(answer, stream, protocol=pickle.HIGHEST_PROTOCOL)
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
    cpu = int(limits.timeout_s) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Parsing is batch work; on a small machine the service's event loop comes first. Should the
    # machine (or a container's cgroup) run out of memory anyway, the kernel kills a worker first.
    with contextlib.suppress(OSError):
        os.nice(5)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adjust:
        adjust.write("1000")


def _address_space() -> int | None:
    """This process's current virtual size in bytes (the loaded libraries are most of it)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None  # not Linux: no address-space cap, the time limit still applies
