"""HTML and XHTML (selectolax/lexbor), and EPUB, a zip of XHTML chapters read in spine order."""

from __future__ import annotations

import logging
import posixpath
import re
import zipfile
from pathlib import Path
from urllib.parse import unquote

from lxml import etree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from app.errors import UnsupportedFileType
from app.ingest.loaders.archive import check_zip
from app.ingest.loaders.render import render_blocks, render_table
from app.ingest.types import Block, BlockKind, LoadedDocument, Section

logger = logging.getLogger(__name__)

# Page chrome and non-text content; their text would only add noise to every chunk.
_DROP = frozenset(
    {
        "script",
        "style",
        "nav",
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
        "aside",
        "blockquote",
        "figure",
        "form",
        "fieldset",
        "details",
        "dl",
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
# Beyond this nesting depth a subtree is read as flat text (no recursion limit to hit).
_MAX_DEPTH = 150
_SPACE = re.compile(r"\s+")


class _Walker:
    """Turns a DOM into blocks: text gathers in a buffer that each block-level element flushes."""

    def __init__(self, page: int | None = None) -> None:
        self.blocks: list[Block] = []
        self._buffer: list[str] = []
        self._kind: BlockKind = "paragraph"
        self._page = page

    def flush(self) -> None:
        lines = (line.strip() for line in "".join(self._buffer).split("\n"))
        text = "\n".join(line for line in lines if line)
        self._buffer.clear()
        if text:
            self.blocks.append(Block(kind=self._kind, text=text, page=self._page))

    def walk(self, node: LexborNode, depth: int = 0) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if child.is_text_node:
                self._buffer.append(_SPACE.sub(" ", child.text_content or ""))
            elif tag in _DROP or tag is None:
                continue
            elif depth > _MAX_DEPTH:
                self._buffer.append(" " + _SPACE.sub(" ", child.text(deep=True, separator=" ")) + " ")
            elif tag == "br":
                self._buffer.append("\n")
            elif tag == "hr":
                self.flush()
            elif tag in _HEADINGS:
                self.flush()
                text = _inline_text(child)
                if text:
                    self.blocks.append(
                        Block(kind="heading", text=text, page=self._page, level=_HEADINGS[tag])
                    )
            elif tag == "pre":
                self.flush()
                code = (child.text(deep=True) or "").strip("\n")
                if code.strip():
                    self.blocks.append(Block(kind="code", text=code, page=self._page))
            elif tag == "table":
                self.flush()
                table = _table_block(child, self._page)
                if table is not None:
                    self.blocks.append(table)
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


def _inline_text(node: LexborNode) -> str:
    return _SPACE.sub(" ", node.text(deep=True, separator=" ")).strip()


def _table_block(table: LexborNode, page: int | None) -> Block | None:
    rows: list[list[str]] = []
    header_rows = 0
    for row in _table_rows(table):
        cells = [child for child in row.iter() if child.tag in ("td", "th")]
        if not cells:
            continue
        texts = [_inline_text(cell) for cell in cells]
        in_head = row.parent is not None and row.parent.tag == "thead"
        if len(rows) == header_rows and (in_head or all(cell.tag == "th" for cell in cells)):
            header_rows += 1
        rows.append(texts)
    rows = [row for row in rows if any(row)]
    if not rows:
        return None
    # Several header rows (merged headings) are kept as data; only a single one names the columns.
    headers = rows[0] if header_rows == 1 else None
    body = rows[1:] if headers is not None else rows
    return Block(kind="table", text=render_table(body, headers), page=page, rows=body, headers=headers)


def _table_rows(table: LexborNode) -> list[LexborNode]:
    """The table's own rows, not those of tables nested in its cells."""
    rows: list[LexborNode] = []
    for child in table.iter():
        if child.tag == "tr":
            rows.append(child)
        elif child.tag in ("thead", "tbody", "tfoot"):
            rows.extend(grandchild for grandchild in child.iter() if grandchild.tag == "tr")
    return rows


def html_blocks(markup: str, page: int | None = None) -> tuple[list[Block], str | None]:
    """Blocks of an HTML document in reading order, and its <title>."""
    tree = LexborHTMLParser(markup)
    title_node = tree.css_first("title")
    title = _inline_text(title_node) if title_node is not None else None
    walker = _Walker(page)
    root = tree.body if tree.body is not None else tree.root
    if root is not None:
        walker.walk(root)
        walker.flush()
    return walker.blocks, title or None


def load_html(text: str, encoding: str | None) -> LoadedDocument:
    """Load HTML/XHTML: headings, paragraphs, lists and tables as blocks; one section of their text."""
    blocks, title = html_blocks(text)
    body = render_blocks(blocks)
    sections = [Section(text=body)] if body.strip() else []
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="html",
        content_type="text/html",
        encoding=encoding,
        title=title,
    )


_SAFE_XML = etree.XMLParser(
    resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True, remove_pis=True
)
_CONTAINER_NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container"}
_OPF_NS = {"opf": "http://www.idpf.org/2007/opf", "dc": "http://purl.org/dc/elements/1.1/"}


def load_epub(path: Path, filename: str) -> LoadedDocument:
    """Load an EPUB: each spine document through the HTML loader, one section per document."""
    check_zip(path, filename)
    try:
        with zipfile.ZipFile(path) as archive:
            chapters, title = _epub_spine(archive)
            sections: list[Section] = []
            blocks: list[Block] = []
            for name in chapters:
                markup = archive.read(name).decode("utf-8", errors="replace")
                chapter_blocks, _ = html_blocks(markup)
                blocks.extend(chapter_blocks)
                text = render_blocks(chapter_blocks)
                if text.strip():
                    sections.append(Section(text=text))
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
