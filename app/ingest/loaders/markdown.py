"""Markdown: V1 keeps the text as written (`#` headings help the model); blocks come from markdown-it-py.

markdown-it-py parses CommonMark plus GitHub's pipe tables: ATX and setext headings, paragraphs,
list items (with their nesting depth as `level`), block quotes, fenced and indented code, tables
(header cells and rows) and raw HTML blocks. Block text is plain text: emphasis marks, link
targets and escapes are gone, so `**max**_size` and `max\\_size` both read "max_size".
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from app.ingest.limits import current_guard
from app.ingest.loaders.render import render_table
from app.ingest.types import Block, BlockKind, LoadedDocument, Section

# Nesting beyond this (block quotes in list items in block quotes...) is read as text: markdown-it's
# own guard against pathological input.
_MAX_NESTING = 20
# markdown-it's inline parser is slow on some hostile shapes (100,000 "[" take ~4 s, growing
# quadratically); an inline run longer than this is kept as its raw text instead. Real paragraphs,
# table cells and headings are far shorter.
MAX_INLINE_CHARS = 10_000


def _parser() -> MarkdownIt:
    # The inline rule runs per token below, so an overlong one can be left raw.
    return MarkdownIt("commonmark", {"maxNesting": _MAX_NESTING}).enable("table").disable("inline")


_MD = _parser()


def inline_text(token: Token, softbreak: str = "\n") -> str:
    """Plain text of an inline token: text, code spans, link text and image alt text, no markup."""
    if token.children is None:
        return token.content.strip()
    parts: list[str] = []
    for child in token.children:
        kind = child.type
        if kind in ("text", "text_special", "code_inline"):
            parts.append(child.content)
        elif kind == "softbreak":
            parts.append(softbreak)
        elif kind == "hardbreak":
            parts.append("\n")
        elif kind == "image":
            parts.append(inline_text(child, softbreak) or child.content)
    return "".join(parts).strip()


class _Reader:
    """Walks markdown-it's token stream, keeping the list depth and the table being read."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._lists = 0
        self._item_open = False  # the current list item has produced its first block
        self._heading: int | None = None
        self._table: dict[str, Any] | None = None
        self._guard = current_guard()

    def add(self, kind: BlockKind, text: str, **fields: Any) -> None:
        if not text:
            return
        self._guard.add_chars(len(text))
        self.blocks.append(Block(kind=kind, text=text, page=None, **fields))

    def read(self, tokens: list[Token]) -> list[Block]:
        for token in tokens:
            handler = getattr(self, "_" + token.type, None)
            if handler is not None:
                handler(token)
        return self.blocks

    def _heading_open(self, token: Token) -> None:
        self._heading = int(token.tag[1:])

    def _heading_close(self, token: Token) -> None:
        self._heading = None

    def _bullet_list_open(self, token: Token) -> None:
        self._lists += 1

    _ordered_list_open = _bullet_list_open

    def _bullet_list_close(self, token: Token) -> None:
        self._lists -= 1

    _ordered_list_close = _bullet_list_close

    def _list_item_open(self, token: Token) -> None:
        self._item_open = True

    def _inline(self, token: Token) -> None:
        if self._table is not None:
            self._table["row"].append(" ".join(inline_text(token).split()))
        elif self._heading is not None:
            self.add("heading", inline_text(token, " "), level=self._heading)
        elif self._lists and self._item_open:
            self._item_open = False
            self.add("list_item", inline_text(token, " "), level=self._lists)
        else:
            self.add("paragraph", inline_text(token))

    def _fence(self, token: Token) -> None:
        text = token.content[:-1] if token.content.endswith("\n") else token.content
        if text.strip():
            self._guard.add_chars(len(text))
            self.blocks.append(Block(kind="code", text=text, page=None, title=token.info.strip() or None))

    def _code_block(self, token: Token) -> None:
        self.add("code", token.content.rstrip("\n"))

    def _html_block(self, token: Token) -> None:
        self.add("paragraph", token.content.strip())

    def _table_open(self, token: Token) -> None:
        self._table = {"headers": None, "rows": [], "row": [], "head": False}

    def _thead_open(self, token: Token) -> None:
        if self._table is not None:
            self._table["head"] = True

    def _thead_close(self, token: Token) -> None:
        if self._table is not None:
            self._table["head"] = False

    def _tr_open(self, token: Token) -> None:
        if self._table is not None:
            self._table["row"] = []

    def _tr_close(self, token: Token) -> None:
        table = self._table
        if table is None:
            return
        self._guard.add_cells(len(table["row"]))
        if table["head"]:
            table["headers"] = table["row"]
        else:
            table["rows"].append(table["row"])

    def _table_close(self, token: Token) -> None:
        table, self._table = self._table, None
        if table is None:
            return
        headers, rows = table["headers"], table["rows"]
        self.add("table", render_table(rows, headers), rows=rows, headers=headers)


def parse_markdown(text: str) -> list[Block]:
    """Blocks of a Markdown text, in reading order."""
    env: dict[str, Any] = {}
    tokens = _MD.parse(text, env)
    for token in tokens:
        if token.type != "inline":
            continue
        if len(token.content) > MAX_INLINE_CHARS:
            token.children = None  # read as raw text
            continue
        children: list[Token] = []
        _MD.inline.parse(token.content, _MD, env, children)  # `env` carries link references
        token.children = children
    return _Reader().read(tokens)


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
