"""Render structural blocks as the readable, Markdown-flavoured text that sections carry.

Headings keep their `#` marks and list items a `- `, which tells the model (and a reader of
`POST /text`) where a section starts. Blocks are separated by a blank line, so the splitter's first
separator ("\\n\\n") falls between them; consecutive list items and table rows stay on adjacent lines.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.ingest.types import Block


def render_table(rows: Sequence[Sequence[str]], headers: Sequence[str] | None = None) -> str:
    """Rows as lines of cells joined by " | " (the header row first, when there is one)."""
    lines = [" | ".join(headers)] if headers else []
    lines.extend(" | ".join(row) for row in rows)
    return "\n".join(line for line in lines if line.strip(" |"))


def render_block(block: Block) -> str:
    """One block as text."""
    if block.kind == "heading":
        return f"{'#' * min(max(block.level or 1, 1), 6)} {block.text}"
    if block.kind == "list_item":
        return f"- {block.text}"
    if block.kind == "definition" and block.term:
        # The term, then its definition, as a <dt> and <dd> always read.
        return f"{block.term}\n\n{block.text}" if block.text else block.term
    return block.text


def render_blocks(blocks: Sequence[Block]) -> str:
    """Blocks as one text: a blank line between blocks, a single newline between list items."""
    parts: list[str] = []
    previous: Block | None = None
    for block in blocks:
        text = render_block(block)
        if not text.strip():
            continue
        if parts:
            tight = previous is not None and previous.kind == "list_item" and block.kind == "list_item"
            parts.append("\n" if tight else "\n\n")
        parts.append(text)
        previous = block
    return "".join(parts)
