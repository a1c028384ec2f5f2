"""Tell a file's format from its bytes: magic numbers, zip members and OLE2 stream names.

Used when the name and declared type say nothing useful, and to catch files whose name lies (a
PDF saved as `.txt`, a DOCX renamed `.pdf`).
"""

from __future__ import annotations

import logging
import mmap
import re
import zipfile
from pathlib import Path

logger = logging.getLogger(__name__)

HEAD_BYTES = 8192
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_SMALL_MEMBER = 1024 * 1024

# Main-part content types of OOXML packages. Embedded objects bring other types (a chart's
# workbook inside a DOCX), so only a main part decides.
_OOXML_MAIN = (
    (re.compile(rb"(wordprocessingml\.(document|template)|ms-word\.[a-z.]+)\.main\+xml", re.I), "docx"),
    (
        re.compile(
            rb"(presentationml\.(presentation|slideshow|template)|ms-powerpoint\.[a-z.]+)\.main\+xml", re.I
        ),
        "pptx",
    ),
    (re.compile(rb"(spreadsheetml\.(sheet|template)|ms-excel\.[a-z.]+)\.main\+xml", re.I), "xlsx"),
)
_OOXML_DIRS = (("word/", "docx"), ("ppt/", "pptx"), ("xl/", "xlsx"))
_ODF_MIMETYPES = {
    b"application/epub+zip": "epub",
    b"application/vnd.oasis.opendocument.text": "odt",
    b"application/vnd.oasis.opendocument.spreadsheet": "ods",
    b"application/vnd.oasis.opendocument.presentation": "odp",
}
# OLE2 directory entries hold stream names in UTF-16-LE; the first match wins.
_OLE2_STREAMS = (
    ("EncryptedPackage", "office-encrypted"),  # a password-protected DOCX/XLSX/PPTX
    ("WordDocument", "doc"),
    ("PowerPoint Document", "ppt"),
    ("Workbook", "xls"),
    ("__substg1.0_", "msg"),
    ("Book", "xls"),  # BIFF5 workbooks; last, as the word may occur in other files' text
)

_IMAGE_MAGICS = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"II*\x00", b"MM\x00*", b"8BPS")
_ARCHIVE_MAGICS = (
    b"\x1f\x8b",
    b"7z\xbc\xaf\x27\x1c",
    b"Rar!\x1a\x07",
    b"\xfd7zXZ\x00",
    b"\x28\xb5\x2f\xfd",
    b"BZh",
)
_EXECUTABLE_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\x00asm")
_MEDIA_MAGICS = (b"ID3", b"OggS", b"fLaC", b"\x1aE\xdf\xa3")
_FTYP_IMAGE_BRANDS = (b"heic", b"heix", b"mif1", b"msf1", b"avif", b"hevc")


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of a file."""
    with path.open("rb") as handle:
        return handle.read(size)


def sniff_kind(path: Path) -> str | None:
    """The format the file's bytes announce, or None when they announce none (probably text).

    Returns a loader kind (pdf, docx, pptx, xlsx, epub, odt) or a refused one (doc, xls, ppt, msg,
    office-encrypted, ole, ods, odp, archive, image, executable, media).
    """
    head = read_head(path)
    if _is_pdf(head):
        return "pdf"
    if head.startswith(_ZIP_MAGICS):
        return _sniff_zip(path)
    if head.startswith(_OLE2_MAGIC):
        return _sniff_ole2(path)
    if head.startswith(_IMAGE_MAGICS) or _is_riff(head, b"WEBP") or _is_bmp(head):
        return "image"
    if head[4:8] == b"ftyp":
        return "image" if head[8:12] in _FTYP_IMAGE_BRANDS else "media"
    if _is_riff(head, b"WAVE") or _is_riff(head, b"AVI "):
        return "media"
    if head.startswith(_MEDIA_MAGICS):
        return "media"
    if head.startswith(_ARCHIVE_MAGICS) or head[257:262] == b"ustar":
        return "archive"
    if head.startswith(_EXECUTABLE_MAGICS) or (head.startswith(b"MZ") and b"\x00" in head[:64]):
        return "executable"
    if head.startswith(b"SQLite format 3\x00"):
        return "archive"
    return None


def sniff_markup(text: str) -> str | None:
    """ "html" or "xml" when decoded text is a markup document, else None."""
    start = text[:2048].lstrip("\ufeff \t\r\n").lower()
    if start.startswith(("<!doctype html", "<html")) or (start.startswith("<") and "<html" in start):
        return "html"
    if start.startswith("<?xml"):
        return "html" if "<html" in start or "xhtml" in start else "xml"
    return None


def _is_pdf(head: bytes) -> bool:
    # Readers accept junk before the header (within 1 KiB); junk, not text that mentions "%PDF-".
    at = head.find(b"%PDF-", 0, 1024)
    if at == -1:
        return False
    before = head[:at].lstrip(b"\xef\xbb\xbf \t\r\n")
    return not before or any(byte < 9 or 13 < byte < 32 or byte >= 127 for byte in before)


def _is_riff(head: bytes, form: bytes) -> bool:
    return head.startswith(b"RIFF") and head[8:12] == form


def _is_bmp(head: bytes) -> bool:
    # "BM" alone starts plenty of text; the reserved header bytes are zero in real bitmaps.
    return head.startswith(b"BM") and head[6:10] == b"\x00\x00\x00\x00"


def _sniff_zip(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            mimetype = infos.get("mimetype")
            if mimetype is not None and mimetype.file_size <= 256:
                kind = _ODF_MIMETYPES.get(archive.read(mimetype).strip())
                if kind:
                    return kind
            content_types = infos.get("[Content_Types].xml")
            if content_types is not None and content_types.file_size <= _SMALL_MEMBER:
                body = archive.read(content_types)
                for pattern, kind in _OOXML_MAIN:
                    if pattern.search(body):
                        return kind
            for prefix, kind in _OOXML_DIRS:
                if any(name.startswith(prefix) for name in infos):
                    return kind
    except Exception as exc:
        # zipfile raises BadZipFile, zlib.error, RuntimeError (encrypted), NotImplementedError
        # (compression method)... on damaged files. The format is unknown then, and "archive" it is.
        logger.debug("zip sniffing failed: %s", exc)
    return "archive"


def _sniff_ole2(path: Path) -> str:
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for stream, kind in _OLE2_STREAMS:
                if data.find(stream.encode("utf-16-le")) != -1:
                    return kind
    except (OSError, ValueError) as exc:  # an empty or vanished file cannot be mapped
        logger.debug("ole2 sniffing failed: %s", exc)
    return "ole"
