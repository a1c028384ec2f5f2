"""Zip containers (OOXML, EPUB, ODF): refuse zip bombs before any parser unpacks a byte.

The central directory declares every member's uncompressed size, and `zipfile` stops with a CRC
error when a member inflates past its declared size, so checking the declared sizes is enough.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

from app.errors import UnsupportedFileType

logger = logging.getLogger(__name__)

# Real Office files inflate 3-15x (text-heavy XML); spreadsheets of repeated values reach about
# 40-60x. Bombs are 1,000x and more. The floor keeps small, very regular files (a 200 KB sheet of
# zeros) loadable however high their ratio.
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
MAX_MEMBERS = 20_000
# Members that a DOM parser (python-docx, python-pptx, lxml) loads whole; about 10x in memory.
MAX_XML_PART_BYTES = 200 * 1024 * 1024


def check_zip(path: Path, filename: str, *, streaming: bool = False) -> None:
    """Raise UnsupportedFileType when the zip at `path` is damaged or would inflate beyond our caps."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except Exception as exc:  # BadZipFile, OSError, struct.error... on a damaged directory
        logger.debug("zip directory unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} is damaged: its zip container cannot be read. Re-save the file and upload it again"
        ) from None
    check_zip_infos(infos, path.stat().st_size, filename, streaming=streaming)


def check_zip_infos(
    infos: list[zipfile.ZipInfo], compressed_size: int, filename: str, *, streaming: bool = False
) -> None:
    """Check declared member sizes against the caps (`streaming`: the reader never holds a whole part)."""
    if len(infos) > MAX_MEMBERS:
        raise UnsupportedFileType(_bomb_detail(filename, f"it holds more than {MAX_MEMBERS:,} files"))
    total = sum(info.file_size for info in infos)
    if total > MAX_TOTAL_BYTES:
        raise UnsupportedFileType(_bomb_detail(filename, f"it unpacks to more than {_mib(MAX_TOTAL_BYTES)}"))
    if total > RATIO_FLOOR_BYTES and total > MAX_RATIO * max(compressed_size, 1):
        raise UnsupportedFileType(
            _bomb_detail(filename, f"it unpacks to {_mib(total)}, over {MAX_RATIO} times its size")
        )
    if not streaming:
        largest = max(
            (
                i.file_size
                for i in infos
                if i.filename.lower().endswith((".xml", ".rels", ".xhtml", ".html", ".htm"))
            ),
            default=0,
        )
        if largest > MAX_XML_PART_BYTES:
            raise UnsupportedFileType(
                _bomb_detail(filename, f"one of its parts unpacks to {_mib(largest)} of XML")
            )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):,.0f} MiB"


def _bomb_detail(filename: str, reason: str) -> str:
    return (
        f"{filename} was refused: {reason} (a possible zip bomb). "
        "Split the document into smaller files and upload them separately"
    )
