"""Turn an uploaded file into a `LoadedDocument`: choose the format, run its loader, refuse helpfully.

The format is chosen from the file name's extension, then the declared content type, then the
bytes (the tables are in `formats.py`; each kind maps to one loader function below; a picture is
read by OCR, `picture.py`). The bytes
also overrule a name that lies about a binary format (a DOCX renamed `.pdf`, a PDF uploaded as
`.txt`), and an "Excel" file that is really HTML or CSV text is read as text.

Errors: anything that cannot become text raises `UnsupportedFileType` (415) with a fixed detail that
says what to upload instead; library exception text is only logged, at debug level. A file that
decodes but holds no text returns a document with no sections (the caller decides what that means).

Every parse runs under `ParseLimits` (bytes inflated, cells, elements, depth, characters): beyond
one, `ParseLimitExceeded` (413 or 422) names the limit. `load_document` is synchronous, CPU-bound
and trusts nothing about its input; the service runs it in a worker process
(`app.ingest.worker.parse_in_worker`), which adds the memory and time limits.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from app.errors import EMPTY_FILE_DETAIL, NoExtractableText, UnsupportedFileType
from app.ingest.chunking import clean_text
from app.ingest.limits import Board, ParseLimitExceeded, ParseLimits, guarded, install_parser_bounds
from app.ingest.loaders.formats import (
    CODE_EXT,
    CONTAINER_KINDS,
    CONTENT_TYPE_KINDS,
    EXT_KINDS,
    KNOWN_SOURCE_EXT,
    OLE_KINDS,
    PLAIN_EXT,
    REFUSALS,
    TEXT_KINDS,
    ZIP_KINDS,
)
from app.ingest.loaders.html import load_epub, load_html
from app.ingest.loaders.markdown import load_markdown
from app.ingest.loaders.office import load_docx, load_odt, load_pptx
from app.ingest.loaders.pdf import load_pdf
from app.ingest.loaders.picture import load_picture
from app.ingest.loaders.sniff import sniff_kind, sniff_markup
from app.ingest.loaders.tabular import XLS_SUPPORTED, load_csv, load_xls, load_xlsx
from app.ingest.loaders.text import NotText, decode_text, load_text, load_xml
from app.ingest.types import LoadedDocument

__all__ = ["KNOWN_SOURCE_EXT", "extension", "load_document", "safe_basename"]

install_parser_bounds()

# A binary container: (path, safe file name, PDF_EXTRACT_IMAGES) -> document.
ContainerLoader = Callable[[Path, str, bool], LoadedDocument]
# A decoded text format: (text, encoding, safe file name, extension) -> document.
TextLoader = Callable[[str, str, str, str], LoadedDocument]

_CONTAINER_LOADERS: dict[str, ContainerLoader] = {
    "pdf": lambda path, name, images: load_pdf(path, name, extract_images=images),
    "docx": lambda path, name, _: load_docx(path, name),
    "pptx": lambda path, name, _: load_pptx(path, name),
    "xlsx": lambda path, name, _: load_xlsx(path, name),
    "xls": lambda path, name, _: load_xls(path, name),
    "epub": lambda path, name, _: load_epub(path, name),
    "odt": lambda path, name, _: load_odt(path, name),
    "image": lambda path, name, _: load_picture(path, name),
}
_TEXT_LOADERS: dict[str, TextLoader] = {
    "csv": lambda text, encoding, name, _: load_csv(text, encoding, name),
    "tsv": lambda text, encoding, name, _: load_csv(text, encoding, name, tsv=True),
    "html": lambda text, encoding, _, __: load_html(text, encoding),
    "markdown": lambda text, encoding, _, __: load_markdown(text, encoding),
    "xml": lambda text, encoding, _, __: load_xml(text, encoding),
    "json": lambda text, encoding, _, __: load_text(text, encoding, kind="json", code=True),
    "text": lambda text, encoding, _, ext: load_text(text, encoding, code=ext in CODE_EXT),
}

_MAX_NAME_BYTES = 255
# Bidirectional overrides let "invoice\u202efdp.exe" display as "invoiceexe.pdf".
_UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe_basename(filename: str) -> str:
    """The file's base name, safe to store and show: no directories, control characters or NUL.

    Both `/` and `\\` separate directories; the result is NFC-normalised, at most 255 UTF-8 bytes
    (the extension kept when the stem is cut), and "upload" when nothing is left.
    """
    name = re.split(r"[/\\]", filename or "")[-1]
    name = _UNSAFE_CHARS.sub("", unicodedata.normalize("NFC", name)).strip()
    if name in ("", ".", ".."):
        return "upload"
    if len(name.encode("utf-8")) <= _MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    suffix = f".{ext}" if dot and stem and len(ext.encode("utf-8")) <= 32 else ""
    base = stem if suffix else name
    budget = _MAX_NAME_BYTES - len(suffix.encode("utf-8"))
    cut = base.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return (cut.rstrip() + suffix) or "upload"


def extension(filename: str) -> str:
    """Lower-case extension; a name without a dot is its own extension (`Dockerfile`), as rag_api."""
    return filename.rsplit(".", 1)[-1].lower()


def load_document(
    path: Path,
    filename: str,
    content_type: str | None = None,
    *,
    pdf_extract_images: bool = False,
    limits: ParseLimits | None = None,
    board: Board | None = None,
) -> LoadedDocument:
    """Load the file at `path` (uploaded as `filename`) into sections and blocks, within `limits`.

    The counters of the parse (its progress) are published on `board` as they grow, when given.
    """
    name = safe_basename(filename)
    limits = limits or ParseLimits()
    with guarded(limits, name, board):
        doc = _load(path, name, content_type, pdf_extract_images)
    # Loaders count as they extract; this catches any that extracted in one piece.
    if sum(len(section.text) for section in doc.sections) > limits.max_chars:
        raise ParseLimitExceeded(
            f"{name} was refused: it holds more than {limits.max_chars:,} characters of text "
            "(PARSE_MAX_CHARS). Split it into smaller files and upload them separately, or ask the "
            "operator to raise the limit"
        )
    return doc


def _load(path: Path, name: str, content_type: str | None, pdf_extract_images: bool) -> LoadedDocument:
    ext = extension(name)
    claimed = _claimed_kind(ext, content_type)
    sniffed = sniff_kind(path)
    if sniffed is not None:
        # The bytes are a known binary format, and they outrank the name.
        kind = claimed if claimed is not None and _same_family(claimed, sniffed) else sniffed
        if kind in REFUSALS and not (kind == "xls" and XLS_SUPPORTED):
            raise UnsupportedFileType(REFUSALS[kind].format(name=name))
        doc = _load_container(path, name, kind, pdf_extract_images)
        if claimed is not None and kind != claimed:
            doc.warnings.insert(
                0,
                f"the file is named like {_article(claimed)} but is {_article(kind)}; "
                f"it was read as {_article(kind)}",
            )
        return doc
    if claimed is None or claimed in TEXT_KINDS:
        return _load_text_file(path, name, claimed, ext)
    # A binary format by name without its magic bytes: text saved as ".xls" (a common export),
    # a damaged file, or a PDF with junk before its header.
    data = path.read_bytes()
    if not data.strip():
        # nothing at all (a failed save or download): empty, whatever its name, as an empty .txt is;
        # "damaged" would send the user looking for a fault in a file that has no content
        raise NoExtractableText(EMPTY_FILE_DETAIL)
    try:
        text, encoding = decode_text(data)
    except NotText:
        if claimed in CONTAINER_KINDS:
            # pypdf and zipfile may still recover the file; let the format's loader judge.
            return _load_container(path, name, claimed, pdf_extract_images)
        raise UnsupportedFileType(REFUSALS[claimed].format(name=name)) from None
    kind = sniff_markup(text) or ("csv" if claimed == "xls" else "text")
    doc = _load_decoded(text, encoding, name, kind, ext)
    doc.warnings.insert(
        0, f"the file is named like {_article(claimed)} but holds text; it was read as {_article(kind)}"
    )
    return doc


def _claimed_kind(ext: str, content_type: str | None) -> str | None:
    if ext in EXT_KINDS:
        return EXT_KINDS[ext]
    if ext in KNOWN_SOURCE_EXT or ext in PLAIN_EXT:
        return "text"
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in CONTENT_TYPE_KINDS:
        return CONTENT_TYPE_KINDS[mime]
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("text/"):
        return "text"
    return None


def _same_family(claimed: str, sniffed: str) -> bool:
    """The claimed kind, or a zip/OLE2 file of it we could not identify (damaged): keep the claim.

    The claimed kind's loader, or its refusal, then explains the problem better than "an archive".
    """
    return (
        claimed == sniffed
        or (sniffed == "archive" and claimed in ZIP_KINDS)
        or (sniffed == "ole" and claimed in OLE_KINDS)
    )


def _article(kind: str) -> str:
    label = {
        "image": "image",
        "archive": "archive",
        "office-encrypted": "encrypted Office file",
        "ole": "binary Office file",
        "text": "text file",
        "markdown": "Markdown file",
        "executable": "program",
        "media": "media file",
    }.get(kind, kind.upper() + " file")
    # Acronyms take "an" by their spoken first letter: "an XLS file", "an HTML file", "a PDF file".
    acronym = label.split()[0].isupper()
    vowel_sound = label[0] in ("AEFHILMNORSX" if acronym else "aeiouAEIOU")
    return ("an " if vowel_sound else "a ") + label


def _load_container(path: Path, name: str, kind: str, pdf_extract_images: bool) -> LoadedDocument:
    return _CONTAINER_LOADERS[kind](path, name, pdf_extract_images)


def _load_text_file(path: Path, name: str, kind: str | None, ext: str) -> LoadedDocument:
    """Decode and load a text format; an unknown kind becomes HTML, XML or plain text by content."""
    try:
        text, encoding = decode_text(path.read_bytes())
    except NotText:
        raise UnsupportedFileType(REFUSALS["binary"].format(name=name)) from None
    if not text.strip():
        # said here, for /embed and /text alike: the generic "no extractable text" points at OCR
        raise NoExtractableText(EMPTY_FILE_DETAIL)
    if kind is None or (kind == "text" and ext not in KNOWN_SOURCE_EXT and ext not in PLAIN_EXT):
        # Unknown extension or a bare text/* type: an HTML page is worth reading as HTML.
        kind = sniff_markup(text) or "text"
    return _load_decoded(text, encoding, name, kind, ext)


def _load_decoded(text: str, encoding: str, name: str, kind: str, ext: str) -> LoadedDocument:
    return _TEXT_LOADERS.get(kind, _TEXT_LOADERS["text"])(clean_text(text), encoding, name, ext)
