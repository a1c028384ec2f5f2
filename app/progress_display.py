"""Progress of a long command: a bar on a terminal (tqdm), plain lines anywhere else.

    with ProgressDisplay(total=120, unit="files", label="run 7") as shown:
        shown.update(40, "3 staging, 0 failed")   # the bar moves; plain: a line when anything changed
        shown.say("failed: f9: ...")               # a line above the bar (plain: the line)

On a terminal, log records go through the bar too (they would otherwise break its line). The
operator scripts use it (`scripts/v2-backfill`, `scripts/provision_knowledge_bases.py`).
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


class ProgressDisplay:
    """`done` of `total` units: a tqdm bar when `stream` is a terminal, else a line per change."""

    def __init__(
        self,
        *,
        total: int,
        unit: str,
        label: str,
        stream: TextIO | None = None,
        bar: bool | None = None,
        lines: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.unit = unit
        self.label = label
        self.lines = lines  # plain mode: a line per change (False: only what `say` says)
        self.bar_shown = self.stream.isatty() if bar is None else bar
        self._bar: Any = None
        self._redirect: contextlib.AbstractContextManager[Any] | None = None
        self._last: tuple[int, str] | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.bar_shown:
            self._bar = tqdm(total=self.total, unit=f" {self.unit}", desc=self.label, file=self.stream)
            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._redirect is not None:
            self._redirect.__exit__(kind, error, trace)
        if self._bar is not None:
            self._bar.close()

    def update(
        self, done: int, detail: str = "", *, total: int | None = None, line: str | None = None
    ) -> None:
        """`done` of the total are finished now (with a short detail: counts, the current item).

        Plain, a line when anything changed: `line` when given, else `label: done of total unit; detail`.
        """
        if total is not None:
            self.total = total
        if self._last == (done, detail):
            return
        self._last = (done, detail)
        if self._bar is not None:
            if total is not None:
                self._bar.total = total
            self._bar.n = done
            self._bar.set_postfix_str(detail, refresh=False)
            self._bar.refresh()
        elif self.lines:
            suffix = f"; {detail}" if detail else ""
            text = line if line is not None else f"{self.label}: {done} of {self.total} {self.unit}{suffix}"
            print(text, file=self.stream, flush=True)

    def say(self, line: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)


def write_line(line: str, stream: TextIO | None = None) -> None:
    """Print a line; on a terminal through tqdm, so that a bar being shown stays whole below it."""
    out = stream if stream is not None else sys.stdout
    if out.isatty():
        tqdm.write(line, file=out)
    else:
        print(line, file=out, flush=True)
