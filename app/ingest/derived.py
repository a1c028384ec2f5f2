"""Indexes derived from the uploads (evidence search's): what ingestion asks of them, and tells them.

    work = await index.prepare(draft, report)   # before the commit, from the upload's own parse
    work.v1_vectors(v1_chunks)                  # vectors it made that serve V1's chunks (one pass)
    await work.v1_embedded(v1_chunks, vectors)  # V1's final vectors, for what it left to them
    await work.write(conn)                      # inside the transaction that stores the V1 chunks
    await work.written(ok=...)                  # after it (ok: its part committed too)
    await index.delete_files(conn, scope)       # inside a delete's transaction, before the core rows

Ingestion owns the transaction; a derived index only ever writes inside it (under a savepoint, so
its failure never fails the upload: `written(ok=False)` then lets it catch up on its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import numpy as np

from app.ingest.types import LoadedDocument
from app.store.scope import Scope

# a stage of the upload a derived index reports: (stage name, done, total)
StageReport = Callable[[str, int, int | None], None]


@dataclass(frozen=True)
class UploadDraft:
    """What ingestion knows of an upload before its commit: the file, its owner and its parse."""

    file_id: str
    owner: str
    uploader: str
    filename: str
    content_type: str | None
    sha256: str
    blob_key: str
    document: LoadedDocument


@dataclass(frozen=True)
class V1Chunk:
    """A V1 chunk of the upload as a derived index may read it: its text and 0-based page."""

    text: str
    page: int | None


class DerivedWork(Protocol):
    """A derived index's part of one upload."""

    def v1_vectors(self, chunks: Sequence[V1Chunk]) -> Sequence[np.ndarray | None]:
        """A vector for each V1 chunk made from what this part embedded already (None: embed it)."""

    async def v1_embedded(self, chunks: Sequence[V1Chunk], vectors: Sequence[np.ndarray]) -> None:
        """V1's chunks have their vectors now: what this part left to them takes theirs."""

    async def write(self, conn: asyncpg.Connection) -> None:
        """Store it, inside the upload's transaction."""

    async def written(self, *, ok: bool) -> None:
        """After the upload's commit (`ok`: this part committed with it); never raises."""

    def summary(self) -> dict[str, object]:
        """What the upload's answer and job result say of this index."""


class DerivedIndex(Protocol):
    """An index built from the stored files: prepared with each upload, deleting with the files."""

    name: str

    def wants(self, owner: str) -> bool:
        """True when uploads of `owner` feed this index (ingestion then keeps the parse for it)."""

    async def prepare(self, draft: UploadDraft, report: StageReport) -> DerivedWork | None:
        """Its part of the upload (None: nothing to do for it)."""

    async def delete_files(self, conn: asyncpg.Connection, scope: Scope) -> None:
        """Delete the index's rows of the scope's files, inside the caller's transaction."""
