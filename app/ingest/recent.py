"""Parsed documents kept for a while by the bytes they came from: a scan's OCR is paid once, not twice.

V1's ingest parses an upload, and the V2 index parses the same original again moments later (its
file job fetches it from the blob store). For a scanned PDF that is OCR twice, seconds per page. A
parse in which OCR read a page, or that took at least `min_seconds`, is kept on disk
(DATA_DIR/tmp/parsed) under a key made of the bytes' SHA-256 and everything that shapes a parse:
the file name's suffix, the content type, the parse limits with OCR's options, PDF_EXTRACT_IMAGES
and the loaders' own code. The next parse of the same key reads it back instead. Entries older than
`max_age_s` go, and at most `max_entries` stay (the oldest go first). Only the document model is
ever unpickled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import time
from pathlib import Path

from app.ingest import codec
from app.ingest.codec import load_document
from app.ingest.limits import ParseLimits
from app.ingest.types import LoadedDocument
from app.ingest.worker import parse_in_worker

logger = logging.getLogger(__name__)


@functools.cache
def loaders_fingerprint() -> str:
    """A digest of the loaders' source: a parse by other code is never read back."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent / "loaders"
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class RecentParses:
    """Expensive parses kept on disk by content and options (see the module docstring)."""

    def __init__(
        self, folder: Path, *, max_age_s: float = 3600.0, max_entries: int = 32, min_seconds: float = 2.0
    ) -> None:
        self.folder = folder
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self.min_seconds = min_seconds

    @staticmethod
    def key(
        sha256: str, filename: str, content_type: str | None, limits: ParseLimits, pdf_extract_images: bool
    ) -> str:
        """The key of one parse: the bytes and everything that shapes what they parse into."""
        parts = (
            sha256,
            Path(filename).suffix.lower(),
            content_type or "",
            repr(limits),
            str(pdf_extract_images),
            loaders_fingerprint(),
        )
        return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> LoadedDocument | None:
        """The kept document of `key`, if one is kept and young enough."""
        path = self.folder / f"{key}.pickle"
        try:
            if time.time() - path.stat().st_mtime > self.max_age_s:
                return None
            with path.open("rb") as handle:
                return load_document(handle)
        except OSError:
            return None

    def put(self, key: str, document: LoadedDocument, seconds: float) -> None:
        """Keep `document` when OCR read some of it or its parse took `min_seconds` or more; prune."""
        if (not document.ocr_pages and seconds < self.min_seconds) or self.max_entries < 1:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{key}.{os.getpid()}.partial"
        try:
            with partial.open("wb") as handle:
                codec.dump(document, handle)
            partial.replace(self.folder / f"{key}.pickle")  # whole or not at all, for any reader
        except OSError as exc:  # a full disk costs the second parse, nothing else
            logger.warning("A parse could not be kept for reuse (%s)", exc.__class__.__name__)
            with contextlib.suppress(OSError):
                partial.unlink()
            return
        self.prune()

    def prune(self) -> None:
        """Remove entries older than `max_age_s` and all but the newest `max_entries`."""
        if not self.folder.is_dir():
            return
        now = time.time()
        entries: list[tuple[float, Path]] = []
        for path in self.folder.glob("*.pickle"):
            with contextlib.suppress(OSError):
                entries.append((path.stat().st_mtime, path))
        entries.sort(reverse=True)
        for rank, (mtime, path) in enumerate(entries):
            if rank >= self.max_entries or now - mtime > self.max_age_s:
                with contextlib.suppress(OSError):
                    path.unlink()


async def recall(recent: RecentParses, key: str, filename: str) -> LoadedDocument | None:
    """The kept parse of `key` (logged when there is one), else None."""
    kept = await asyncio.to_thread(recent.get, key)
    if kept is not None:
        logger.info("Parse of %r reused: the same bytes and options were parsed moments ago", filename)
    return kept


async def parse_remembered(
    recent: RecentParses | None,
    sha256: str | None,
    path: Path,
    filename: str,
    content_type: str | None,
    *,
    limits: ParseLimits,
    pdf_extract_images: bool,
) -> LoadedDocument:
    """`parse_in_worker`, or the document the same bytes parsed into a moment ago."""
    if recent is None or not sha256:
        return await parse_in_worker(
            path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
        )
    key = recent.key(sha256, filename, content_type, limits, pdf_extract_images)
    kept = await recall(recent, key, filename)
    if kept is not None:
        return kept
    return await parse_and_keep(
        recent, key, path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
    )


async def parse_and_keep(
    recent: RecentParses,
    key: str,
    path: Path,
    filename: str,
    content_type: str | None,
    *,
    limits: ParseLimits,
    pdf_extract_images: bool,
) -> LoadedDocument:
    """`parse_in_worker`, keeping the document under `key` when it was expensive (`recall` said no)."""
    started = time.monotonic()
    document = await parse_in_worker(
        path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
    )
    await asyncio.to_thread(recent.put, key, document, time.monotonic() - started)
    return document


def recent_parses(data_dir: Path) -> RecentParses:
    """The service's kept parses: DATA_DIR/tmp/parsed, shared by V1's ingest and the V2 index."""
    return RecentParses(data_dir.resolve() / "tmp" / "parsed")
