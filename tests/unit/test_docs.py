"""The README is a short front door, and every link of it and of `docs/` leads somewhere real."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.unit.docs_text import DOCS, README, REPO, anchors, headings, links, page, pages, section, slug

# Development-log wording a reader should never meet: the docs say what the software does.
DEVELOPMENT_LOG = re.compile(
    r"\bthis session\b|\bissues? #?\d+|\btracker\b|too large to fetch|\bissue's\b", flags=re.IGNORECASE
)


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/"


def test_readme_links_every_docs_page() -> None:
    linked = {target.split("#", 1)[0] for _, target in links(README.read_text(encoding="utf-8"))}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in linked]
    assert not unlinked, f"README.md links none of {unlinked}"


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    broken = []
    for number, target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists() or REPO not in (linked, *linked.parents):
            broken.append(f"{number}: {target} (no such file in the repository)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{number}: {target} (no heading with that anchor)")
    assert not broken, f"{path.relative_to(REPO)}: " + "; ".join(broken)


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_development_log_wording(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [
        f"{n}: {m.group(0)!r}"
        for n, line in enumerate(text.splitlines(), 1)
        for m in DEVELOPMENT_LOG.finditer(line)
    ]
    assert not found, f"{path.relative_to(REPO)}: " + "; ".join(found)


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_references_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for name in ("CONTRACT.md", "BASELINES.md", "STYLE.md", "/work/"):
        assert name not in text, f"{path.relative_to(REPO)} names {name}"


def test_every_docs_page_has_one_title() -> None:
    for path in sorted(DOCS.glob("*.md")):
        levels = [level for level, _ in headings(path.read_text(encoding="utf-8"))]
        assert levels[:1] == [1] and levels.count(1) == 1, path.name


@pytest.mark.parametrize(
    ("title", "anchor"),
    [
        (
            "Checking allow-lists against LibreChat's catalogue",
            "checking-allow-lists-against-librechats-catalogue",
        ),
        ("`/query_multiple` at 200,000 chunks", "query_multiple-at-200000-chunks"),
        ("Stronger local embedding models?", "stronger-local-embedding-models"),
        ("Files we read, and their limits", "files-we-read-and-their-limits"),
        ("/query_v2", "query_v2"),
    ],
)
def test_slugs_are_githubs(title: str, anchor: str) -> None:
    assert slug(title) == anchor


def test_a_broken_anchor_is_caught() -> None:
    # the checker itself: a page whose link names a heading that is not there
    text = "# Title\n\n## Real heading\n\nSee [it](#real-heading) and [not](#missing).\n"
    targets = [target for _, target in links(text)]
    assert targets == ["#real-heading", "#missing"]
    assert "real-heading" in anchors(text) and "missing" not in anchors(text)


def test_the_container_commands_are_the_modules_the_scripts_run() -> None:
    """The image has no scripts/: operations.md names the module each script runs, and this keeps
    the two in step (a module that moves, or a script that runs another one, fails here)."""
    text = section(page("operations.md"), "Commands inside the container")
    rows = re.findall(r"^\| `(scripts/[\w-]+)[^`]*` \| `python -m ([\w.]+)", text, flags=re.M)
    assert {script for script, _ in rows} == {"scripts/v2-backfill", "scripts/mcp"}, rows
    for script, module in rows:
        assert f"-m {module} " in (REPO / script).read_text(), f"{script} does not run {module}"
        assert importlib.util.find_spec(module) is not None, module
    shown = set(re.findall(r"python -m ([\w.]+)", text))
    assert shown == {module for _, module in rows} | {"app.runtime.entrypoint"}, shown
