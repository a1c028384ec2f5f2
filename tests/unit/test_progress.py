"""Progress of long work: an ingest's stages and chunks, the worker's log line of a long job, V2 file
jobs' embedding progress, and the operator scripts' bar (terminal) or plain lines."""

from __future__ import annotations

import asyncio
import io
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from app.evidence.jobs import embedding_progress
from app.ingest import progress as progress_module
from app.ingest.pipeline import _chunk_counter
from app.ingest.progress import IngestProgress, describe
from app.jobs.worker import _Run
from app.progress_display import ProgressDisplay, write_line


class Recorder:
    """A job's progress callback that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None, str | None]] = []

    def __call__(self, done: int, total: int | None = None, note: str | None = None) -> None:
        self.calls.append((done, total, note))


def test_a_progress_line_names_stage_chunks_and_time() -> None:
    assert describe("Ingest of file f1", "embedding", 320, 800, 20.4) == (
        "Ingest of file f1: embedding, 320 of 800 chunks, 20 s so far"
    )
    assert describe("Ingest of file f1", "parsing", 0, None, 9.6) == "Ingest of file f1: parsing, 10 s so far"


def test_a_job_is_told_every_stage_and_chunk_count() -> None:
    told = Recorder()
    tracker = IngestProgress("Ingest of file f1", report=told)
    tracker.stage("parsing")
    tracker.stage("embedding", 0, 800)
    tracker.chunks(320, 800)
    tracker.stage("storing", 800, 800)
    assert told.calls == [
        (0, None, "parsing"),
        (0, 800, "embedding"),
        (320, 800, "embedding"),
        (800, 800, "storing"),
    ]


def test_chunks_are_counted_in_proportion_to_the_texts_sent() -> None:
    # 800 chunks, 300 unchanged (they have a vector already), 500 sent in batches of a call of 500
    tracker = IngestProgress("x")
    batch = _chunk_counter(tracker, 800, 300)
    batch(100, 500)
    assert (tracker.done, tracker.total) == (400, 800)  # 300 + 500 * 100/500
    batch(250, 500)
    assert tracker.done == 650  # 300 + 500 * 350/500
    batch(150, 500)
    assert tracker.done == 800
    # windows of long texts: the embedder counts more pieces than chunks, never past the total
    batch = _chunk_counter(tracker, 10, 0)
    batch(30, 20)
    assert tracker.done == 10


async def test_a_long_ingest_logs_where_it_is_and_a_short_one_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=progress_module.__name__)
    tracker = IngestProgress("Ingest of file long")
    tracker.stage("embedding", 5, 10)
    async with tracker.logged(every_s=0.02):
        await asyncio.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if r.name == progress_module.__name__]
    assert lines and all(line.startswith("Ingest of file long: embedding, 5 of 10 chunks") for line in lines)
    caplog.clear()
    async with tracker.logged(every_s=0.02, enabled=False):  # a job's ingest: the worker logs it
        await asyncio.sleep(0.1)
    async with tracker.logged(every_s=10.0):  # shorter than the interval: nothing
        await asyncio.sleep(0.01)
    assert not [r for r in caplog.records if r.name == progress_module.__name__]


def test_a_long_job_line_says_its_progress() -> None:
    job: Any = SimpleNamespace(id=42, attempts=1)
    kind: Any = SimpleNamespace(name="index-upload")
    run = _Run(job, kind, started=100.0)
    assert run.line(103.0) == "Job 42 (index-upload) running for 3 s"
    run.progress(0, None, "fetching the original")
    assert run.line(110.0) == "Job 42 (index-upload) running for 10 s: 0 done, fetching the original"
    run.progress(320, 800, "embedding")
    assert run.line(120.0) == "Job 42 (index-upload) running for 20 s: 320 of 800, embedding"


def test_v2_embedding_progress_counts_each_call_apart() -> None:
    told = Recorder()
    batch = embedding_progress(told, "embedding f1")
    batch(8, 20)
    batch(8, 20)
    batch(4, 20)
    batch(3, 5)  # a second call (the staging embeds twice): counted from 0 again
    assert told.calls == [
        (8, 20, "embedding f1"),
        (16, 20, "embedding f1"),
        (20, 20, "embedding f1"),
        (3, 5, "embedding f1"),
    ]


def test_a_terminal_gets_a_bar() -> None:
    out = io.StringIO()
    with ProgressDisplay(total=120, unit="files", label="run 7", stream=out, bar=True) as shown:
        shown.update(40, "3 staging, 0 failed", line="not printed: the bar shows it")
        shown.say("a message above the bar")
    text = out.getvalue()
    assert "run 7" in text and "40/120" in text and "3 staging, 0 failed" in text
    assert "a message above the bar" in text and "not printed" not in text


def test_elsewhere_plain_lines_once_per_change() -> None:
    out = io.StringIO()
    with ProgressDisplay(total=3, unit="files", label="run 7", stream=out) as shown:  # not a terminal
        shown.update(1, "1 staging")
        shown.update(1, "1 staging")  # unchanged: no second line
        shown.update(2, line="run 7 (agent_x, v2): 2 of 3 files staged")
        shown.say("done")
    assert out.getvalue().splitlines() == [
        "run 7: 1 of 3 files; 1 staging",
        "run 7 (agent_x, v2): 2 of 3 files staged",
        "done",
    ]
    quiet = io.StringIO()
    with ProgressDisplay(total=3, unit="files", label="kb", stream=quiet, lines=False) as shown:
        shown.update(1, "a.pdf")
    write_line("uploaded a.pdf", quiet)
    assert quiet.getvalue() == "uploaded a.pdf\n"
