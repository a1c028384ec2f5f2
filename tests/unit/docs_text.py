"""Reading the README and the `docs/` pages as a test needs them: pages, sections, headings, links."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def page(name: str) -> str:
    """The text of `docs/<name>`."""
    return (DOCS / name).read_text(encoding="utf-8")


def pages() -> list[Path]:
    """The README and every page of `docs/`."""
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every heading outside code blocks, in order."""
    found = []
    for _, line in prose_lines(text):
        match = _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def section(text: str, title: str) -> str:
    """The body of the heading `title` (any level), up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    prose = dict(prose_lines(text))
    start = level = None
    for number in range(1, len(lines) + 1):
        match = _HEADING.match(prose.get(number, ""))
        if not match:
            continue
        if start is None:
            if match.group(2) == title:
                start, level = number, len(match.group(1))
        elif len(match.group(1)) <= level:  # type: ignore[operator]
            return "\n".join(lines[start : number - 1])
    if start is None:
        raise AssertionError(f"no heading {title!r}")
    return "\n".join(lines[start:])


def slug(title: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link renders as its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor GitHub gives the headings of a page (a repeated slug gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, title in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link outside code; inline code spans are skipped."""
    found = []
    for number, line in prose_lines(text):
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            found.append((number, target))
    return found
