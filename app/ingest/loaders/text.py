"""Plain text, source code, JSON and XML: byte decoding shared by every text format, and their loaders."""

from __future__ import annotations

import codecs
import logging
import re

import charset_normalizer
from lxml import etree

from app.ingest.limits import current_guard
from app.ingest.types import Block, BlockKind, LoadedDocument, Section

logger = logging.getLogger(__name__)

# Longest first: the UTF-32-LE BOM starts with the UTF-16-LE one.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Control characters that do not occur in text (tab, newlines, form feed and ESC do), plus U+FFFD.
_NON_TEXT = re.compile("[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
_MAX_NON_TEXT_RATIO = 0.02
_SAMPLE_CHARS = 65_536
# charset-normalizer alphabets that a Western European (cp1252) text decodes into.
_LATIN_ALPHABETS = frozenset(
    {
        "Basic Latin",
        "Latin-1 Supplement",
        "Latin Extended-A",
        "Latin Extended-B",
        "Latin Extended Additional",
        "General Punctuation",
        "Currency Symbols",
        "Control character",
    }
)
_CP1252_MARGIN = 0.1
_DETECTION_BYTES = 256 * 1024
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_MAX_LINE = 2048


class NotText(ValueError):
    """The bytes do not decode as text in any encoding we trust."""


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes as text: BOM, then strict UTF-8, then charset-normalizer; newlines become "\\n"."""
    text, encoding = _decode(data)
    encoding = codecs.lookup(encoding).name  # one spelling per codec: "iso8859-1", not "latin_1"
    sample = text[:_SAMPLE_CHARS]
    bad = len(_NON_TEXT.findall(sample))
    # One glitch (a cut last character, a stray NUL) does not make a short text binary.
    if bad > 1 and bad / len(sample) > _MAX_NON_TEXT_RATIO:
        raise NotText(encoding)
    return normalise_newlines(text), encoding


def normalise_newlines(text: str) -> str:
    """Turn CRLF and lone CR line ends into LF."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes) -> tuple[str, str]:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace"), encoding
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        # A file cut in the middle of its last character is still UTF-8.
        if exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data.decode("utf-8", errors="replace"), "utf-8"
    utf16 = _bomless_utf16(data)
    if utf16 is not None:
        return data.decode(utf16, errors="replace"), utf16
    if data.count(0) > len(data) // 100:
        # Real 8-bit text has no NUL bytes; binary formats are full of them.
        raise NotText("nul bytes")
    encoding = _guess_encoding(_detection_sample(data))
    return data.decode(encoding, errors="replace"), encoding


def _guess_encoding(sample: bytes) -> str:
    """charset-normalizer's best guess, nudged towards cp1252 where that fits as well."""
    matches = charset_normalizer.from_bytes(sample)
    best = matches.best()
    if best is None:
        raise NotText("no encoding fits")
    if "cp1252" in best.could_be_from_charset:
        return "cp1252"
    # charset-normalizer often calls short Western European text Baltic or Central European
    # (cp1257, cp1250) where cp1252 fits nearly as well; cp1252 is by far the likelier (Excel CSVs).
    if set(best.alphabets) <= _LATIN_ALPHABETS:
        for match in matches:
            if "cp1252" in match.could_be_from_charset and match.chaos <= best.chaos + _CP1252_MARGIN:
                return "cp1252"
    return best.encoding


def _detection_sample(data: bytes) -> bytes:
    """The head of the file plus whole lines holding non-ASCII bytes, at most about 256 KiB.

    charset-normalizer takes seconds on tens of megabytes, and only the non-ASCII bytes tell
    encodings apart. Whole lines: newline never occurs inside a multi-byte character of the
    encodings it may find (Shift-JIS, GBK, Big5, EUC), so no character is cut.
    """
    if len(data) <= 2 * _DETECTION_BYTES:
        return data
    head_end = data.rfind(b"\n", 0, _DETECTION_BYTES // 4) + 1 or _DETECTION_BYTES // 4
    parts = [data[:head_end]]
    size, position = head_end, head_end
    while size < _DETECTION_BYTES:
        found = _NON_ASCII.search(data, position)
        if found is None:
            break
        start = data.rfind(b"\n", max(0, found.start() - _MAX_LINE), found.start()) + 1
        if start == 0:
            start = max(position, found.start() - _MAX_LINE)
        end = data.find(b"\n", found.start(), found.start() + _MAX_LINE)
        end = found.start() + _MAX_LINE if end == -1 else end
        parts.append(data[max(start, position) : end])
        size += end - max(start, position)
        position = end + 1
    return b"\n".join(parts)


def _bomless_utf16(data: bytes) -> str | None:
    """Recognise BOM-less UTF-16 of mostly ASCII text by its zero high bytes."""
    sample = data[:4096]
    if len(sample) < 4:
        return None
    even, odd = sample[0::2], sample[1::2]
    if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16-le"
    if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16-be"
    return None


def paragraph_blocks(text: str, kind: BlockKind = "paragraph", page: int | None = None) -> list[Block]:
    """Split text into blocks at blank lines."""
    return [
        Block(kind=kind, text=part.strip("\n"), page=page)
        for part in re.split(r"\n[ \t]*\n", text)
        if part.strip()
    ]


def load_text(text: str, encoding: str, *, kind: str = "text", code: bool = False) -> LoadedDocument:
    """Load plain text or source code: one section with the whole text.

    Form feeds separate pages (printed reports, `man` pages): blocks then carry their 0-based page
    and the document its page count; V1's one section keeps the whole text as before.
    """
    sections = [Section(text=text)] if text.strip() else []
    block_kind: BlockKind = "code" if code else "paragraph"
    page_count = None
    if "\f" in text and kind == "text":
        pages = text.split("\f")
        page_count = len(pages)
        blocks = [
            block for page, part in enumerate(pages) for block in paragraph_blocks(part, block_kind, page)
        ]
    else:
        blocks = paragraph_blocks(text, block_kind)
    content_type = {"json": "application/json", "xml": "application/xml"}.get(kind, "text/plain")
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind=kind,
        content_type=content_type,
        encoding=encoding,
        page_count=page_count,
    )


_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_LXML_MAX_DEPTH = 256  # libxml2's cap without huge_tree


def load_xml(text: str, encoding: str) -> LoadedDocument:
    """Load XML as its text content (no entity expansion, no network); malformed XML as raw text."""
    # resolve_entities=False: neither external (XXE) nor internal (billion laughs) entities expand.
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True, remove_pis=True
    )
    warnings: list[str] = []
    # The text is decoded already; its declaration would name the original encoding.
    markup = _XML_DECLARATION.sub("", text, count=1)
    guard = current_guard()
    # Elements are counted before the tree is built; lxml itself stops past 256 levels of depth.
    guard.add_elements(markup.count("<") - markup.count("</"))
    try:
        root = etree.fromstring(markup, parser=parser)
    except (etree.XMLSyntaxError, ValueError) as exc:
        if "depth" in str(exc).lower():
            raise guard.too_deep(min(guard.limits.max_depth, _LXML_MAX_DEPTH)) from None
        logger.debug("xml parse failed, indexing raw text: %s", exc)
        warnings.append("the XML is not well-formed; indexed as plain text")
        doc = load_text(text, encoding, kind="xml")
        return LoadedDocument(
            sections=doc.sections,
            blocks=doc.blocks,
            kind="xml",
            content_type="application/xml",
            encoding=encoding,
            warnings=warnings,
        )
    lines = [normalise_newlines(t).strip() for t in root.itertext()]
    lines = [line for line in lines if line]
    body = "\n".join(lines)
    sections = [Section(text=body)] if body else []
    blocks = [Block(kind="paragraph", text=line, page=None) for line in lines]
    return LoadedDocument(
        sections=sections,
        blocks=blocks,
        kind="xml",
        content_type="application/xml",
        encoding=encoding,
        warnings=warnings,
    )
