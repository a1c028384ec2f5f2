"""Documents a file's survey parsed, kept on disk in this process until its stage step chunks them."""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path

from app.ingest import codec
from app.ingest.codec import load_document
from app.ingest.types import LoadedDocument

# a document parsed by a file's survey and not yet chunked is kept this long in the process's own
# temporary folder (its stage step, on another replica or much later, parses it again instead)
PARSE_CACHE_MAX_AGE_S = 3600.0


class ParseCache:
    """Documents parsed by a survey, kept on disk until they are chunked (parsed once, not twice).

    Keyed by file id and checksum: a file replaced between its survey and its stage step is parsed
    again. The folder is under this process's own temporary folder, removed with it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, file_id: str, checksum: str) -> Path:
        key = f"{file_id}\x1f{checksum}".encode("utf-8", "surrogatepass")
        return self.folder / (hashlib.sha256(key).hexdigest() + ".pickle")

    def put(self, file_id: str, checksum: str, document: LoadedDocument) -> None:
        """Keep a parsed document."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._path(file_id, checksum).open("wb") as handle:
            codec.dump(document, handle)

    def take(self, file_id: str, checksum: str) -> LoadedDocument | None:
        """The parsed document, removed from the cache; None when it was not kept."""
        path = self._path(file_id, checksum)
        try:
            with path.open("rb") as handle:
                return load_document(handle)
        except OSError:
            return None
        finally:
            with contextlib.suppress(OSError):
                path.unlink()

    def prune(self, max_age_s: float) -> None:
        """Remove documents of every run kept longer than `max_age_s` (their stage step ran elsewhere)."""
        now = time.time()
        for folder in self.folder.parent.glob("v2-run-*"):
            for item in folder.glob("*.pickle"):
                with contextlib.suppress(OSError):
                    if now - item.stat().st_mtime > max_age_s:
                        item.unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty

    def clear(self) -> None:
        """Remove whatever is left."""
        if self.folder.is_dir():
            for item in self.folder.glob("*.pickle"):
                with contextlib.suppress(OSError):
                    item.unlink()
            with contextlib.suppress(OSError):
                self.folder.rmdir()
