"""How far a long ingest is: its stage and how many of its chunks have a vector.

    tracker = IngestProgress(f"Ingest of file {file_id}", report=job_progress)  # None: not a job
    async with tracker.logged():        # a log line every LOG_EVERY_S while it runs
        tracker.stage("parsing")
        tracker.chunks(120, 800)        # as embedding batches finish

A job's progress callback (`app/jobs/registry.Progress`) is told every change, and its worker writes
the latest with the next heartbeat, so `GET /jobs/{id}` shows it within about a second. An ingest that
is not a job (a synchronous `/embed`) logs where it is every LOG_EVERY_S instead, from the first
LOG_EVERY_S on, so a short one logs nothing but its final line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

LOG_EVERY_S = 10.0

# a job's progress callback: (done, total or None, note)
Report = Callable[[int, int | None, str | None], None]


def describe(label: str, stage: str, done: int, total: int | None, elapsed_s: float) -> str:
    """One progress line: `label: stage, done of total chunks, N s so far`."""
    counted = f", {done} of {total} chunks" if total is not None else ""
    return f"{label}: {stage}{counted}, {elapsed_s:.0f} s so far"


@dataclass
class IngestProgress:
    """An ingest's stage and chunk counts, told to `report` (a job's) on every change."""

    label: str
    report: Report | None = None
    stage_name: str = "starting"
    done: int = 0
    total: int | None = None
    started: float = field(default_factory=time.monotonic)

    def stage(self, name: str, done: int = 0, total: int | None = None) -> None:
        """A new stage begins (with its chunk counts when it has any)."""
        self.stage_name, self.done, self.total = name, done, total
        self._tell()

    def chunks(self, done: int, total: int) -> None:
        """`done` of the file's `total` chunks have a vector now."""
        self.done, self.total = done, total
        self._tell()

    def line(self) -> str:
        """Where the ingest is, as the log says it."""
        return describe(self.label, self.stage_name, self.done, self.total, time.monotonic() - self.started)

    def _tell(self) -> None:
        if self.report is not None:
            self.report(self.done, self.total, self.stage_name)

    @contextlib.asynccontextmanager
    async def logged(self, *, enabled: bool = True, every_s: float = LOG_EVERY_S) -> AsyncIterator[None]:
        """While the block runs, log `line()` every `every_s` (nothing when `enabled` is false)."""
        if not enabled:
            yield
            return

        async def beat() -> None:
            while True:
                await asyncio.sleep(every_s)
                logger.info("%s", self.line())

        task = asyncio.create_task(beat(), name=f"progress:{self.label}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
