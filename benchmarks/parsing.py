"""`python -m benchmarks.parsing`: what parsing costs the service, for hostile and for large files.

Run from the repository root with the test dependencies installed (`scripts/test` makes `.venv`):

    .venv/bin/python -m benchmarks.parsing             # overhead, bombs and two large uploads
    .venv/bin/python -m benchmarks.parsing --overhead  # only the start-method comparison

It prints, for each file, the answer (or the refusal), the wall time, and two memory peaks sampled
every 10 ms: this process (standing in for the service, which only receives the parsed result)
above its own idle size, and the worker processes it started. Nothing here asserts a speed; the
docs/decisions.md (Files we read, and their limits) quotes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psutil

from app.errors import RagError
from app.ingest.chunking import split_sections
from app.ingest.limits import ParseLimits
from app.ingest.worker import parse_in_worker, start_worker_server
from tests.fixtures.bombs import docx_bomb, nested_html, xlsx_huge_sheet, xlsx_shared_string_bomb
from tests.fixtures.documents import make_docx, make_text

MIB = 1024 * 1024


# ------------------------------------------------------------------------------ start methods


def _tiny_parse(path: str) -> int:
    from app.ingest.loaders import load_document

    return len(load_document(Path(path), "tiny.docx").text)


def _child(path: str, conn: object) -> None:
    conn.send(_tiny_parse(path))  # type: ignore[attr-defined]


def _per_process(method: str, path: str, runs: int) -> list[float]:
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["app.ingest.loaders"])
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(path, writer))  # type: ignore[attr-defined]
        process.start()
        writer.close()
        reader.recv()
        process.join()
        times.append(time.perf_counter() - started)
    return times


def _pool(method: str, path: str, runs: int, pause: float) -> list[float]:
    context = multiprocessing.get_context(method)
    times = []
    with ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
        for _ in range(runs):
            time.sleep(pause)
            started = time.perf_counter()
            pool.submit(_tiny_parse, path).result()
            times.append(time.perf_counter() - started)
    return times


async def _ours(path: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await parse_in_worker(path, "tiny.docx", limits=ParseLimits())
        times.append(time.perf_counter() - started)
    return times


def overhead(folder: Path, runs: int) -> None:
    """Per-upload cost of each way to run a parse in another process (a tiny DOCX, end to end)."""
    import app.ingest.loaders  # noqa: F401 - the service has the loaders imported, as here

    path = make_docx(folder / "tiny.docx", ["A short paragraph."], table=[["a", "b"], ["1", "2"]])
    print(f"\n## Per-upload overhead (tiny DOCX, {runs} runs; first run, then median of the rest)\n")
    print("| method | first ms | median ms |\n| --- | ---: | ---: |")
    rows: list[tuple[str, list[float]]] = [
        ("in-process (no isolation)", [_timed(lambda: _tiny_parse(str(path))) for _ in range(runs)]),
        ("fork per upload (unsafe: the service runs threads)", _per_process("fork", str(path), runs)),
        ("spawn per upload", _per_process("spawn", str(path), runs)),
        ("pool, spawn, max_tasks_per_child=1, back to back", _pool("spawn", str(path), runs, 0)),
        ("pool, forkserver, max_tasks_per_child=1, back to back", _pool("forkserver", str(path), runs, 0)),
        ("pool, forkserver, max_tasks_per_child=1, 1 s apart", _pool("forkserver", str(path), runs, 1)),
        ("parse_in_worker (forkserver per upload, limits, streamed result)", asyncio.run(_ours(path, runs))),
    ]
    for name, times in rows:
        print(f"| {name} | {times[0] * 1000:.0f} | {statistics.median(times[1:]) * 1000:.0f} |")


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# --------------------------------------------------------------------------------- memory


class Peaks:
    """Samples this process's RSS and its descendants' (the parse workers) every 10 ms."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._stop = threading.Event()
        self.idle = self._me.memory_info().rss
        self.service = self.idle
        self.workers = 0
        self._helpers = {child.pid for child in self._me.children(recursive=True)}

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.service = max(self.service, self._me.memory_info().rss)
            total = 0
            for child in self._me.children(recursive=True):
                if child.pid in self._helpers:
                    continue  # the fork server and resource tracker: idle helpers
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            self.workers = max(self.workers, total)
            self._stop.wait(0.01)

    @contextmanager
    def running(self) -> Iterator[Peaks]:
        thread = threading.Thread(target=self._sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


async def _measure(path: Path, name: str, limits: ParseLimits, chunk: bool) -> tuple[str, float, Peaks]:
    peaks = Peaks()
    started = time.perf_counter()
    with peaks.running():
        try:
            doc = await parse_in_worker(path, name, limits=limits)
            outcome = f"200: {len(doc.text) / 1e6:.1f} M chars, {len(doc.blocks):,} blocks"
            if chunk:  # V1's chunking happens in the service process too
                pieces = split_sections(doc.sections, 1500, 100)
                outcome += f", {len(pieces):,} chunks"
            del doc
        except RagError as exc:
            outcome = f"{exc.status_code}: {exc.detail.split(':', 1)[1].split('.')[0].strip()}"
    return outcome, time.perf_counter() - started, peaks


def _large_pdf(path: Path, target: int) -> Path:
    """A ~`target`-byte PDF: pages of text, each with a photo-like (incompressible) image."""
    import io
    import os

    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    side = 512
    per_image = side * side * 3
    pages = max(1, target // per_image)
    text = "The quarterly report describes revenue, storms, harbours and ships. " * 12
    for number in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Page {number + 1}. {text}", new_x="LMARGIN", new_y="NEXT")
        image = Image.frombytes("RGB", (side, side), os.urandom(per_image))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=0)
        pdf.image(buffer, x=20, y=80, w=150)
    pdf.output(str(path))
    return path


def memory(folder: Path, large: bool) -> None:
    """Bombs and large ordinary uploads: answer, time, and memory peaks."""
    limits = ParseLimits()
    cases: list[tuple[str, Callable[[Path], Path], bool]] = [
        ("document.xml of 190 MB (docx)", lambda p: docx_bomb(p / "bomb.docx", 190 * MIB), False),
        (
            "the same, padded with 4 MB stored (docx)",
            lambda p: docx_bomb(p / "padded.docx", 190 * MIB, padding=4 * MIB),
            False,
        ),
        ("sheet of 380 MB (xlsx)", lambda p: xlsx_huge_sheet(p / "sheet.xlsx", 380 * MIB), False),
        ("sheet of 200 MB (xlsx)", lambda p: xlsx_huge_sheet(p / "sheet200.xlsx", 200 * MIB), False),
        ("cells x one 20 KB shared string (xlsx)", lambda p: xlsx_shared_string_bomb(p / "s.xlsx"), False),
        ("100,000 unclosed <ul><li> (html)", lambda p: nested_html(p / "nested.html"), False),
    ]
    if large:
        cases += [
            (
                "ordinary PDF, 100 MB (text and photos)",
                lambda p: _large_pdf(p / "large.pdf", 100 * MIB),
                True,
            ),
            (
                "ordinary Markdown, 42 MB (44 M chars)",
                lambda p: make_text(
                    p / "large.md", ("## Part\n\n" + "lorem ipsum dolor sit amet " * 40 + "\n\n") * 40_000
                ),
                True,
            ),
        ]
    print("\n## Hostile and large files (default limits)\n")
    print(
        "| file | on disk | answer | time s | service peak above idle MiB | worker peak MiB |\n"
        "| --- | ---: | --- | ---: | ---: | ---: |"
    )
    for label, build, chunk in cases:
        path = build(folder)
        outcome, elapsed, peaks = asyncio.run(_measure(path, path.name, limits, chunk))
        print(
            f"| {label} | {path.stat().st_size / MIB:.2f} MB | {outcome} | {elapsed:.2f} | "
            f"{(peaks.service - peaks.idle) / MIB:.0f} | {peaks.workers / MIB:.0f} |"
        )
        path.unlink()


def main() -> None:
    """Run the chosen measurements."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parsing", description=__doc__)
    parser.add_argument("--overhead", action="store_true", help="only the start-method comparison")
    parser.add_argument("--bombs", action="store_true", help="only the hostile files (no large uploads)")
    parser.add_argument("--runs", type=int, default=10, help="runs per start method (%(default)s)")
    args = parser.parse_args()
    start_worker_server()
    with tempfile.TemporaryDirectory(prefix="ragoverlay-parsing-") as tmp:
        folder = Path(tmp)
        if not args.bombs:
            overhead(folder, args.runs)
        if not args.overhead:
            memory(folder, large=not args.bombs)


if __name__ == "__main__":
    main()
