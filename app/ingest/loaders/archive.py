"""Zip containers (OOXML, EPUB, ODF): a first look at the directory before any parser unpacks a byte.

The directory declares each member's size, and `zipfile` never inflates a member past it (it stops
with a CRC error), so a declared total over `PARSE_MAX_UNZIPPED_BYTES` is refused at once. That is
only the fast path: the bytes are counted again while they are inflated (`BoundedZipFile`), which
is what bounds a file whatever its headers say. The compression ratio is not a test: padding a
bomb with stored entries brings any ratio down.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

from app.errors import UnsupportedFileType
from app.ingest.limits import ParseLimitExceeded, current_guard

logger = logging.getLogger(__name__)

MAX_MEMBERS = 20_000


def check_zip(path: Path, filename: str) -> None:
    """Refuse a zip whose directory is unreadable (415), too long, or declares more than the limit (413)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except Exception as exc:  # BadZipFile, OSError, struct.error... on a damaged directory
        logger.debug("zip directory unreadable: %s", exc)
        raise UnsupportedFileType(
            f"{filename} is damaged: its zip container cannot be read. Re-save the file and upload it again"
        ) from None
    if len(infos) > MAX_MEMBERS:
        raise ParseLimitExceeded(
            f"{filename} was refused: it holds more than {MAX_MEMBERS:,} files (a possible zip bomb). "
            "Split the document into smaller files and upload them separately"
        )
    limit = current_guard().limits.max_unzipped_bytes
    declared = sum(info.file_size for info in infos)
    if declared > limit:
        raise ParseLimitExceeded(
            f"{filename} was refused: it unpacks to {declared / (1024 * 1024):,.0f} MiB, more than "
            f"{limit / (1024 * 1024):,.0f} MiB (PARSE_MAX_UNZIPPED_BYTES). Split the document into "
            "smaller files and upload them separately, or ask the operator to raise the limit"
        )
