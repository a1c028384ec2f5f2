"""Markdown: the text is kept as written (`#` headings help the model); blocks come from a light parser.

The parser knows ATX headings, paragraphs, list items, pipe tables and fenced code, which is what
chat uploads use; anything else (setext headings, block quotes, HTML) is kept as paragraph text.
"""

from __future__ import annotations

import re

from app.ingest.loaders.render import render_table
from app.ingest.types import Block, LoadedDocument, Section

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(.*)$")
_TABLE_DIVIDER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


def split_pipe_row(line: str) -> list[str]:
    """Cells of one pipe-table row, without the outer pipes; `\\|` stays a literal pipe."""
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    cells = re.split(r"(?<!\\)\|", line)
    return [cell.strip().replace("\\|", "|") for cell in cells]


def _is_table_start(line: str, divider: str) -> bool:
    """A header row followed by a divider with as many cells (GFM's rule; `a | b` over `---` is not one)."""
    return bool(_TABLE_DIVIDER.match(divider)) and len(split_pipe_row(divider)) == len(split_pipe_row(line))


def parse_markdown(text: str) -> list[Block]:
    """Blocks of a Markdown text, in reading order."""
    lines = text.split("\n")
    blocks: list[Block] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(Block(kind="paragraph", text="\n".join(paragraph).strip(), page=None))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            marker = fence.group(1)
            body: list[str] = []
            i += 1
            # An unclosed fence runs to the end of the document, as CommonMark says.
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            i += 1
            blocks.append(
                Block(kind="code", text="\n".join(body), page=None, title=fence.group(2).strip() or None)
            )
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            title = (heading.group(2) or "").strip()
            if title:
                blocks.append(Block(kind="heading", text=title, page=None, level=len(heading.group(1))))
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _is_table_start(line, lines[i + 1]):
            flush()
            headers = split_pipe_row(line)
            rows: list[list[str]] = []
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(split_pipe_row(lines[i]))
                i += 1
            blocks.append(
                Block(kind="table", text=render_table(rows, headers), page=None, rows=rows, headers=headers)
            )
            continue
        item = _LIST_ITEM.match(line)
        if item:
            flush()
            parts = [item.group(1).strip()]
            i += 1
            # Indented lines that are not items themselves continue the item.
            while (
                i < len(lines)
                and lines[i].strip()
                and lines[i][:1] in (" ", "\t")
                and not _LIST_ITEM.match(lines[i])
            ):
                parts.append(lines[i].strip())
                i += 1
            blocks.append(Block(kind="list_item", text=" ".join(parts), page=None))
            continue
        if not line.strip():
            flush()
        else:
            paragraph.append(line)
        i += 1
    flush()
    return blocks


def load_markdown(text: str, encoding: str) -> LoadedDocument:
    """Load Markdown: one section with the text as written, blocks from `parse_markdown`."""
    blocks = parse_markdown(text)
    title = next((b.text for b in blocks if b.kind == "heading" and b.level == 1), None)
    sections = [Section(text=text)] if text.strip() else []
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="markdown",
        content_type="text/markdown",
        encoding=encoding,
        title=title,
    )
