#!/usr/bin/env python3
"""Do the lock files still match pyproject.toml? (standard library only: runs before any install)

`scripts/lock` writes, at the top of each lock file, a digest of what it was resolved from:
pyproject.toml's `requires-python`, `dependencies`, `optional-dependencies` and build requirements.
This check recomputes that digest and compares every exact pin (`name==version`) of pyproject.toml
with the lock, so an install never goes ahead with a lock made for other pins.

    python3 scripts/lib/lockcheck.py            # exit 0, or 1 with what differs and the fix
    python3 scripts/lib/lockcheck.py --digest   # print the digest (scripts/lock uses it)
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGEST_LINE = "# pyproject-sha256: "
# lock file -> the optional-dependency groups it holds besides the runtime dependencies
LOCKS: dict[str, tuple[str, ...]] = {"requirements.lock": (), "requirements-test.lock": ("test",)}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)")


def normalise(name: str) -> str:
    """PEP 503 name: lower case, runs of `-`, `_` and `.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs(pyproject: dict[str, object]) -> dict[str, object]:
    """The parts of pyproject.toml a lock is resolved from."""
    project = pyproject.get("project") or {}
    build = pyproject.get("build-system") or {}
    assert isinstance(project, dict) and isinstance(build, dict)
    return {
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies") or [],
        "optional-dependencies": project.get("optional-dependencies") or {},
        "build-requires": build.get("requires") or [],
    }


def digest(pyproject: dict[str, object]) -> str:
    """sha256 of the lock inputs, independent of formatting and of every other pyproject section."""
    canonical = json.dumps(inputs(pyproject), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def pins(requirements: list[str]) -> dict[str, str]:
    """name -> version of the exact pins in a list of requirement strings (or lock lines)."""
    found: dict[str, str] = {}
    for line in requirements:
        match = _PIN.match(line.strip())
        if match:
            found[normalise(match.group(1))] = match.group(2)
    return found


def direct_requirements(spec: dict[str, object], extras: tuple[str, ...]) -> list[str]:
    """The runtime requirements of pyproject.toml plus those of `extras`."""
    runtime, groups = spec["dependencies"], spec["optional-dependencies"]
    assert isinstance(runtime, list) and isinstance(groups, dict)
    found = [str(r) for r in runtime]
    for extra in extras:
        found += [str(r) for r in groups.get(extra) or []]
    return found


@dataclass(frozen=True)
class Mismatch:
    """One way a lock file disagrees with pyproject.toml."""

    lock: str
    what: str


def check(pyproject_path: Path = REPO / "pyproject.toml", folder: Path = REPO) -> list[Mismatch]:
    """Every disagreement between pyproject.toml and the lock files in `folder`."""
    pyproject = tomllib.loads(pyproject_path.read_text(encoding="utf-8"))
    wanted_digest = digest(pyproject)
    spec = inputs(pyproject)
    problems: list[Mismatch] = []
    for lock_name, extras in LOCKS.items():
        lock_path = folder / lock_name
        if not lock_path.is_file():
            problems.append(Mismatch(lock_name, "is missing"))
            continue
        text = lock_path.read_text(encoding="utf-8")
        recorded = next(
            (line[len(DIGEST_LINE) :].strip() for line in text.splitlines() if line.startswith(DIGEST_LINE)),
            "",
        )
        if recorded != wanted_digest:
            problems.append(Mismatch(lock_name, "was made from other dependencies than pyproject.toml's"))
        locked = pins(text.splitlines())
        for name, version in pins(direct_requirements(spec, extras)).items():
            if name not in locked:
                problems.append(Mismatch(lock_name, f"has no {name} (pyproject.toml pins {version})"))
            elif locked[name] != version:
                problems.append(
                    Mismatch(lock_name, f"has {name} {locked[name]}, pyproject.toml pins {version}")
                )
    return problems


def main(argv: list[str]) -> int:
    """Print the digest, or check the locks and explain any mismatch."""
    if argv[1:] == ["--digest"]:
        print(digest(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))))
        return 0
    problems = check()
    if not problems:
        return 0
    print("The lock files do not match pyproject.toml:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem.lock} {problem.what}", file=sys.stderr)
    print(
        "Run scripts/lock to resolve them again (then commit pyproject.toml and both lock files).",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
