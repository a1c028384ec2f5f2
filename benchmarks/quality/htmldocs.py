"""The HTML set: Python's reference documentation as Debian's `python3-doc` installs it.

Pages are the HTML files themselves (uploaded as they are, like a user would), sampled with a seed
from those that hold a table or define an identifier. Queries, by rule:
- table cells: "<row label> <column header>" -> that page, the cell's text as the answer; only
  tables with one header row; labels of 1..80 characters, answers with at least 3 letters or digits
  that are not part of the query; a (label, header) pair found on two sampled pages is dropped
  (two right answers); at most `per_table` cells per table, drawn with the seed;
- identifiers: a Sphinx definition's id (`os.path.join`, `str.split`; a C id without its `c.`
  prefix; anchors that are not dotted names are skipped) -> the page that defines it, the printed
  signature as the answer; ids defined on two sampled pages are dropped.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser, LexborNode

from benchmarks.quality.dataset import Document, Query
from benchmarks.quality.metrics import normalise, squash

DOC_ROOT = Path("/usr/share/doc/python3-doc/html")
INSTALL_HINT = (
    "the HTML set needs Debian's python3-doc package (Python's HTML documentation): "
    "run `apt-get update && apt-get install -y python3-doc` as root, or leave the set out with "
    "`--sets man`"
)
_SKIP_NAMES = ("genindex", "search.html", "py-modindex.html", "contents.html", "index.html", "download.html")
_SKIP_DIRS = ("_sources", "_static", "_downloads", "_images")
_SPACE = re.compile(r"\s+")
_ALNUM = re.compile(r"\w")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_LABEL_CHARS = 80
MAX_ANSWER_CHARS = 300
MIN_ANSWER_ALNUM = 3


@dataclass(frozen=True)
class TableCell:
    """One candidate question from a table."""

    page: str
    table: int
    label: str
    header: str
    value: str


@dataclass(frozen=True)
class Definition:
    """One identifier a page defines, with its printed signature."""

    page: str
    ident: str
    signature: str


def _text(node: LexborNode) -> str:
    # no separator: the markup's own whitespace stays, and `<code>x</code>,` stays "x,"
    return _SPACE.sub(" ", node.text(deep=True, separator="")).replace("\u00b6", "").strip()


def query_ident(sphinx_id: str) -> str | None:
    """The identifier a user would type for a definition's id (`c.` prefix of the C domain dropped);
    None for ids that are anchors rather than names (`opcode-DELETE_ATTR`, `cmdoption-...`)."""
    name = sphinx_id[2:] if sphinx_id.startswith("c.") else sphinx_id
    return name if _IDENT.fullmatch(name) else None


def eligible_pages(root: Path = DOC_ROOT) -> list[Path]:
    """Content pages (no indexes, search or download pages), sorted by relative path."""
    out = []
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in _SKIP_DIRS or any(rel.split("/")[-1].startswith(s) for s in _SKIP_NAMES):
            continue
        out.append(path)
    return out


def parse_page(markup: str, page: str) -> tuple[list[list[TableCell]], list[Definition]]:
    """The table cells (grouped per table) and definitions of one Sphinx page."""
    tree = LexborHTMLParser(markup)
    body = tree.css_first("div.body") or tree.body
    tables: list[list[TableCell]] = []
    defs: list[Definition] = []
    if body is None:
        return tables, defs
    for t_index, table in enumerate(body.css("table")):
        head = table.css("thead tr")
        rows = table.css("tbody tr")
        if len(head) != 1 or not rows:
            continue
        headers = [_text(c) for c in head[0].css("th, td")]
        cells: list[TableCell] = []
        for row in rows:
            values = [_text(c) for c in row.css("td, th")]
            if len(values) != len(headers) or not values[0]:
                continue
            label = values[0]
            for header, value in zip(headers[1:], values[1:], strict=True):
                if header and value:
                    cells.append(TableCell(page, t_index, label, header, value))
        if cells:
            tables.append(cells)
    for dt in body.css("dt.sig-object[id]"):
        ident = query_ident(dt.attributes.get("id") or "")
        if not ident:
            continue
        for link in dt.css("a.headerlink, span.viewcode-link"):
            link.decompose()
        signature = _text(dt)
        if signature:
            defs.append(Definition(page, ident, signature))
    return tables, defs


def usable_cell(cell: TableCell) -> bool:
    """The per-cell rules of the module docstring."""
    if not (1 <= len(cell.label) <= MAX_LABEL_CHARS) or not _ALNUM.search(cell.label):
        return False
    if len(cell.value) > MAX_ANSWER_CHARS or len(_ALNUM.findall(cell.value)) < MIN_ANSWER_ALNUM:
        return False
    return squash(cell.value) not in squash(f"{cell.label} {cell.header}")


def file_id_for(path: Path, root: Path = DOC_ROOT) -> str:
    """`library/os.path.html` -> `py-library-os.path.html`."""
    return "py-" + path.relative_to(root).as_posix().replace("/", "-")


def build(
    *,
    pages: int,
    table_queries: int,
    identifier_queries: int,
    per_table: int,
    seed: int,
    kb: str = "agent_quality_html",
    root: Path = DOC_ROOT,
) -> tuple[list[Document], list[Query], list[Definition], dict[str, int]]:
    """Documents, table and identifier queries, every definition (for mutations), and counts."""
    if not root.is_dir():
        raise FileNotFoundError(INSTALL_HINT)
    parsed: dict[Path, tuple[list[list[TableCell]], list[Definition]]] = {}
    for path in eligible_pages(root):
        tables, defs = parse_page(path.read_text(encoding="utf-8", errors="replace"), file_id_for(path, root))
        if tables or defs:
            parsed[path] = (tables, defs)
    chosen = sorted(parsed)
    random.Random(seed).shuffle(chosen)
    chosen = sorted(chosen[:pages])
    docs = [
        Document(file_id_for(p, root), file_id_for(p, root)[3:], str(p), "text/html", kb, str(p))
        for p in chosen
    ]
    rng = random.Random(seed + 2)
    sampled = [parsed[path] for path in chosen]
    table_pool, ident_pool, all_defs, counts = _pools(sampled, per_table, rng)
    counts = {"eligible_pages": len(parsed), "pages": len(chosen), **counts}
    tables_q = rng.sample(table_pool, min(table_queries, len(table_pool)))
    idents_q = rng.sample(ident_pool, min(identifier_queries, len(ident_pool)))
    return docs, _queries(tables_q, idents_q, kb), all_defs, counts


def _pools(
    sampled: list[tuple[list[list[TableCell]], list[Definition]]], per_table: int, rng: random.Random
) -> tuple[list[TableCell], list[Definition], list[Definition], dict[str, int]]:
    """The cells and identifiers a query may ask for (each on one sampled page only), every
    definition, and counts; up to `per_table` cells drawn from each table."""
    # cross-page ambiguity, over the sampled pages only (what is indexed)
    pair_pages: dict[tuple[str, str], set[str]] = {}
    ident_pages: dict[str, set[str]] = {}
    for tables, defs in sampled:
        for cells in tables:
            for c in cells:
                pair_pages.setdefault((normalise(c.label), normalise(c.header)), set()).add(c.page)
        for d in defs:
            ident_pages.setdefault(d.ident, set()).add(d.page)
    table_pool: list[TableCell] = []
    ident_pool: list[Definition] = []
    all_defs: list[Definition] = []
    counts = {"tables": 0, "cells": 0, "cells_usable": 0, "definitions": 0}
    for tables, defs in sampled:
        counts["tables"] += len(tables)
        for cells in tables:
            counts["cells"] += len(cells)
            usable = [
                c
                for c in cells
                if usable_cell(c) and len(pair_pages[(normalise(c.label), normalise(c.header))]) == 1
            ]
            counts["cells_usable"] += len(usable)
            table_pool.extend(rng.sample(usable, min(per_table, len(usable))))
        seen: set[str] = set()
        for d in defs:
            all_defs.append(d)
            if d.ident in seen or len(ident_pages[d.ident]) != 1:
                continue
            seen.add(d.ident)
            ident_pool.append(d)
    counts["definitions"] = len(ident_pool)
    return table_pool, ident_pool, all_defs, counts


def _queries(tables_q: list[TableCell], idents_q: list[Definition], kb: str) -> list[Query]:
    """A query per table cell (its row label and column header) and per identifier."""
    return [
        Query(
            qid=f"html:table:{i}",
            set="html-tables",
            kind="table-cell",
            text=f"{c.label} {c.header}",
            kb=kb,
            relevant=(c.page,),
            answer=c.value,
            answerable=True,
        )
        for i, c in enumerate(tables_q)
    ] + [
        Query(
            qid=f"html:ident:{d.ident}",
            set="html-identifiers",
            kind="identifier",
            text=d.ident,
            kb=kb,
            relevant=(d.page,),
            answer=d.signature,
            answerable=True,
        )
        for d in idents_q
    ]
