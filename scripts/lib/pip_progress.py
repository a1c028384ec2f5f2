#!/usr/bin/env python3
"""A line per package while pip installs a lock file (standard library only: runs before any install).

The first `scripts/serve` installs every package of requirements.lock (about 110, some of them tens
of MB): with `pip -q` it said nothing for minutes, and pip's own output is three lines a package
plus many lines of noise. This reads pip's output and prints, on stderr, one line per package of
the lock with its place, version and download size, a line for the install step (unpacking the
large wheels is slow too) and the time the whole install took. pip's whole output goes to a log
file; when pip fails, venv.sh prints its tail.

    pip install -r requirements.lock 2>&1 | python3 scripts/lib/pip_progress.py requirements.lock LOG
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

_ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*==", re.MULTILINE)
# pip's lines, one of the first three for each entry of the lock
_COLLECTING = re.compile(r"^Collecting ([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)")
# a wheel from a local folder (pip's --find-links): name and version from the file name
_PROCESSING = re.compile(r"^Processing \S*?([A-Za-z0-9._]+)-([^-/\s]+)-[^/\s]+\.whl\b")
_SATISFIED = re.compile(r"^Requirement already satisfied: ([A-Za-z0-9._-]+)")
_IGNORED = re.compile(r"^Ignoring ([A-Za-z0-9._-]+): markers")
_SIZE = re.compile(r"^\s+(Downloading|Using cached) \S+ \(([^)]+)\)")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
_ERROR = re.compile(r"^ERROR: ")


def lock_entries(lock: Path) -> int:
    """How many packages a lock file names (some only for other platforms)."""
    return len(_ENTRY.findall(lock.read_text()))


def progress(lines: Iterable[str], total: int) -> Iterator[str]:
    """The progress lines for pip's output `lines` of an install of a `total`-entry lock."""
    seen = 0
    width = len(str(total))
    pending: str | None = None  # a package line waiting for its size (pip prints it next)
    for line in lines:
        line = line.rstrip("\n")
        if size := _SIZE.match(line):
            if pending is not None:
                how = "cached" if size.group(1) == "Using cached" else "download"
                yield f"{pending} ({size.group(2)}, {how})"
                pending = None
            continue
        if pending is not None and not line.startswith(" "):
            yield pending  # no size line: a local wheel, or a source pip built
            pending = None
        if collecting := _COLLECTING.match(line) or _PROCESSING.match(line):
            seen += 1
            pending = f"  [{seen:>{width}}/{total}] {collecting.group(1)} {collecting.group(2)}"
            if line.startswith("Processing"):
                yield f"{pending} (local file)"
                pending = None
        elif _SATISFIED.match(line) or _IGNORED.match(line):
            seen += 1  # already installed, or not for this platform: nothing to say
        elif installing := _INSTALLING.match(line):
            count = len(installing.group(1).split(", "))
            yield f"  unpacking and installing {count} packages (the large wheels take a minute or more) ..."
        elif _ERROR.match(line):
            yield line
    if pending is not None:
        yield pending


def main(argv: list[str]) -> int:
    """Read pip's output on stdin; progress on stderr, everything in the log."""
    lock, log_path = Path(argv[1]), Path(argv[2])
    started = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:

        def logged() -> Iterator[str]:
            for line in sys.stdin:
                log.write(line)
                log.flush()
                yield line

        for out in progress(logged(), lock_entries(lock)):
            print(out, file=sys.stderr, flush=True)
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    print(f"  pip finished after {took} (its whole output: {log_path})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
