"""The parsed document on disk and on the wire: one pickle format, one unpickler that reads nothing else.

A `LoadedDocument` crosses from the parsing worker to the service through a pipe, and is kept on
disk by the parse cache (`app/ingest/parse_cache.py`: an expensive parse, or a backfill's survey
until its stage step). Every one of them
writes with `dump` and reads with `load`, whose unpickler accepts only the document model's
classes: a pickle that names anything else (a subverted worker, a tampered file) is refused, never
run.
"""

from __future__ import annotations

import pickle
from typing import Any, BinaryIO

from app.ingest.types import Block, LoadedDocument, Section

_ALLOWED = {
    ("app.ingest.types", "LoadedDocument"): LoadedDocument,
    ("app.ingest.types", "Section"): Section,
    ("app.ingest.types", "Block"): Block,
}
# what a broken or foreign pickle raises while it is read
UNREADABLE = (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError)


class DocumentUnpickler(pickle.Unpickler):
    """Reads back the document model and plain values; refuses every other class."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}") from None


def dump(value: Any, handle: BinaryIO) -> None:
    """Write a document (or the worker's answer holding one) in the one format."""
    pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)


def load(handle: BinaryIO) -> Any:
    """Read what `dump` wrote; raises one of UNREADABLE (or MemoryError, OSError) when it cannot."""
    return DocumentUnpickler(handle).load()


def load_document(handle: BinaryIO) -> LoadedDocument | None:
    """A kept document, or None when the pickle holds anything else or is broken."""
    try:
        document = load(handle)
    except UNREADABLE:
        return None
    return document if isinstance(document, LoadedDocument) else None
