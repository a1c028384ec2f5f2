"""Word (python-docx), PowerPoint (python-pptx) and OpenDocument text (lxml).

python-docx and python-pptx parse with lxml parsers that neither resolve entities nor reach the
network, so XXE and entity-expansion tricks do nothing. Before they build a DOM, `scan_package`
streams every XML part (bytes inflated, elements, depth and text counted against the parse
limits), so a small file that unpacks to hundreds of megabytes of XML is refused first.

Word tables of contents (TOC fields, "TOC n" styles, a Table of Contents content control) are
marked `boilerplate="toc"`; V1's text keeps them, as before.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docx.enum.style import WD_STYLE_TYPE
from docx.opc.part import PartFactory as WordPartFactory
from docx.oxml.ns import qn
from docx.package import Package as WordPackage
from docx.parts.document import DocumentPart
from docx.table import Table
from docx.text.paragraph import Paragraph
from lxml import etree
from pptx.enum.shapes import MSO_SHAPE_TYPE
from pptx.opc.package import PartFactory as SlidePartFactory
from pptx.package import Package as SlidePackage
from pptx.parts.presentation import PresentationPart

from app.errors import RagError, UnsupportedFileType
from app.ingest.limits import BoundedZipFile, current_guard
from app.ingest.loaders.archive import check_zip
from app.ingest.loaders.prescan import scan_package
from app.ingest.loaders.render import render_blocks, render_table
from app.ingest.types import Block, BoilerplateKind, LoadedDocument, Section

logger = logging.getLogger(__name__)

# Templates, slide shows and macro-enabled files have the same body under another main content
# type; python-docx and python-pptx only open the plain ones. Reading the XML runs no macro.
_WORD_MAIN_TYPES = (
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
)
_SLIDES_MAIN_TYPES = (
    "application/vnd.openxmlformats-officedocument.presentationml.slideshow.main+xml",
    "application/vnd.openxmlformats-officedocument.presentationml.template.main+xml",
    "application/vnd.ms-powerpoint.slideshow.macroEnabled.main+xml",
    "application/vnd.ms-powerpoint.template.macroEnabled.main+xml",
)
for _type in _WORD_MAIN_TYPES:
    WordPartFactory.part_type_for.setdefault(_type, DocumentPart)
for _type in _SLIDES_MAIN_TYPES:
    SlidePartFactory.part_type_for.setdefault(_type, PresentationPart)

_HEADING_STYLE = re.compile(r"^heading\s*(\d)", re.IGNORECASE)
_W_P, _W_TBL, _W_SDT, _W_SDT_CONTENT = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")
_W_OUTLINE, _W_VAL = qn("w:outlineLvl"), qn("w:val")
_W_FLDCHAR, _W_INSTR, _W_FLDSIMPLE = qn("w:fldChar"), qn("w:instrText"), qn("w:fldSimple")
_W_FLDTYPE, _W_INSTR_ATTR = qn("w:fldCharType"), qn("w:instr")
_W_GALLERY = qn("w:docPartGallery")
_MAX_HEADER_CELL_CHARS = 100
_CORE_PROPERTIES = ("author", "category", "keywords", "language", "subject", "created", "modified")


def _properties(core: Any) -> dict[str, str]:
    """The core properties a document carries, as strings (dates in ISO form)."""
    found: dict[str, str] = {}
    for name in _CORE_PROPERTIES:
        value = getattr(core, name, None)
        if value is None or value == "":
            continue
        found[name] = value.isoformat() if hasattr(value, "isoformat") else str(value).strip()
    return {key: value for key, value in found.items() if value}


# ---------------------------------------------------------------------------------------- DOCX


def load_docx(path: Path, filename: str) -> LoadedDocument:
    """Load a Word document: headings, paragraphs, list items and tables in body order; one section."""
    check_zip(path, filename)
    scan_package(path)
    try:
        part = WordPackage.open(str(path)).main_document_part
        if not isinstance(part, DocumentPart):
            raise ValueError(f"not a Word main part: {part.content_type}")
        document = part.document
        blocks = list(_DocxReader(document).blocks(document.element.body))
        title = document.core_properties.title or None
        properties = _properties(document.core_properties)
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        # python-docx raises KeyError, ValueError, lxml and zip errors on damaged or foreign files.
        logger.debug("docx unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} could not be read as a Word document (.docx): the file is damaged or not "
            "a DOCX. Open it in Word, save it as .docx and upload it again"
        ) from None
    text = render_blocks(blocks)
    sections = [Section(text=text)] if text.strip() else []
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="docx",
        content_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        title=title,
        properties=properties,
    )


class _DocxReader:
    """Walks a document body; style facts are resolved once per style (a lookup scans all styles)."""

    def __init__(self, document: Any) -> None:
        self._document = document
        self._styles: dict[str | None, tuple[int | None, int | None, bool, bool]] = {}
        # Instructions of the fields open at this point of the body (a TOC field spans paragraphs).
        self._fields: list[str] = []
        self._in_toc_control = 0
        self._guard = current_guard()

    def blocks(self, container: Any) -> Iterator[Block]:
        """Blocks of a body (or content control) in order; content controls hold e.g. cover pages."""
        for child in container.iterchildren():
            if child.tag == _W_P:
                block = self._paragraph(child)
                if block is not None:
                    self._guard.add_chars(len(block.text))
                    yield block
            elif child.tag == _W_TBL:
                table = _docx_table(Table(child, self._document))
                if table is not None:
                    self._guard.add_chars(len(table.text))
                    yield table
            elif child.tag == _W_SDT:
                content = child.find(_W_SDT_CONTENT)
                if content is not None:
                    gallery = child.find(f"{qn('w:sdtPr')}/{qn('w:docPartObj')}/{_W_GALLERY}")
                    is_toc = gallery is not None and "content" in (gallery.get(_W_VAL) or "").lower()
                    self._in_toc_control += is_toc
                    yield from self.blocks(content)
                    self._in_toc_control -= is_toc

    def _paragraph(self, element: Any) -> Block | None:
        in_toc_field = self._follow_fields(element)
        text = Paragraph(element, self._document).text.strip()
        if not text:
            return None
        named_level, style_outline, list_style, toc_style = self._style(element.style)
        mark: BoilerplateKind | None = "toc" if toc_style or in_toc_field or self._in_toc_control else None
        p_pr = element.pPr
        # A heading style wins; then the paragraph's own outline level, then its style's.
        level = named_level or _outline_level(p_pr) or style_outline
        if level is not None:
            return Block(kind="heading", text=text, page=None, level=level, boilerplate=mark)
        if list_style or (p_pr is not None and p_pr.numPr is not None):
            return Block(kind="list_item", text=text, page=None, boilerplate=mark)
        return Block(kind="paragraph", text=text, page=None, boilerplate=mark)

    def _follow_fields(self, element: Any) -> bool:
        """Track field codes through a paragraph; True when it lies (partly) inside a TOC field."""
        inside = any(instr.startswith("TOC") for instr in self._fields)
        for node in element.iter(_W_FLDCHAR, _W_INSTR, _W_FLDSIMPLE):
            if node.tag == _W_FLDSIMPLE:
                inside = inside or (node.get(_W_INSTR_ATTR) or "").strip().startswith("TOC")
            elif node.tag == _W_INSTR:
                if self._fields:
                    self._fields[-1] = (self._fields[-1] + (node.text or "")).lstrip()
            elif node.get(_W_FLDTYPE) == "begin":
                self._fields.append("")
            elif node.get(_W_FLDTYPE) == "end" and self._fields:
                self._fields.pop()
            inside = inside or any(instr.startswith("TOC") for instr in self._fields)
        return inside

    def _style(self, style_id: str | None) -> tuple[int | None, int | None, bool, bool]:
        """(level from a "Heading N"/"Title" name, level from an outline, list style, TOC style)."""
        if style_id not in self._styles:
            style = self._document.part.get_style(style_id, WD_STYLE_TYPE.PARAGRAPH)
            self._styles[style_id] = _style_facts(style)
        return self._styles[style_id]


def _style_facts(style: Any) -> tuple[int | None, int | None, bool, bool]:
    named: int | None = None
    outline: int | None = None
    name = (style.name or "").lower() if style is not None else ""
    is_list = name.startswith("list")
    # Word's "TOC 1".."TOC 9" and "TOC Heading" (which is based on Heading 1).
    is_toc = name.startswith("toc ") or name == "toc heading"
    for _ in range(5):  # follow "based on" a few steps: custom styles derive from Heading N
        if style is None:
            break
        for name in (style.name or "", style.style_id or ""):
            match = _HEADING_STYLE.match(name)
            if match:
                named = named or max(1, int(match.group(1)))
            elif name.lower() == "title":
                named = named or 1
        outline = outline or _outline_level(style.element.pPr)
        style = style.base_style
    return named, outline, is_list, is_toc


def _outline_level(p_pr: Any) -> int | None:
    """Heading depth from a `w:outlineLvl` (0-based; 9 means body text)."""
    element = p_pr.find(_W_OUTLINE) if p_pr is not None else None
    value = element.get(_W_VAL) if element is not None else None
    if value is not None and value.isdigit() and int(value) < 9:
        return int(value) + 1
    return None


def _docx_table(table: Table) -> Block | None:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # A horizontally merged cell is returned once per grid column it spans.
            if previous is not None and cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(cells)
    if not rows:
        return None
    first_tr = table._tbl.tr_lst[0] if table._tbl.tr_lst else None
    marked_header = bool(first_tr is not None and first_tr.xpath("./w:trPr/w:tblHeader"))
    headers = rows[0] if marked_header or _looks_like_header(rows) else None
    body = rows[1:] if headers is not None else rows
    return Block(kind="table", text=render_table(body, headers), page=None, rows=body, headers=headers)


def _looks_like_header(rows: list[list[str]]) -> bool:
    """Word seldom marks header rows; a first row of short, filled cells above more rows usually is one."""
    first = rows[0]
    return len(rows) >= 2 and all(first) and all(len(cell) <= _MAX_HEADER_CELL_CHARS for cell in first)


# ---------------------------------------------------------------------------------------- PPTX


def load_pptx(path: Path, filename: str) -> LoadedDocument:
    """Load a presentation: one section per slide (`{"slide": n}`, 1-based) with text, tables and notes."""
    check_zip(path, filename)
    scan_package(path)
    sections: list[Section] = []
    blocks: list[Block] = []
    guard = current_guard()
    try:
        part = SlidePackage.open(str(path)).main_document_part
        if not isinstance(part, PresentationPart):
            raise ValueError(f"not a PowerPoint main part: {part.content_type}")
        presentation = part.presentation
        for number, slide in enumerate(presentation.slides, start=1):
            slide_blocks = list(_slide_blocks(slide))
            blocks.extend(slide_blocks)
            text = render_blocks(slide_blocks)
            guard.add_chars(len(text))
            if text.strip():
                sections.append(Section(text=text, metadata={"slide": number}))
        title = presentation.core_properties.title or None
        properties = _properties(presentation.core_properties)
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        logger.debug("pptx unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} could not be read as a PowerPoint presentation (.pptx): the file is damaged "
            "or not a PPTX. Open it in PowerPoint, save it as .pptx and upload it again"
        ) from None
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="pptx",
        content_type="application/vnd.openxmlformats-officedocument.presentationml.presentation",
        title=title,
        properties=properties,
    )


def _slide_blocks(slide: Any) -> Iterator[Block]:
    title_shape = slide.shapes.title
    title_id = None
    if title_shape is not None and title_shape.has_text_frame:
        title_id = title_shape.shape_id
        title = " ".join(title_shape.text_frame.text.split())
        if title:
            yield Block(kind="heading", text=title, page=None, level=1)
    for shape in _iter_shapes(slide.shapes):
        if title_id is not None and shape.shape_id == title_id:
            continue
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            lines = [line.strip() for line in shape.text_frame.text.split("\n")]
            text = "\n".join(line for line in lines if line)
            if text:
                yield Block(kind="paragraph", text=text, page=None)
        elif getattr(shape, "has_table", False) and shape.has_table:
            block = _pptx_table(shape.table)
            if block is not None:
                yield block
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = frame.text.strip() if frame is not None else ""
        if notes:
            yield Block(kind="paragraph", text=f"Notes: {notes}", page=None)


def _iter_shapes(shapes: Any) -> Iterator[Any]:
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _iter_shapes(shape.shapes)
        else:
            yield shape


def _pptx_table(table: Any) -> Block | None:
    rows: list[list[str]] = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells if not cell.is_spanned]
        if any(cells):
            rows.append(cells)
    if not rows:
        return None
    headers = rows[0] if (table.first_row and len(rows) >= 2) else None
    body = rows[1:] if headers is not None else rows
    return Block(kind="table", text=render_table(body, headers), page=None, rows=body, headers=headers)


# ----------------------------------------------------------------------------------------- ODT

_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_ODF_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_ODF_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_SAFE_XML = etree.XMLParser(
    resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True, remove_pis=True
)


def _t(name: str) -> str:
    return f"{{{_ODF_TEXT}}}{name}"


def load_odt(path: Path, filename: str) -> LoadedDocument:
    """Load an OpenDocument text: headings, paragraphs, lists and tables from content.xml."""
    check_zip(path, filename)
    scan_package(path)
    try:
        with BoundedZipFile(path) as archive:
            root = etree.fromstring(archive.read("content.xml"), parser=_SAFE_XML)
        body = root.find(f"{{{_ODF_OFFICE}}}body/{{{_ODF_OFFICE}}}text")
        blocks = list(_odt_blocks(body, in_list=False)) if body is not None else []
    except (RagError, MemoryError):
        raise
    except Exception as exc:
        logger.debug("odt unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} could not be read as an OpenDocument text (.odt): the file is damaged. "
            "Save it again as .odt or .docx and upload it again"
        ) from None
    text = render_blocks(blocks)
    sections = [Section(text=text)] if text.strip() else []
    return LoadedDocument(
        sections=sections, blocks=blocks, kind="odt", content_type="application/vnd.oasis.opendocument.text"
    )


def _odt_blocks(element: Any, *, in_list: bool) -> Iterator[Block]:
    for child in element:
        tag = child.tag
        if tag == _t("h"):
            text = _odf_text(child).strip()
            if text:
                level = child.get(_t("outline-level"))
                yield Block(
                    kind="heading", text=text, page=None, level=int(level) if level and level.isdigit() else 1
                )
        elif tag == _t("p"):
            text = _odf_text(child).strip()
            if text:
                yield Block(kind="list_item" if in_list else "paragraph", text=text, page=None)
        elif tag in (_t("list"), _t("list-item"), _t("list-header")):
            yield from _odt_blocks(child, in_list=True)
        elif tag == f"{{{_ODF_TABLE}}}table":
            block = _odt_table(child)
            if block is not None:
                yield block
        elif tag == _t("section"):
            yield from _odt_blocks(child, in_list=in_list)


def _odt_table(table: Any) -> Block | None:
    rows: list[list[str]] = []
    header_rows = 0
    for row in table.iter(f"{{{_ODF_TABLE}}}table-row"):
        cells = [
            " ".join(_odf_text(cell).split()) for cell in row if cell.tag == f"{{{_ODF_TABLE}}}table-cell"
        ]
        if any(cells):
            if row.getparent().tag == f"{{{_ODF_TABLE}}}table-header-rows":
                header_rows += 1
            rows.append(cells)
    if not rows:
        return None
    headers = rows[0] if header_rows == 1 or (header_rows == 0 and _looks_like_header(rows)) else None
    body = rows[1:] if headers is not None else rows
    return Block(kind="table", text=render_table(body, headers), page=None, rows=body, headers=headers)


def _odf_text(element: Any) -> str:
    """Text of an ODF element: `text:s` is spaces, `text:tab` a tab, notes are left out."""
    parts = [element.text or ""]
    for child in element:
        tag = child.tag
        if tag == _t("s"):
            count = child.get(_t("c"))
            parts.append(" " * (int(count) if count and count.isdigit() else 1))
        elif tag == _t("tab"):
            parts.append("\t")
        elif tag == _t("line-break"):
            parts.append("\n")
        elif tag in (_t("note"), _t("annotation")):
            pass
        elif tag == _t("p"):
            parts.append(_odf_text(child) + " ")
        else:
            parts.append(_odf_text(child))
        parts.append(child.tail or "")
    return "".join(parts)
