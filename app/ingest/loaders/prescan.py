"""Cheap passes that measure markup before a DOM parser builds it.

A DOM costs about ten times the bytes of its markup, and some parsers slow down badly on hostile
shapes (lexbor needs minutes for 100,000 nested `<ul><li>`). These passes read the markup once,
keep nothing, and refuse through the active `ParseGuard` (elements, depth, shared strings, bytes
inflated) before the real parser starts.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from app.errors import RagError
from app.ingest.limits import BoundedZipFile, ParseGuard, current_guard

_BATCH = 4096

# ------------------------------------------------------------------------------------------ XML

_STEP = 1024 * 1024
_KEEP = 16  # bytes carried between steps, so a token cut by a step boundary is counted once
# Entries of a shared-string table and cells of a worksheet, as writers spell them (default
# namespace); a part that uses a namespace prefix is counted with the regular expressions instead.
_SHARED_STRING = (b"<si>", b"<si ", re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?si[\s/>]"))
_CELL = (b"<c>", b"<c ", re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?c[\s/>]"))
_Tag = tuple[bytes, bytes, "re.Pattern[bytes]"]


def count_xml(
    source: IO[bytes],
    guard: ParseGuard,
    *,
    tag: _Tag | None = None,
    on_tag: Callable[[int], None] | None = None,
) -> None:
    """Count an XML stream's elements (or, with `tag`, that tag's occurrences) at C speed.

    A byte-level count, not a parse: an element is a "<" that does not open an end tag (comments
    and declarations count too: an upper bound). Per-element Python callbacks would cost more than
    the DOM they protect. Elements go to the guard; `tag` counts go to `on_tag`, block by block, so
    a limit stops the stream early. Depth needs no pass of its own: lxml, which every office loader
    parses with, refuses documents nested deeper than 256 levels.
    """
    carry = b""
    prefixed: bool | None = None
    while True:
        block = source.read(_STEP)
        data = carry + block
        last = not block
        cut = len(data) if last else max(0, len(data) - _KEEP)
        part = data[:cut]
        carry = data[cut:]
        if tag is None:
            guard.add_elements(part.count(b"<") - part.count(b"</"))
        elif on_tag is not None:
            if prefixed is None:
                # "<x:si" or "<x:c" with a prefix: the plain byte patterns would find nothing.
                prefixed = tag[0] not in part and tag[1] not in part and tag[2].search(part) is not None
            on_tag(len(tag[2].findall(part)) if prefixed else part.count(tag[0]) + part.count(tag[1]))
        if last:
            return


_PACKAGE_XML = (".xml", ".rels", ".xhtml", ".opf", ".ncx", ".vml")


def scan_package(
    path: Path,
    skip: Callable[[str], bool] = lambda name: False,
    *,
    shared_strings: str | None = None,
    worksheets: Callable[[str], bool] = lambda name: False,
) -> None:
    """Count the elements of every XML member of a zip package (bytes counted as they inflate).

    `skip` leaves members out. A workbook's `shared_strings` part is checked against
    PARSE_MAX_SHARED_STRINGS, and its `worksheets` against PARSE_MAX_CELLS (their cells, not their
    elements: openpyxl streams them, and the loader counts the cells again as it reads them).
    """
    guard = current_guard()
    counts = {"cells": 0, "strings": 0}

    def add_cells(count: int) -> None:
        counts["cells"] += count
        if counts["cells"] > guard.limits.max_cells:
            guard.add_cells(counts["cells"])  # raises, naming PARSE_MAX_CELLS

    def add_strings(count: int) -> None:
        counts["strings"] += count
        guard.check_shared_strings(counts["strings"])

    try:
        archive = BoundedZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # the loader reports a damaged container in its own words
    with archive:
        for info in archive.infolist():
            name = info.filename
            if info.is_dir() or not name.lower().endswith(_PACKAGE_XML) or skip(name):
                continue
            try:
                with archive.open(info) as member:
                    if name == shared_strings:
                        count_xml(member, guard, tag=_SHARED_STRING, on_tag=add_strings)
                    elif worksheets(name):
                        count_xml(member, guard, tag=_CELL, on_tag=add_cells)
                    else:
                        count_xml(member, guard)
            except (RagError, MemoryError):
                raise
            except Exception:  # noqa: S112 - damaged, encrypted or unsupported member (zlib, CRC...)
                continue  # the real parser reports it in its own words


# ----------------------------------------------------------------------------------------- HTML

_VOID = frozenset(
    "area base basefont bgsound br col embed frame hr image img input keygen link meta param "
    "source track wbr".split()
)
# Elements whose content is text up to their end tag (no tags inside).
_RAW_TEXT = frozenset("script style textarea title xmp iframe noembed noframes noscript".split())
_IGNORED = frozenset(("html", "head", "body"))
_HEADINGS = frozenset(("h1", "h2", "h3", "h4", "h5", "h6"))
# Start tags that close an open <p> (HTML's "close a p element in button scope").
_CLOSES_P = frozenset(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 header hgroup hr main menu nav ol p pre listing section summary "
    "table ul li dd dt search plaintext".split()
)
_BUTTON_SCOPE = frozenset("applet caption html table td th marquee object template button".split())
# HTML's "special" elements: an implied </li> or </dd> search stops at them (but not at these three).
_SPECIAL = frozenset(
    "address applet area article aside base basefont bgsound blockquote body br button caption center "
    "col colgroup dd details dir div dl dt embed fieldset figcaption figure footer form frame frameset "
    "h1 h2 h3 h4 h5 h6 head header hgroup hr html iframe img input keygen li link listing main marquee "
    "menu meta nav noembed noframes noscript object ol p param plaintext pre script search section "
    "select source style summary table tbody td template textarea tfoot th thead title tr track ul "
    "wbr xmp".split()
) - {"address", "div", "p"}
_TAG = re.compile(r"<!--.*?(?:-->|\Z)|<[!?][^<>]*>?|<(/?)([A-Za-z][^\s/<>]*)([^<>]*)>", re.S)


def _pop_to(stack: list[str], names: frozenset[str] | tuple[str, ...], stops: frozenset[str]) -> None:
    """Pop up to and including the nearest of `names`, unless one of `stops` comes first."""
    for index in range(len(stack) - 1, -1, -1):
        tag = stack[index]
        if tag in names:
            del stack[index:]
            return
        if tag in stops:
            return


def scan_html(markup: str, guard: ParseGuard) -> None:
    """Estimate the element depth an HTML parser will build (implied end tags included) and count tags.

    The estimate follows HTML's tree-building rules where they keep real pages shallow (`<p>`, `<li>`,
    `<dt>`/`<dd>`, table rows and cells, `<option>`, `<a>` close their open predecessors; `/>` closes
    only inside SVG and MathML); markup that nests deeper in the estimate nests deeper in the DOM.
    """
    stack: list[str] = []
    foreign = 0
    elements = 0
    position = 0
    limit = guard.limits.max_depth
    while True:
        match = _TAG.search(markup, position)
        if match is None:
            break
        position = match.end()
        name = match.group(2)
        if name is None:
            continue  # comment, doctype, processing instruction
        tag = name.lower()
        if match.group(1):  # end tag
            if tag in stack:
                index = len(stack) - 1 - stack[::-1].index(tag)
                if tag in ("svg", "math"):
                    foreign = sum(1 for t in stack[:index] if t in ("svg", "math"))
                del stack[index:]
            continue
        elements += 1
        if elements >= _BATCH:
            guard.add_elements(elements)
            elements = 0
        if tag in _RAW_TEXT and not foreign:
            end = re.compile(rf"</{re.escape(tag)}\s*>", re.I).search(markup, position)
            position = len(markup) if end is None else end.end()
            continue
        if tag == "plaintext":
            break
        if tag in _VOID or tag in _IGNORED:
            continue
        if foreign and match.group(3).rstrip().endswith("/"):
            continue  # self-closing inside SVG/MathML; in HTML "<div/>" opens a div
        if tag in _CLOSES_P:
            _pop_to(stack, ("p",), _BUTTON_SCOPE)
        if tag == "li":
            _pop_to(stack, ("li",), _SPECIAL)
        elif tag in ("dd", "dt"):
            _pop_to(stack, ("dd", "dt"), _SPECIAL)
        elif tag in _HEADINGS and stack and stack[-1] in _HEADINGS:
            stack.pop()
        elif tag in ("td", "th"):
            _pop_to(stack, ("td", "th"), frozenset(("tr", "table")))
        elif tag == "tr":
            _pop_to(stack, ("tr",), frozenset(("table",)))
        elif tag in ("tbody", "thead", "tfoot"):
            _pop_to(stack, ("tbody", "thead", "tfoot"), frozenset(("table",)))
        elif tag in ("option", "optgroup"):
            _pop_to(stack, ("option",) if tag == "option" else ("option", "optgroup"), frozenset(("select",)))
        elif tag in ("a", "nobr", "button", "form"):
            _pop_to(stack, (tag,), frozenset(("table", "td", "th")))
        stack.append(tag)
        if tag in ("svg", "math"):
            foreign += 1
        if len(stack) > limit:
            guard.check_depth(len(stack))
    guard.add_elements(elements)
