"""Turn an uploaded file into a `LoadedDocument`: choose the format, run its loader, refuse helpfully.

The format is chosen from the file name's extension, then the declared content type, then the
bytes. The bytes also overrule a name that lies about a binary format (a DOCX renamed `.pdf`, a
PDF uploaded as `.txt`), and an "Excel" file that is really HTML or CSV text is read as text.

Errors: anything that cannot become text raises `UnsupportedFileType` (415) with a fixed detail that
says what to upload instead; library exception text is only logged, at debug level. A file that
decodes but holds no text returns a document with no sections (the caller decides what that means).

`load_document` is synchronous and CPU-bound: run it in a worker thread.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from app.errors import UnsupportedFileType
from app.ingest.chunking import clean_text
from app.ingest.loaders.html import load_epub, load_html
from app.ingest.loaders.markdown import load_markdown
from app.ingest.loaders.office import load_docx, load_odt, load_pptx
from app.ingest.loaders.pdf import load_pdf
from app.ingest.loaders.sniff import sniff_kind, sniff_markup
from app.ingest.loaders.tabular import XLS_SUPPORTED, load_csv, load_xls, load_xlsx
from app.ingest.loaders.text import NotText, decode_text, load_text, load_xml
from app.ingest.types import LoadedDocument

__all__ = ["KNOWN_SOURCE_EXT", "extension", "load_document", "safe_basename"]

# rag_api's list: these are read as text (and count as a known type) whatever their content type.
KNOWN_SOURCE_EXT = frozenset(
    {
        "go",
        "py",
        "java",
        "sh",
        "bat",
        "ps1",
        "cmd",
        "js",
        "ts",
        "css",
        "cpp",
        "hpp",
        "h",
        "c",
        "cs",
        "sql",
        "log",
        "ini",
        "pl",
        "pm",
        "r",
        "dart",
        "dockerfile",
        "env",
        "php",
        "hs",
        "hsc",
        "lua",
        "nginxconf",
        "conf",
        "m",
        "mm",
        "plsql",
        "perl",
        "rb",
        "rs",
        "db2",
        "scala",
        "bash",
        "swift",
        "vue",
        "svelte",
        "yml",
        "yaml",
        "eml",
        "ex",
        "exs",
        "erl",
        "tsx",
        "jsx",
        "lhs",
    }
)
_PLAIN_EXT = frozenset(
    {
        "txt",
        "text",
        "rst",
        "tex",
        "toml",
        "cfg",
        "properties",
        "jsonl",
        "ndjson",
        "srt",
        "vtt",
        "adoc",
        "asciidoc",
        "org",
        "makefile",
        "gitignore",
        "editorconfig",
        "csproj",
        "gradle",
        "kt",
        "kts",
        "zsh",
        "fish",
        "psm1",
        "vb",
        "fs",
        "clj",
        "cljs",
        "elm",
        "ml",
        "mli",
        "nim",
        "zig",
        "jl",
        "groovy",
        "tf",
        "hcl",
        "proto",
        "graphql",
        "gql",
        "scss",
        "sass",
        "less",
        "mjs",
        "cjs",
        "ipynb",
        "diff",
        "patch",
        "bib",
        "sty",
        "cls",
        "ltx",
        "lock",
        "mdc",
        "sol",
        "v",
        "sv",
        "vhd",
        "asm",
        "s",
        "cmake",
        "rtf",
    }
)
_CODE_EXT = KNOWN_SOURCE_EXT - {"log", "eml", "env", "ini", "conf", "nginxconf"}

_EXT_KINDS: dict[str, str] = {
    "pdf": "pdf",
    "docx": "docx",
    "docm": "docx",
    "dotx": "docx",
    "dotm": "docx",
    "pptx": "pptx",
    "pptm": "pptx",
    "ppsx": "pptx",
    "potx": "pptx",
    "xlsx": "xlsx",
    "xlsm": "xlsx",
    "xltx": "xlsx",
    "xltm": "xlsx",
    "csv": "csv",
    "tsv": "tsv",
    "tab": "tsv",
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "xht": "html",
    "shtml": "html",
    "md": "markdown",
    "markdown": "markdown",
    "mdown": "markdown",
    "mkd": "markdown",
    "mdx": "markdown",
    "json": "json",
    "xml": "xml",
    "svg": "xml",
    "xsd": "xml",
    "xsl": "xml",
    "rss": "xml",
    "atom": "xml",
    "epub": "epub",
    "odt": "odt",
    "doc": "doc",
    "dot": "doc",
    "xls": "xls",
    "xlt": "xls",
    "ppt": "ppt",
    "pps": "ppt",
    "pot": "ppt",
    "msg": "msg",
    "ods": "ods",
    "odp": "odp",
    "png": "image",
    "jpg": "image",
    "jpeg": "image",
    "gif": "image",
    "bmp": "image",
    "tif": "image",
    "tiff": "image",
    "webp": "image",
    "heic": "image",
    "heif": "image",
    "avif": "image",
    "ico": "image",
    "zip": "archive",
    "gz": "archive",
    "tgz": "archive",
    "bz2": "archive",
    "xz": "archive",
    "7z": "archive",
    "rar": "archive",
    "tar": "archive",
    "zst": "archive",
}
_CONTENT_TYPE_KINDS: dict[str, str] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/msword": "doc",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.ms-excel": "xls",
    "application/vnd.ms-outlook": "msg",
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "tsv",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "application/markdown": "markdown",
    "application/x-markdown": "markdown",
    "application/json": "json",
    "application/xml": "xml",
    "text/xml": "xml",
    "image/svg+xml": "xml",
    "application/epub+zip": "epub",
    "application/vnd.oasis.opendocument.text": "odt",
    "application/zip": "archive",
    "application/gzip": "archive",
    "application/x-tar": "archive",
}
_TEXT_KINDS = frozenset({"csv", "tsv", "html", "markdown", "json", "xml", "text"})
_CONTAINERS = frozenset({"pdf", "docx", "pptx", "xlsx", "epub", "odt"})
# Zip- or OLE2-based kinds whose own loader explains a damaged file better than "an archive".
_ZIP_KINDS = frozenset({"docx", "pptx", "xlsx", "epub", "odt"})
_OLE_KINDS = frozenset({"doc", "xls", "ppt", "msg"})

_SUPPORTED = "PDF, DOCX, PPTX, XLSX, CSV, HTML, Markdown, text, JSON or source code"
_REFUSALS: dict[str, str] = {
    "doc": "{name} is a legacy Word document (.doc), which is not supported. "
    "Open it in Word, save it as .docx or PDF, and upload that",
    "xls": "{name} is a legacy Excel workbook (.xls), which is not supported. "
    "Open it in Excel, save it as .xlsx or CSV, and upload that",
    "ppt": "{name} is a legacy PowerPoint presentation (.ppt), which is not supported. "
    "Open it in PowerPoint, save it as .pptx or PDF, and upload that",
    "msg": "{name} is an Outlook message (.msg), which is not supported. "
    "Save it as .eml or PDF and upload that",
    "ole": "{name} is an old binary Office file, which is not supported. "
    "Save it as .docx, .xlsx, .pptx or PDF and upload that",
    "office-encrypted": "{name} is a password-protected Office document. "
    "Remove the password, save it, and upload it again",
    "ods": "{name} is an OpenDocument spreadsheet, which is not supported. "
    "Save it as .xlsx or CSV and upload that",
    "odp": "{name} is an OpenDocument presentation, which is not supported. "
    "Save it as .pptx or PDF and upload that",
    "image": "{name} is an image; text in images cannot be read (OCR is not supported). "
    "Upload a PDF with selectable text, or the text itself",
    "archive": "{name} is an archive (zip, gzip, tar...); upload the documents inside it one by one",
    "executable": f"{{name}} is a program, not a document; upload a supported type: {_SUPPORTED}",
    "media": f"{{name}} is audio or video, which is not supported; upload a supported type: {_SUPPORTED}",
    "binary": "{name} looks like binary data (not text, PDF, or an Office document); "
    f"upload a supported type: {_SUPPORTED}",
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
) -> LoadedDocument:
    """Load the file at `path` (uploaded as `filename`) into sections and blocks."""
    name = safe_basename(filename)
    ext = extension(name)
    claimed = _claimed_kind(ext, content_type)
    sniffed = sniff_kind(path)
    if sniffed is not None:
        # The bytes are a known binary format, and they outrank the name.
        kind = claimed if claimed is not None and _same_family(claimed, sniffed) else sniffed
        if kind in _REFUSALS and not (kind == "xls" and XLS_SUPPORTED):
            raise UnsupportedFileType(_REFUSALS[kind].format(name=name))
        doc = _load_container(path, name, kind, pdf_extract_images)
        if claimed is not None and kind != claimed:
            doc.warnings.insert(
                0,
                f"the file is named like {_article(claimed)} but is {_article(kind)}; "
                f"it was read as {_article(kind)}",
            )
        return doc
    if claimed is None or claimed in _TEXT_KINDS:
        return _load_text_file(path, name, claimed, ext)
    # A binary format by name without its magic bytes: text saved as ".xls" (a common export),
    # a damaged file, or a PDF with junk before its header.
    data = path.read_bytes()
    try:
        if not data.strip():
            raise NotText("empty")  # an empty "PDF" is a damaged PDF, not an empty text
        text, encoding = decode_text(data)
    except NotText:
        if claimed in _CONTAINERS:
            # pypdf and zipfile may still recover the file; let the format's loader judge.
            return _load_container(path, name, claimed, pdf_extract_images)
        raise UnsupportedFileType(_REFUSALS[claimed].format(name=name)) from None
    kind = sniff_markup(text) or ("csv" if claimed == "xls" else "text")
    doc = _load_decoded(text, encoding, name, kind, ext)
    doc.warnings.insert(
        0, f"the file is named like {_article(claimed)} but holds text; it was read as {_article(kind)}"
    )
    return doc


def _claimed_kind(ext: str, content_type: str | None) -> str | None:
    if ext in _EXT_KINDS:
        return _EXT_KINDS[ext]
    if ext in KNOWN_SOURCE_EXT or ext in _PLAIN_EXT:
        return "text"
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in _CONTENT_TYPE_KINDS:
        return _CONTENT_TYPE_KINDS[mime]
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
        or (sniffed == "archive" and claimed in _ZIP_KINDS)
        or (sniffed == "ole" and claimed in _OLE_KINDS)
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
    if kind == "pdf":
        return load_pdf(path, name, extract_images=pdf_extract_images)
    if kind == "docx":
        return load_docx(path, name)
    if kind == "pptx":
        return load_pptx(path, name)
    if kind == "xlsx":
        return load_xlsx(path, name)
    if kind == "epub":
        return load_epub(path, name)
    if kind == "xls":
        return load_xls(path, name)
    return load_odt(path, name)


def _load_text_file(path: Path, name: str, kind: str | None, ext: str) -> LoadedDocument:
    """Decode and load a text format; an unknown kind becomes HTML, XML or plain text by content."""
    try:
        text, encoding = decode_text(path.read_bytes())
    except NotText:
        raise UnsupportedFileType(_REFUSALS["binary"].format(name=name)) from None
    if kind is None or (kind == "text" and ext not in KNOWN_SOURCE_EXT and ext not in _PLAIN_EXT):
        # Unknown extension or a bare text/* type: an HTML page is worth reading as HTML.
        kind = sniff_markup(text) or "text"
    return _load_decoded(text, encoding, name, kind, ext)


def _load_decoded(text: str, encoding: str, name: str, kind: str, ext: str) -> LoadedDocument:
    text = clean_text(text)
    if kind in ("csv", "tsv"):
        return load_csv(text, encoding, name, tsv=kind == "tsv")
    if kind == "html":
        return load_html(text, encoding)
    if kind == "markdown":
        return load_markdown(text, encoding)
    if kind == "xml":
        return load_xml(text, encoding)
    if kind == "json":
        return load_text(text, encoding, kind="json", code=True)
    return load_text(text, encoding, code=ext in _CODE_EXT)
