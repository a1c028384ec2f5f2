"""Navigation pages: a table of contents, a list of figures or tables, a back-of-book index.

    pdf_navigation(page_text) -> "toc" | "index" | None
    html_navigation(html_page_stats(body)) -> "toc" | "index" | None

Such a page names every topic of the document and holds none of them: a question about a topic
finds its entry there as readily as the page that explains it. The loaders mark these pages (V1's
section metadata `navigation`, V2's `Block.boilerplate`); the stores keep them out of search results
and in everything that reads a whole file (`/documents`, the context route).

A PDF page is a table of contents when enough of its lines are entries: text ending in a page number
after dot leaders, or (under a "Contents" title, or in a long run whose numbers ascend) text ending
in a page number. It is an index when enough lines end in a list of page numbers ("apt-get, 45, 67")
or a "see" reference, under an "Index" title or in alphabetical order. An HTML page is navigation
when nearly all its text is link text, or when it is a Sphinx index, module index or search page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from selectolax.lexbor import LexborNode

NavigationKind = Literal["toc", "index"]

# A page number at the end of an entry: arabic or roman.
_PAGE_NUMBER = re.compile(r"\d{1,4}|[ivxlcdm]{1,7}", re.IGNORECASE)
_LEADERS = ("....", ". . . .", "\u2026\u2026", "\u2026 \u2026", "\u00b7\u00b7\u00b7")
# An entry that ends in a page number without leaders: "1.2 Scope 14", "Chapter 3 Results 27".
_ENDS_IN_NUMBER = re.compile(r"^(?=.*[^\W\d_]).{2,200}?\s(\d{1,4}|[ivxlcdm]{1,7})$", re.IGNORECASE)
# An index entry: a term, then page numbers or ranges ("kernel, 12, 45-47", "Kernel 12 f."), or a
# cross-reference ("see apt", "siehe Paket").
_INDEX_ENTRY = re.compile(
    r"^(?=.*[^\W\d_]).{1,120}?[,\s]\s*\d{1,4}(?:\s*[-\u2013]\s*\d{1,4}|\s*ff?\.)?"
    r"(?:\s*,\s*\d{1,4}(?:\s*[-\u2013]\s*\d{1,4}|\s*ff?\.)?)*$"
    r"|^.{1,80}[,\s]\s*\(?(?:see|see also|siehe|siehe auch)\s+\S.*$",
    re.IGNORECASE,
)
_TOC_TITLE = re.compile(
    r"^(?:table of )?contents$|^inhalt(?:sverzeichnis)?$|^list of (?:figures|tables|illustrations)$"
    r"|^(?:abbildungs|tabellen)verzeichnis$|^sommaire$|^table des mati[eè]res$",
    re.IGNORECASE,
)
_INDEX_TITLE = re.compile(
    r"^(?:index|general index|subject index|stichwortverzeichnis|sachverzeichnis|register|"
    r"schlagwortverzeichnis|indice)$",
    re.IGNORECASE,
)
_TITLE_LINES = 4  # a page's title is among its first lines (after a running header)
_MIN_ENTRIES = 4
_MAX_LINE = 300


def pdf_navigation(text: str) -> NavigationKind | None:
    """What kind of navigation page a PDF page's text is, or None for a page of content."""
    lines = [" ".join(line.split()) for line in text.split("\n")]
    lines = [line for line in lines if line and len(line) <= _MAX_LINE]
    if not lines:
        return None
    titles = lines[:_TITLE_LINES]
    toc_title = any(_TOC_TITLE.match(line) for line in titles)
    index_title = any(_INDEX_TITLE.match(line) for line in titles)
    leaders = sum(1 for line in lines if _is_leader_entry(line))
    numbered = [line for line in lines if _ENDS_IN_NUMBER.match(line)]
    if leaders >= _MIN_ENTRIES and leaders >= 0.4 * len(lines):
        return "toc"
    # a contents page's short last page: a few leader lines, and nearly every line an entry
    if leaders >= 2 and len(numbered) >= 0.7 * len(lines):
        return "toc"
    if toc_title and len(numbered) >= _MIN_ENTRIES and len(numbered) >= 0.5 * len(lines):
        return "toc"
    entries = [line for line in lines if _INDEX_ENTRY.match(line)]
    enough = len(entries) >= _MIN_ENTRIES and len(entries) >= 0.5 * len(lines)
    if enough and (index_title or (len(entries) >= 12 and _alphabetical(entries))):
        return "index"
    if len(numbered) >= 12 and len(numbered) >= 0.7 * len(lines) and _ascending(numbered):
        return "toc"
    return None


def _is_leader_entry(line: str) -> bool:
    head, _, last = line.rpartition(" ")
    if not head:
        head, last = line.rstrip("0123456789"), line[len(line.rstrip("0123456789")) :]
    return bool(last and _PAGE_NUMBER.fullmatch(last)) and any(leader in head for leader in _LEADERS)


def _ascending(lines: list[str]) -> bool:
    """True when the page numbers ending the lines mostly ascend (a contents page's, not a table's)."""
    numbers = [int(n) for line in lines if (n := line.rsplit(" ", 1)[-1]).isdigit()]
    if len(numbers) < len(lines) * 0.8:
        return False
    steps = list(pairwise(numbers))
    rising = sum(1 for a, b in steps if b >= a)
    return len(set(numbers)) > 2 and rising >= 0.85 * len(steps)


def _alphabetical(lines: list[str]) -> bool:
    """True when the entries' first letters mostly keep alphabetical order (an index's, not a list's)."""
    initials = [next((ch for ch in line.casefold() if ch.isalpha()), "") for line in lines]
    steps = list(pairwise(initials))
    ordered = sum(1 for a, b in steps if a <= b)
    return len(set(initials)) >= 2 and ordered >= 0.9 * len(steps)


@dataclass(frozen=True, slots=True)
class HtmlPageStats:
    """What decides whether an HTML page is navigation: its text, its link text, its markers."""

    text_chars: int
    link_chars: int
    links: int
    index_table: bool = False  # Sphinx's genindex (and its letter pages) or py-modindex
    search_page: bool = False  # Sphinx's search page (its text is filled in by a script)


_LINK_SHARE = 0.8
_MIN_LINKS = 20


def html_navigation(stats: HtmlPageStats) -> NavigationKind | None:
    """What kind of navigation page an HTML page is, or None for a page of content."""
    if stats.index_table or stats.search_page:
        return "index"
    if stats.links >= _MIN_LINKS and stats.link_chars >= _LINK_SHARE * max(stats.text_chars, 1):
        return "toc"
    return None


def html_page_stats(body: LexborNode) -> HtmlPageStats:
    """Measure an HTML body (the text V1 reads: <nav> left out) for `html_navigation`."""
    text_chars = 0
    link_chars = 0
    links = 0
    # links only: DocBook and others wrap whole passages in named anchors (<a name="..."> or <a id>)
    for node in body.css("a[href]"):
        if _inside_nav(node):
            continue
        links += 1
        link_chars += len("".join((node.text(separator=" ") or "").split()))
    text_chars = len("".join((body.text(separator=" ") or "").split()))
    text_chars -= sum(len("".join((n.text(separator=" ") or "").split())) for n in body.css("nav"))
    return HtmlPageStats(
        text_chars=text_chars,
        link_chars=link_chars,
        links=links,
        index_table=body.css_first("table.indextable, h1#index") is not None,
        search_page=body.css_first("#search-results") is not None,
    )


def _inside_nav(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag == "nav":
            return True
        parent = parent.parent
    return False
