"""The one parse cache: parsed documents kept on disk for a while by the bytes they came from.

Two parses of the same bytes happen moments apart. V1's ingest parses an upload and the V2 index
parses the same original again (its file job fetches it from the blob store): for a scanned PDF
that is OCR twice, seconds per page. A backfill's survey parses every file of a run for its
repeated blocks, and the file's stage step needs the same document to chunk it.

Entries live in DATA_DIR/tmp/parsed under a key made of the bytes' SHA-256 and everything that
shapes a parse: the file name's suffix, the content type, the parse limits with OCR's options,
PDF_EXTRACT_IMAGES and the loaders' own code (a parse by other code is never read back). A parse
in which OCR read a page, or that took at least `min_seconds`, is kept (`<key>.pickle`, at most
`max_entries`, the newest); a survey's parse is held for its stage step whatever it cost
(`<key>.held.pickle`, at most `max_held`), and the stage step removes it once it has used it.
Every entry goes after `max_age_s`. Writes land whole (a rename), so processes sharing DATA_DIR may
share the cache; one that finds nothing parses again. Only the document model is ever unpickled.
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

KEPT = ".pickle"
HELD = ".held.pickle"
PARTIAL = ".partial"
# a survey holds one parse per file of its run until the stage step: room for a large backfill
HELD_MAX_ENTRIES = 1000


@functools.cache
def loaders_fingerprint() -> str:
    """A digest of the loaders' source: a parse by other code is never read back."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent / "loaders"
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class ParseCache:
    """Parsed documents on disk by content and options (see the module docstring)."""

    def __init__(
        self,
        folder: Path,
        *,
        max_age_s: float = 3600.0,
        max_entries: int = 32,
        max_held: int = HELD_MAX_ENTRIES,
        min_seconds: float = 2.0,
    ) -> None:
        self.folder = folder
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self.max_held = max_held
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
        """The document kept or held under `key`, if there is one young enough."""
        for suffix in (KEPT, HELD):
            path = self.folder / f"{key}{suffix}"
            try:
                if time.time() - path.stat().st_mtime > self.max_age_s:
                    continue
                with path.open("rb") as handle:
                    document = load_document(handle)
            except OSError:
                continue
            if document is not None:
                return document
        return None

    def put(self, key: str, document: LoadedDocument, seconds: float, *, hold: bool = False) -> None:
        """Hold `document` for a stage step (`hold`), or keep it when OCR read some of it or its
        parse took `min_seconds` or more; then prune."""
        if hold:
            if self.max_held < 1:
                return
            suffix = HELD
        elif (document.ocr_pages or seconds >= self.min_seconds) and self.max_entries >= 1:
            suffix = KEPT
        else:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{key}{suffix}.{os.getpid()}{PARTIAL}"
        try:
            with partial.open("wb") as handle:
                codec.dump(document, handle)
            partial.replace(self.folder / f"{key}{suffix}")  # whole or not at all, for any reader
        except OSError as exc:  # a full disk costs the second parse, nothing else
            logger.warning("A parse could not be kept for reuse (%s)", exc.__class__.__name__)
            with contextlib.suppress(OSError):
                partial.unlink()
            return
        self.prune()

    def release(self, key: str) -> None:
        """The stage step is done with the survey's parse of `key`: remove it (a kept one stays)."""
        with contextlib.suppress(OSError):
            (self.folder / f"{key}{HELD}").unlink()

    def prune(self) -> None:
        """Remove entries older than `max_age_s`, and all but the newest `max_entries` kept and
        `max_held` held ones (a write left half done by a process that died goes with its age)."""
        if not self.folder.is_dir():
            return
        now = time.time()
        kept: list[tuple[float, Path]] = []
        held: list[tuple[float, Path]] = []
        for path in self.folder.iterdir():
            with contextlib.suppress(OSError):
                mtime = path.stat().st_mtime
                if path.name.endswith(HELD):
                    held.append((mtime, path))
                elif path.name.endswith(KEPT):
                    kept.append((mtime, path))
                elif path.name.endswith(PARTIAL) and now - mtime > self.max_age_s:
                    path.unlink()
        for entries, limit in ((kept, self.max_entries), (held, self.max_held)):
            entries.sort(reverse=True)
            for rank, (mtime, path) in enumerate(entries):
                if rank >= limit or now - mtime > self.max_age_s:
                    with contextlib.suppress(OSError):
                        path.unlink()


async def recall(cache: ParseCache, key: str, filename: str) -> LoadedDocument | None:
    """The cached parse of `key` (logged when there is one), else None."""
    kept = await asyncio.to_thread(cache.get, key)
    if kept is not None:
        logger.info("Parse of %r reused: the same bytes and options were parsed moments ago", filename)
    return kept


async def parse_remembered(
    cache: ParseCache | None,
    sha256: str | None,
    path: Path,
    filename: str,
    content_type: str | None,
    *,
    limits: ParseLimits,
    pdf_extract_images: bool,
) -> LoadedDocument:
    """`parse_in_worker`, or the document the same bytes parsed into a moment ago."""
    if cache is None or not sha256:
        return await parse_in_worker(
            path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
        )
    key = cache.key(sha256, filename, content_type, limits, pdf_extract_images)
    kept = await recall(cache, key, filename)
    if kept is not None:
        return kept
    return await parse_and_keep(
        cache, key, path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
    )


async def parse_and_keep(
    cache: ParseCache,
    key: str,
    path: Path,
    filename: str,
    content_type: str | None,
    *,
    limits: ParseLimits,
    pdf_extract_images: bool,
    hold: bool = False,
) -> LoadedDocument:
    """`parse_in_worker`, the document kept under `key` when it was expensive or `hold` asks
    (`recall` said no)."""
    started = time.monotonic()
    document = await parse_in_worker(
        path, filename, content_type, limits=limits, pdf_extract_images=pdf_extract_images
    )
    await asyncio.to_thread(cache.put, key, document, time.monotonic() - started, hold=hold)
    return document


def parse_cache(data_dir: Path) -> ParseCache:
    """The service's parse cache: DATA_DIR/tmp/parsed, shared by V1's ingest and the V2 index."""
    return ParseCache(data_dir.resolve() / "tmp" / "parsed")
