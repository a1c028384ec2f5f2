"""Progress lines on stderr, each stamped with the time since the run began, and phase timings."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator


class Progress:
    """Prints progress to stderr and records how long each named phase took."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.phases: dict[str, float] = {}

    def elapsed(self) -> float:
        """Seconds since the run began."""
        return time.perf_counter() - self.started

    def say(self, message: str) -> None:
        """One progress line."""
        print(f"[bench {self.elapsed():7.1f}s] {message}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; repeated names accumulate."""
        self.say(f"{name} ...")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.phases[name] = round(self.phases.get(name, 0.0) + took, 3)
            self.say(f"{name}: {took:.1f} s")
