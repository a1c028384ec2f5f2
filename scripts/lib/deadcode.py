#!/usr/bin/env python3
"""Dead code in app/ and scripts/lib/, found by vulture (scripts/lint runs this).

vulture reads app/, the operator scripts and benchmarks/ (both use app/'s API, so what they call is
alive), plus vulture_whitelist.py beside this file (names that frameworks and protocols call:
pydantic fields and validators, io and pickle hooks, markdown-it render rules, ...). It does not read
tests/: code that only tests call is dead. Findings are reported for app/ and scripts/lib/ only;
the scripts and benchmarks have dead code of their own that is not this check's business yet.

MIN_CONFIDENCE is 60, vulture's lowest: unused functions, methods, classes and attributes only ever
reach 60 %, so any higher threshold would find nothing but unused imports (which ruff already does).

    python3 scripts/lib/deadcode.py                       # exit 1 and list what is unused
    python3 scripts/lib/deadcode.py --report app --read app tests   # other trees (the unit tests)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import vulture
import vulture.utils

REPO = Path(__file__).resolve().parents[2]
WHITELIST = Path(__file__).resolve().with_name("vulture_whitelist.py")
MIN_CONFIDENCE = 60
READ = ("app", "scripts", "benchmarks")
REPORT = ("app", "scripts/lib")
# FastAPI registers route functions and exception handlers through these decorators; pydantic calls
# the validators
IGNORE_DECORATORS = [
    "@router.*",
    "@app.*",
    "@field_validator",
    "@model_validator",
    "@field_serializer",
    "@model_serializer",
]
IGNORE_NAMES = ["model_config"]  # pydantic's class-level configuration


def unused(read: list[Path], report: list[Path], whitelist: Path | None = WHITELIST) -> list[str]:
    """vulture's findings over `read` (plus the whitelist) that lie under one of `report`."""
    scanner = vulture.Vulture(ignore_names=IGNORE_NAMES, ignore_decorators=IGNORE_DECORATORS)
    scanner.scavenge([str(path) for path in [*read, *([whitelist] if whitelist else [])]])
    roots = [path.resolve() for path in report]
    found: list[str] = []
    if scanner.exit_code == vulture.utils.ExitCode.InvalidInput:
        # vulture printed which file it could not read or parse; its names would all look unused
        found.append("vulture could not read every file (see above): nothing was checked")
    for item in scanner.get_unused_code(min_confidence=MIN_CONFIDENCE):
        path = Path(item.filename).resolve()
        if any(path.is_relative_to(root) for root in roots):
            shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            found.append(f"{shown}:{item.first_lineno}: {item.message} ({item.confidence}% confidence)")
    return found


def main(argv: list[str]) -> int:
    """Print what is unused under the reported trees; exit 1 when anything is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--read", nargs="+", type=Path, default=[REPO / p for p in READ])
    parser.add_argument("--report", nargs="+", type=Path, default=[REPO / p for p in REPORT])
    parser.add_argument("--whitelist", type=Path, default=WHITELIST)
    args = parser.parse_args(argv[1:])
    found = unused(args.read, args.report, args.whitelist)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(
            f"deadcode: {len(found)} unused name(s). Delete them; a name that a framework or protocol "
            f"calls goes in {WHITELIST.relative_to(REPO)} with the reason.",
            file=sys.stderr,
        )
        return 1
    print("deadcode: nothing unused")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
