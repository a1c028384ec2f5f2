"""HTML and XHTML (selectolax/lexbor), and EPUB, a zip of XHTML chapters read in spine order.

Structure: headings, paragraphs, list items, code, tables (caption as `title`, a single header row
as `headers`, one-cell <tfoot> rows as `footnotes`) and definition lists (`definition` blocks).
Page furniture is marked, not dropped (`Block.boilerplate`): <nav> and ARIA navigation, the page's
own <header>/<footer> bars (ARIA banner/contentinfo), previous/next link blocks and tables of
contents. V1's text is what it always was: everything but <nav>. A page that is navigation as a
whole (nearly all links, a Sphinx index or search page: `navigation.py`) says so in its section's
`navigation` metadata and marks every block, so neither V1 nor V2 returns it from a search.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lxml import etree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from app.errors import UnsupportedFileType
from app.ingest.limits import BoundedZipFile, ParseLimitExceeded, current_guard
from app.ingest.loaders.archive import check_zip
from app.ingest.loaders.navigation import NavigationKind, html_navigation, html_page_stats
from app.ingest.loaders.prescan import scan_html, scan_package
from app.ingest.loaders.render import render_blocks, render_table
from app.ingest.types import Block, BlockKind, BoilerplateKind, LoadedDocument, Section

logger = logging.getLogger(__name__)

# Non-text content; its text would only add noise to every chunk.
_DROP = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "iframe",
        "object",
        "embed",
        "canvas",
        "svg",
        "math",
        "head",
        "select",
        "button",
        "-comment",
        "-doctype",
    }
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_PARAGRAPHS = frozenset({"p", "dt", "dd", "caption", "figcaption", "legend", "summary", "address"})
_CONTAINERS = frozenset(
    {
        "html",
        "body",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "blockquote",
        "figure",
        "form",
        "fieldset",
        "details",
        "hgroup",
        "center",
        "dialog",
        "search",
        "ul",
        "ol",
        "menu",
        "dir",
        "tbody",
        "thead",
        "tfoot",
        "tr",
        "td",
        "th",
    }
)
# Elements whose boundaries separate words even inside a table cell or a heading.
_BREAKS = _CONTAINERS | _PARAGRAPHS | frozenset({"li", "dl", "table", "pre", "hr", "br", "h1", "h2"})
# An <header>/<footer> inside these belongs to that section, not to the page (HTML-AAM's rule).
_SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})
_TOC_TOKENS = frozenset({"toc", "table-of-contents", "tableofcontents", "toctree-wrapper"})
# Link texts and rel values of previous / up / next navigation, compared without punctuation.
_PREV_NEXT_WORDS = frozenset({"prev", "previous", "next", "up", "home", "top", "back"})
_PREV_NEXT_RELS = frozenset({"prev", "next", "previous", "up", "first", "last", "start", "home"})
_ARROWS = frozenset("«»‹›←→↑<>")
_NAV_BLOCK_CHARS = 600
_NAV_BLOCK_NODES = 2000
_NAV_BLOCK_LEVELS = 5
_NAV_CANDIDATES = 50
# Beyond this nesting depth a subtree is read as flat text (no recursion limit to hit); the
# pre-scan refuses far deeper markup (PARSE_MAX_DEPTH) before this matters.
_MAX_DEPTH = 200
_SPACE = re.compile(r"\s+")


class _Context:
    """What the walker knows about the ancestors of the element it is in."""

    __slots__ = ("boilerplate", "hidden", "sectioning")

    def __init__(self) -> None:
        self.boilerplate: BoilerplateKind | None = None
        self.hidden = False  # inside <nav>, which V1 never showed
        self.sectioning = 0


class _Walker:
    """Turns a DOM into blocks: text gathers in a buffer that each block-level element flushes."""

    def __init__(
        self,
        page: int | None,
        prev_next: frozenset[int],
        context: _Context | None = None,
        *,
        counts: bool = True,
    ) -> None:
        self.blocks: list[Block] = []
        self.hidden: list[bool] = []  # per block: left out of V1's text
        self._buffer: list[str] = []
        self._kind: BlockKind = "paragraph"
        self._page = page
        self._prev_next = prev_next
        self._context = context or _Context()
        self._guard = current_guard()
        self._counts = counts  # a sub-walker's text is counted once, in the block it becomes

    def add(self, kind: BlockKind, text: str, **fields: Any) -> None:
        """Append a block, marked with the boilerplate of the element it came from."""
        if self._counts:
            self._guard.add_chars(len(text) + len(fields.get("term") or ""))
        self.blocks.append(
            Block(kind=kind, text=text, page=self._page, boilerplate=self._context.boilerplate, **fields)
        )
        self.hidden.append(self._context.hidden)

    def flush(self) -> None:
        lines = (line.strip() for line in "".join(self._buffer).split("\n"))
        text = "\n".join(line for line in lines if line)
        self._buffer.clear()
        if text:
            self.add(self._kind, text)

    def rendered(self) -> str:
        """The V1 text of what this walker collected."""
        return render_blocks([b for b, hidden in zip(self.blocks, self.hidden, strict=True) if not hidden])

    def walk(self, node: LexborNode, depth: int = 0) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if child.is_text_node:
                self._buffer.append(_SPACE.sub(" ", child.text_content or ""))
            elif tag in _DROP or tag is None:
                continue
            elif depth > _MAX_DEPTH:
                self._buffer.append(" " + _flat_text(child) + " ")
            else:
                self.walk_one(child, depth)

    def walk_one(self, child: LexborNode, depth: int) -> None:
        """Walk one element: its landmark context around its own blocks."""
        tag = child.tag or ""
        saved = self._enter(child, tag)
        self._element(child, tag, depth)
        self._leave(saved, tag)

    def _enter(self, node: LexborNode, tag: str) -> tuple[BoilerplateKind | None, bool]:
        context = self._context
        saved = (context.boilerplate, context.hidden)
        mark = _landmark(node, tag, context.sectioning > 0, self._prev_next)
        if mark is not None and context.boilerplate is None:
            self.flush()
            context.boilerplate = mark
        if tag == "nav":
            self.flush()
            context.hidden = True
        if tag in _SECTIONING:
            context.sectioning += 1
        return saved

    def _leave(self, saved: tuple[BoilerplateKind | None, bool], tag: str) -> None:
        context = self._context
        if tag in _SECTIONING:
            context.sectioning -= 1
        if (context.boilerplate, context.hidden) != saved:
            self.flush()
            context.boilerplate, context.hidden = saved

    def _element(self, child: LexborNode, tag: str, depth: int) -> None:
        if tag == "br":
            self._buffer.append("\n")
        elif tag == "hr":
            self.flush()
        elif tag in _HEADINGS:
            self.flush()
            text = inline_text(child)
            if text:
                self.add("heading", text, level=_HEADINGS[tag])
        elif tag == "pre":
            self.flush()
            code = (child.text(deep=True) or "").strip("\n")
            if code.strip():
                self.add("code", code)
        elif tag == "table":
            self.flush()
            self._table(child)
        elif tag == "dl":
            self.flush()
            _DefinitionList(self, depth).read(child)
            self.flush()
        elif tag == "li" or tag in _PARAGRAPHS:
            self.flush()
            outer = self._kind
            self._kind = "list_item" if tag == "li" else "paragraph"
            self.walk(child, depth + 1)
            self.flush()
            self._kind = outer
        elif tag in _CONTAINERS:
            self.flush()
            self.walk(child, depth + 1)
            self.flush()
        else:
            # Inline element (a, b, span, code...): its text joins the current block.
            self.walk(child, depth + 1)

    def _table(self, table: LexborNode) -> None:
        parts = _table_parts(table)
        if parts is None:
            return
        caption, headers, body, notes = parts
        lines = [caption] if caption else []
        lines.append(render_table(body, headers))
        lines.extend(notes)
        text = "\n".join(line for line in lines if line)
        self.add("table", text, rows=body, headers=headers, title=caption, footnotes=tuple(notes))

    def sub_text(self, node: LexborNode, depth: int) -> str:
        """The V1 text of one element read by a walker of its own (a definition's term or body)."""
        sub = _Walker(self._page, self._prev_next, self._context, counts=False)
        sub.walk(node, depth + 1)
        sub.flush()
        return sub.rendered()


class _DefinitionList:
    """Reads a <dl>: each term with its definitions becomes one `definition` block."""

    def __init__(self, walker: _Walker, depth: int) -> None:
        self.walker = walker
        self.depth = depth
        self.term: str | None = None
        self.definitions: list[str] = []

    def read(self, node: LexborNode) -> None:
        self._children(node, 0)
        self._emit()

    def _children(self, node: LexborNode, level: int) -> None:
        walker = self.walker
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "dt":
                walker.flush()
                self._emit()
                self.term = walker.sub_text(child, self.depth)
            elif tag == "dd":
                walker.flush()
                text = walker.sub_text(child, self.depth)
                if text:
                    self.definitions.append(text)
            elif tag == "div" and level < 2:
                self._children(child, level + 1)  # HTML allows one <div> around each group
            elif child.is_text_node:
                walker._buffer.append(_SPACE.sub(" ", child.text_content or ""))
            elif tag not in _DROP and tag is not None:
                self._emit()
                walker.walk_one(child, self.depth + 1)

    def _emit(self) -> None:
        term, definitions = self.term, self.definitions
        self.term, self.definitions = None, []
        if not definitions:
            if term:  # a term without a definition reads as the paragraph it was before
                self.walker.add("paragraph", term)
            return
        self.walker.add("definition", "\n\n".join(definitions), term=term or None)


def _landmark(
    node: LexborNode, tag: str, in_section: bool, prev_next: frozenset[int]
) -> BoilerplateKind | None:
    """The kind of page furniture an element is, from its tag, ARIA role, class/id, or links."""
    attrs = node.attributes
    role = (attrs.get("role") or "").strip().lower()
    if tag == "nav" or role == "navigation":
        return "nav"
    if role == "doc-toc" or "toc" in (attrs.get("epub:type") or "").lower().split():
        return "toc"
    tokens = set((attrs.get("class") or "").lower().split()) | {(attrs.get("id") or "").lower()}
    if tokens & _TOC_TOKENS or (tag in ("ul", "ol") and _is_fragment_list(node)):
        return "toc"
    if role == "banner" or (tag == "header" and not in_section):
        return "header"
    if role == "contentinfo" or (tag == "footer" and not in_section):
        return "footer"
    if node.mem_id in prev_next:
        return "prev_next"
    return None


def _is_fragment_list(node: LexborNode) -> bool:
    """A list of at least three items that each start with a link into this page: a table of contents."""
    items = 0
    for item in node.iter():
        if item.tag != "li":
            continue
        first = item.child
        while first is not None and first.is_text_node and not (first.text_content or "").strip():
            first = first.next
        href = (first.attributes.get("href") or "") if first is not None and first.tag == "a" else ""
        if not href.startswith("#"):
            return False
        items += 1
    return items >= 3


def _prev_next_blocks(root: LexborNode) -> frozenset[int]:
    """Elements that hold previous / up / next links (with the neighbouring pages' titles)."""
    marked: set[int] = set()
    candidates = [a for a in root.css("a[href]") if _is_prev_next_link(a)][:_NAV_CANDIDATES]
    for anchor in candidates:
        best: LexborNode | None = None
        node = anchor.parent
        for _ in range(_NAV_BLOCK_LEVELS):
            if node is None or node.tag in ("body", "html", "main", "article", "nav"):
                break
            size = _bounded_text_size(node)
            if size is None:
                break
            links = [a for a in node.css("a[href]")]
            link_chars = sum(len(_SPACE.sub("", a.text(deep=True) or "")) for a in links)
            navigational = sum(1 for a in links if _is_prev_next_link(a))
            if node.tag in _BREAKS and (link_chars >= 0.7 * max(size, 1) or navigational >= 2):
                best = node
            node = node.parent
        if best is not None:
            marked.add(best.mem_id)
    return frozenset(marked)


def _is_prev_next_link(anchor: LexborNode) -> bool:
    attrs = anchor.attributes
    if set((attrs.get("rel") or "").lower().split()) & _PREV_NEXT_RELS:
        return True
    if (attrs.get("accesskey") or "").lower() in ("p", "n", "u"):
        return True
    text = (anchor.text(deep=True) or "").strip().lower()
    if text and len(text) <= 20:
        letters = "".join(ch for ch in text if ch.isalpha())
        if letters in _PREV_NEXT_WORDS or (not letters and all(ch in _ARROWS or ch.isspace() for ch in text)):
            return True
    return False


def _bounded_text_size(node: LexborNode) -> int | None:
    """Non-space characters of an element's text, or None past the size of a navigation block."""
    size = nodes = 0
    for item in node.traverse(include_text=True):
        nodes += 1
        if item.is_text_node:
            size += len(_SPACE.sub("", item.text_content or ""))
        if size > _NAV_BLOCK_CHARS or nodes > _NAV_BLOCK_NODES:
            return None
    return size


def inline_text(node: LexborNode) -> str:
    """An element's text as one line; inline markup adds no space (`<code>max</code>_size`)."""
    parts: list[str] = []
    _gather(node, parts, 0)
    return _SPACE.sub(" ", "".join(parts)).strip()


def _gather(node: LexborNode, parts: list[str], depth: int) -> None:
    for child in node.iter(include_text=True):
        tag = child.tag
        if child.is_text_node:
            parts.append(child.text_content or "")
        elif tag in _DROP or tag is None:
            continue
        elif depth > _MAX_DEPTH:
            parts.append(" " + _flat_text(child) + " ")
        elif tag in _BREAKS:
            parts.append(" ")
            _gather(child, parts, depth + 1)
            parts.append(" ")
        else:
            _gather(child, parts, depth + 1)


def _flat_text(node: LexborNode) -> str:
    """Text of a subtree without recursion; block and line-break elements separate words."""
    parts: list[str] = []
    for item in node.traverse(include_text=True):
        if item.is_text_node:
            parts.append(item.text_content or "")
        elif item.tag in _BREAKS:
            parts.append(" ")
    return _SPACE.sub(" ", "".join(parts)).strip()


def _table_parts(
    table: LexborNode,
) -> tuple[str | None, list[str] | None, list[list[str]], list[str]] | None:
    """(caption, header cells, data rows, footnotes) of a table, or None when it holds no text.

    A single header row (in <thead>, or all <th>) names the columns; several are kept as data.
    A <tfoot> row of one cell is a note on the table; a fuller one (a totals row) stays data.
    """
    caption_node = next((child for child in table.iter() if child.tag == "caption"), None)
    caption = inline_text(caption_node) if caption_node is not None else None
    rows: list[list[str]] = []
    notes: list[str] = []
    header_rows = 0
    for row in _table_rows(table):
        cells = [child for child in row.iter() if child.tag in ("td", "th")]
        if not cells:
            continue
        texts = [inline_text(cell) for cell in cells]
        section = row.parent.tag if row.parent is not None else None
        if section == "tfoot" and sum(1 for text in texts if text) == 1:
            notes.append(next(text for text in texts if text))
            continue
        if len(rows) == header_rows and (section == "thead" or all(cell.tag == "th" for cell in cells)):
            header_rows += 1
        rows.append(texts)
    current_guard().add_cells(sum(len(row) for row in rows))
    rows = [row for row in rows if any(row)]
    if not rows and not notes and not caption:
        return None
    headers = rows[0] if header_rows == 1 and rows else None
    body = rows[1:] if headers is not None else rows
    return caption or None, headers, body, notes


def _table_rows(table: LexborNode) -> list[LexborNode]:
    """The table's own rows, not those of tables nested in its cells; <tfoot> rows last."""
    rows: list[LexborNode] = []
    foot: list[LexborNode] = []
    for child in table.iter():
        if child.tag == "tr":
            rows.append(child)
        elif child.tag in ("thead", "tbody", "tfoot"):
            target = foot if child.tag == "tfoot" else rows
            target.extend(grandchild for grandchild in child.iter() if grandchild.tag == "tr")
    return rows + foot


@dataclass(frozen=True, slots=True)
class HtmlContent:
    """What an HTML page holds: blocks (boilerplate marked), its <title>, and the text V1 indexes."""

    blocks: list[Block]
    title: str | None
    text: str
    navigation: NavigationKind | None = None

    def sections(self) -> list[Section]:
        """V1's section of this page (none when it has no text), marked when it is navigation."""
        if not self.text.strip():
            return []
        return [Section(text=self.text, metadata={"navigation": self.navigation} if self.navigation else {})]


def html_blocks(markup: str, page: int | None = None) -> HtmlContent:
    """Blocks of an HTML document in reading order, its <title> and its V1 text (no <nav>)."""
    scan_html(markup, current_guard())
    tree = LexborHTMLParser(markup)
    title_node = tree.css_first("title")
    title = inline_text(title_node) if title_node is not None else None
    root = tree.body if tree.body is not None else tree.root
    walker = _Walker(page, _prev_next_blocks(root) if root is not None else frozenset())
    if root is None:
        return HtmlContent(walker.blocks, title or None, walker.rendered())
    walker.walk(root)
    walker.flush()
    navigation = html_navigation(html_page_stats(root))
    blocks = walker.blocks
    if navigation is not None:
        blocks = [b if b.boilerplate else dataclasses.replace(b, boilerplate=navigation) for b in blocks]
    return HtmlContent(blocks, title or None, walker.rendered(), navigation)


def load_html(text: str, encoding: str | None) -> LoadedDocument:
    """Load HTML/XHTML: headings, paragraphs, lists, tables and definitions as blocks; one section."""
    content = html_blocks(text)
    return LoadedDocument(
        sections=content.sections(),
        blocks=content.blocks,
        kind="html",
        content_type="text/html",
        encoding=encoding,
        title=content.title,
    )


_SAFE_XML = etree.XMLParser(
    resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True, remove_pis=True
)
_CONTAINER_NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container"}
_OPF_NS = {"opf": "http://www.idpf.org/2007/opf", "dc": "http://purl.org/dc/elements/1.1/"}


def load_epub(path: Path, filename: str) -> LoadedDocument:
    """Load an EPUB: each spine document through the HTML loader, one section per document."""
    check_zip(path, filename)
    # Chapters are scanned as HTML one by one below; the package's own XML is scanned here.
    scan_package(path, skip=lambda name: name.lower().endswith((".xhtml", ".html", ".htm")))
    try:
        with BoundedZipFile(path) as archive:
            chapters, title = _epub_spine(archive)
            sections: list[Section] = []
            blocks: list[Block] = []
            for name in chapters:
                markup = archive.read(name).decode("utf-8", errors="replace")
                content = html_blocks(markup)
                blocks.extend(content.blocks)
                sections.extend(content.sections())
    except ParseLimitExceeded:
        raise
    except Exception as exc:  # zipfile, zlib and lxml errors, a missing container or OPF
        logger.debug("epub unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} could not be read as an EPUB (damaged or DRM-protected). "
            "Convert it to PDF or HTML and upload it again"
        ) from None
    return LoadedDocument(
        sections=sections, blocks=blocks, kind="epub", content_type="application/epub+zip", title=title
    )


def _epub_spine(archive: zipfile.ZipFile) -> tuple[list[str], str | None]:
    if _epub_drm(archive):
        raise ValueError("DRM-encrypted chapters")
    container = etree.fromstring(archive.read("META-INF/container.xml"), parser=_SAFE_XML)
    opf_path = container.xpath("string(//c:rootfile/@full-path)", namespaces=_CONTAINER_NS)
    opf = etree.fromstring(archive.read(opf_path), parser=_SAFE_XML)
    base = posixpath.dirname(opf_path)
    manifest = {
        item.get("id"): posixpath.normpath(posixpath.join(base, unquote(item.get("href", ""))))
        for item in opf.xpath("//opf:manifest/opf:item", namespaces=_OPF_NS)
        if "html" in (item.get("media-type") or "")
    }
    spine = [
        manifest[ref]
        for ref in opf.xpath("//opf:spine/opf:itemref/@idref", namespaces=_OPF_NS)
        if ref in manifest
    ]
    title = opf.xpath("string(//dc:title)", namespaces=_OPF_NS).strip() or None
    return spine, title


def _epub_drm(archive: zipfile.ZipFile) -> bool:
    """True when chapters (not just fonts, which DRM-free books obfuscate too) are encrypted."""
    try:
        encryption = archive.read("META-INF/encryption.xml")
    except KeyError:
        return False
    root = etree.fromstring(encryption, parser=_SAFE_XML)
    uris = root.xpath("//*[local-name()='CipherReference']/@URI")
    return any(str(uri).lower().endswith(("html", "htm")) for uri in uris)
