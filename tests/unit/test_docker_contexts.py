"""Both Dockerfiles can be built: every `COPY` source is inside the build context that Docker sends.

We cannot run Docker here, so the context is computed the way BuildKit computes it:
- the ignore file is `<Dockerfile>.dockerignore` next to the Dockerfile when it exists, else the
  context root's `.dockerignore`;
- patterns are anchored at the context root (`data` is only the top-level `data`), `**` spans
  folders, `!` lets a path back in, and the last pattern that matches a path or one of its parent
  folders decides (moby's `MatchesOrParentMatches`). Each pattern is matched with pathspec's
  gitignore wildcard rules, anchored with a leading `/`.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pathspec
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = [REPO / "Dockerfile", REPO / "patches" / "librechat" / "Dockerfile"]
# Never part of any context: secrets and databases (data/), local environments, history.
NEVER_SENT = [".git/HEAD", ".env", ".venv/pyvenv.cfg", "data/postgres-credentials.json", "tests/conftest.py"]


@dataclass(frozen=True)
class _Rule:
    text: str  # the cleaned pattern, relative to the context root
    exclusion: bool  # a `!` rule: lets paths back in
    spec: pathspec.PathSpec[Any]


class DockerIgnore:
    """The rules of one .dockerignore file, answering "is this path sent with the context?"."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.rules: list[_Rule] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclusion = line.startswith("!")
            if exclusion:
                line = line[1:].strip()
            # moby cleans each pattern (filepath.Clean) and drops a leading "/": it is root-relative
            cleaned = posixpath.normpath(line).lstrip("/")
            if cleaned in ("", "."):
                continue
            spec = pathspec.PathSpec.from_lines("gitignore", ["/" + cleaned])
            self.rules.append(_Rule(cleaned, exclusion, spec))

    @classmethod
    def for_dockerfile(cls, dockerfile: Path, context: Path) -> tuple[DockerIgnore, Path | None]:
        """The rules BuildKit applies when building `dockerfile` with `context`, and their file."""
        for candidate in (dockerfile.with_name(dockerfile.name + ".dockerignore"), context / ".dockerignore"):
            if candidate.is_file():
                return cls(candidate.read_text().splitlines()), candidate
        return cls([]), None

    def excluded(self, path: str) -> bool:
        """True when `path` (relative, with /) is left out of the context."""
        parts = path.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        matched = False
        for rule in self.rules:
            # as moby: an exclusion is only tested once matched, an inclusion only while unmatched
            if rule.exclusion != matched:
                continue
            if any(rule.spec.match_file(c) for c in candidates):
                matched = not rule.exclusion
        return matched

    def may_reinclude_under(self, folder: str) -> bool:
        """True when a `!` rule could let something under the excluded `folder` back in."""
        for rule in self.rules:
            if rule.exclusion:
                literal = rule.text.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
                if not literal or literal.startswith(folder + "/") or folder.startswith(literal.rstrip("/")):
                    return True
        return False


def context_files(context: Path, ignore: DockerIgnore) -> set[str]:
    """Every file of the working tree that `docker build` would send (symlinks included)."""
    sent: set[str] = set()
    for folder, dirs, files in os.walk(context):
        rel = Path(folder).relative_to(context).as_posix()
        prefix = "" if rel == "." else rel + "/"
        kept = []
        for name in dirs:
            path = prefix + name
            # walking .venv or node_modules would be slow; skip what cannot come back in
            if not ignore.excluded(path) or ignore.may_reinclude_under(path):
                kept.append(name)
        dirs[:] = kept
        sent.update(prefix + name for name in files if not ignore.excluded(prefix + name))
    return sent


@dataclass(frozen=True)
class Copy:
    """One COPY/ADD from the build context."""

    line: int
    sources: list[str]


def context_copies(dockerfile: Path) -> list[Copy]:
    """The COPY and ADD instructions of `dockerfile` that read the build context (not --from)."""
    copies: list[Copy] = []
    logical, start = "", 0
    for number, raw in enumerate(dockerfile.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            continue
        if not logical:
            start = number
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        instruction, _, rest = logical.partition(" ")
        logical = ""
        if instruction.upper() not in ("COPY", "ADD"):
            continue
        rest = rest.strip()
        flags: list[str] = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith("--from=") for flag in flags):
            continue
        args = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        copies.append(Copy(start, args[:-1]))
    return copies


def tracked_files(context: Path) -> set[str] | None:
    """Files git tracks (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=context, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {name for name in out.decode().split("\0") if name}


def problems_of(dockerfile: Path, ignore: DockerIgnore, context: Path = REPO) -> list[str]:
    """What would make the COPY lines of `dockerfile` fail, or copy less than the repository holds."""
    sent = context_files(context, ignore)
    tracked = tracked_files(context)
    found: list[str] = []
    for copy in context_copies(dockerfile):
        for source in copy.sources:
            where = f"{dockerfile.relative_to(REPO)}:{copy.line}: COPY {source}"
            if "$" in source:
                found.append(f"{where}: a variable in a context path cannot be checked")
                continue
            rel = posixpath.normpath(source).lstrip("/")
            if rel == ".." or rel.startswith("../"):
                found.append(f"{where}: outside the build context")
                continue
            if rel == ".":
                continue
            if any(c in rel for c in "*?["):
                if not any(fnmatchcase(path, rel) for path in sent):
                    found.append(f"{where}: matches nothing in the build context")
                continue
            if (context / rel).is_file():
                if rel not in sent:
                    found.append(f"{where}: excluded from the build context by its .dockerignore")
                continue
            if not (context / rel).is_dir():
                found.append(f"{where}: does not exist")
                continue
            inside = {p for p in sent if p.startswith(rel + "/")}
            if not inside:
                found.append(f"{where}: the folder is excluded from the build context by its .dockerignore")
            missing = sorted(p for p in (tracked or set()) if p.startswith(rel + "/") and p not in inside)
            if missing:
                found.append(f"{where}: tracked files left out of the context: {missing[:5]}")
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_copy_source_is_in_the_build_context(dockerfile: Path) -> None:
    ignore, ignore_file = DockerIgnore.for_dockerfile(dockerfile, REPO)
    assert ignore_file is not None, f"{dockerfile} has no .dockerignore: the whole folder would be sent"
    assert context_copies(dockerfile), f"no COPY read from {dockerfile}: is the parser broken?"
    problems = problems_of(dockerfile, ignore)
    hint = f"(the build context follows {ignore_file.relative_to(REPO)}: add the path there)"
    assert not problems, "\n".join([*problems, hint])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_secrets_and_local_state_are_never_sent(dockerfile: Path) -> None:
    ignore, _ = DockerIgnore.for_dockerfile(dockerfile, REPO)
    assert [p for p in NEVER_SENT if not ignore.excluded(p)] == []


def test_the_patched_image_uses_its_own_ignore_file() -> None:
    dockerfile = REPO / "patches" / "librechat" / "Dockerfile"
    _, ignore_file = DockerIgnore.for_dockerfile(dockerfile, REPO)
    assert ignore_file == dockerfile.with_name("Dockerfile.dockerignore")
    # with the service's root .dockerignore, the overlay's sources would be missing (the old bug)
    root_rules = DockerIgnore((REPO / ".dockerignore").read_text().splitlines())
    missing = problems_of(dockerfile, root_rules)
    assert any("COPY scripts/apply_patches.py" in p for p in missing)
    assert any("COPY patches/librechat/fileSearch.js" in p for p in missing)


@pytest.mark.parametrize(
    ("rules", "path", "excluded"),
    [
        (["data"], "data", True),
        (["data"], "data/postgres/PG_VERSION", True),  # a parent folder matches
        (["data"], "app/data/x.py", False),  # anchored at the root, unlike .gitignore
        (["/data/"], "data/x", True),  # leading and trailing slashes are cleaned away
        (["**/__pycache__"], "__pycache__/a.pyc", True),
        (["**/__pycache__"], "app/store/__pycache__/a.pyc", True),
        (["*.md"], "README.md", True),
        (["*.md"], "docs/guide.md", False),  # `*` never crosses a folder
        (["*", "!checksums.txt"], "checksums.txt", False),
        (
            ["*", "!scripts/apply_patches.py"],
            "scripts/apply_patches.py",
            False,
        ),  # back in from an excluded folder
        (["*", "!scripts/apply_patches.py"], "scripts/serve", True),
        (["app", "!app/main.py", "app/main.py"], "app/main.py", True),  # the last match wins
        (["# a comment", "", "  tests  "], "tests/x.py", True),
    ],
)
def test_dockerignore_semantics(rules: list[str], path: str, excluded: bool) -> None:
    assert DockerIgnore(rules).excluded(path) is excluded


def test_copy_parser_reads_every_form(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.11 AS base\n"
        "COPY a.txt b.txt ./\n"
        "COPY --chown=1:1 --chmod=644 \\\n"
        "     c.txt /d/\n"
        'COPY ["e f.txt", "/g/"]\n'
        "COPY --from=base /x /y\n"
        "ADD h.tar /h/\n"
        "RUN echo COPY nothing\n"
    )
    assert [(c.line, c.sources) for c in context_copies(dockerfile)] == [
        (3, ["a.txt", "b.txt"]),
        (4, ["c.txt"]),
        (6, ["e f.txt"]),
        (8, ["h.tar"]),
    ]
