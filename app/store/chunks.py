"""V1 chunk storage on rag_api's `langchain_pg_embedding`: search, read, replace, delete.

Every function takes a connection, so callers choose the transaction (and tests can roll back).
Every read and delete takes the caller's `Scope` and runs inside it in SQL (`app/store/sql/`).
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import numpy as np

from app.store import queries
from app.store.db import StoreInfo, vector_array
from app.store.scope import SCOPE_PARAMS, SCOPE_SQL, Scope


@dataclass(frozen=True)
class ChunkHit:
    """One search result: a stored chunk and its cosine distance to the query."""

    id: uuid.UUID
    file_id: str
    text: str
    metadata: dict[str, Any]
    distance: float


@dataclass(frozen=True)
class SearchCall:
    """One call of a search channel's SQL function: its name and its arguments besides the scope.

    The planner builds it (names are ours, never request data); values are bound as parameters.
    """

    function: str
    args: Mapping[str, Any]


@dataclass
class SearchResult:
    """Hits plus the path the SQL took (for Server-Timing and tests)."""

    hits: list[ChunkHit]
    path: str


@dataclass(frozen=True)
class StoredChunk:
    """A chunk read back in document order."""

    file_id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class NewChunk:
    """A chunk ready to insert: rag_api's row format."""

    id: uuid.UUID
    embedding: np.ndarray
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class FileRecord:
    """Our catalogue row for an uploaded file."""

    file_id: str
    owner: str
    uploader: str
    filename: str
    content_type: str | None
    size_bytes: int | None
    sha256: str | None
    blob_key: str | None
    chunk_count: int
    embedding_model: str | None
    embedding_dim: int | None
    storage_metadata: dict[str, Any] | None = None
    # the 1-based pages OCR read, and those with a picture but no text (None: not known)
    ocr_pages: tuple[int, ...] | None = None
    empty_pages: tuple[int, ...] | None = None


@dataclass
class DeleteResult:
    """What a delete removed: file ids found in scope, and the originals its rows pointed at.

    `blob_keys` are candidates only: whether an original may go is decided later, under its lock
    (`lock_blob`), by whoever removes it. `orphan_blob_keys` is the subset unreferenced when the
    delete ran (before commit; informational).
    """

    found: set[str] = field(default_factory=set)
    orphan_blob_keys: list[str] = field(default_factory=list)
    blob_keys: list[str] = field(default_factory=list)


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@functools.lru_cache(maxsize=64)
def _call_sql(function: str, arg_names: tuple[str, ...]) -> str:
    """`SELECT <hit columns> FROM function(p_scope => <scope>, p_a => $7, ...)`, from our own names."""
    for name in (function, *arg_names):
        if not _IDENTIFIER.match(name):
            raise ValueError(f"not a SQL identifier: {name!r}")
    named = "".join(f", {name} => ${SCOPE_PARAMS + i}" for i, name in enumerate(arg_names, start=1))
    return f"SELECT {queries.SEARCH_COLUMNS} FROM {function}(p_scope => {SCOPE_SQL}{named}) AS h"


def _meta(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


async def search(
    conn: asyncpg.Connection,
    scope: Scope,
    call: SearchCall,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> SearchResult:
    """Run one search channel's SQL function inside `scope`, in one round trip."""
    names = tuple(call.args)
    rows = await conn.fetch(
        _call_sql(call.function, names),
        *scope.for_reading().sql_args(),
        *(call.args[n] for n in names),
        timeout=timeout,
    )
    hits = [
        ChunkHit(r["uuid"], r["custom_id"], r["document"] or "", _meta(r["cmetadata"]), float(r["distance"]))
        for r in rows
    ]
    return SearchResult(hits, rows[0]["path"] if rows else "none")


async def documents(conn: asyncpg.Connection, scope: Scope, *, limit: int) -> list[StoredChunk]:
    """The chunks of the scope's files, grouped by file, in document order."""
    rows = await conn.fetch(queries.DOCUMENTS, *scope.for_reading().sql_args(), limit)
    return [StoredChunk(r["custom_id"], r["document"] or "", _meta(r["cmetadata"])) for r in rows]


async def list_file_ids(conn: asyncpg.Connection, scope: Scope, *, limit: int) -> list[str]:
    """Distinct file ids the scope can see."""
    rows = await conn.fetch(queries.FILE_IDS, *scope.for_reading().sql_args(), limit)
    return [r["file_id"] for r in rows]


@dataclass(frozen=True)
class ListedFile:
    """A file as a listing shows it (the catalogue's row)."""

    file_id: str
    owner: str
    filename: str
    content_type: str | None
    size_bytes: int | None
    chunk_count: int
    status: str
    v2_indexed: bool


async def list_files(
    conn: asyncpg.Connection, scope: Scope, *, after: str | None, limit: int
) -> list[ListedFile]:
    """Catalogued files the scope can see, by file id, those after `after` (a page of `limit`)."""
    rows = await conn.fetch(queries.FILE_LISTING, *scope.for_reading().sql_args(), after, limit)
    return [
        ListedFile(
            r["file_id"],
            r["owner"],
            r["filename"],
            r["content_type"],
            r["size_bytes"],
            int(r["chunk_count"]),
            r["status"],
            bool(r["v2_indexed"]),
        )
        for r in rows
    ]


async def existing_vectors(
    conn: asyncpg.Connection, info: StoreInfo, *, file_id: str, owner: str, model: str
) -> dict[str, np.ndarray]:
    """Vectors stored for this file and owner by `model`, by chunk digest (to skip re-embedding)."""
    rows = await conn.fetch(queries.EXISTING_VECTORS, info.collection_id, file_id, owner, model)
    out: dict[str, np.ndarray] = {}
    for r in rows:
        if r["digest"] and r["embedding"] is not None:
            out[r["digest"]] = vector_array(r["embedding"])
    return out


# rows per COPY statement when a file's chunks are written: one statement per piece, never per file
COPY_BATCH_ROWS = 1000


async def replace_file(
    conn: asyncpg.Connection, info: StoreInfo, record: FileRecord, chunks: Sequence[NewChunk]
) -> str | None:
    """Atomically swap a file's chunks and catalogue row; return the blob key it replaced.

    Must run inside a transaction: until it commits, readers keep seeing the previous version.
    """
    await conn.execute(queries.LOCK_FILE, str(info.collection_id), record.file_id, record.owner)
    previous_blob = await conn.fetchval(
        queries.PREVIOUS_BLOB_KEY, info.collection_id, record.file_id, record.owner
    )
    await conn.execute(queries.DELETE_FILE_CHUNKS_OF_OWNER, info.collection_id, record.file_id, record.owner)
    # in pieces: each COPY (and the vector copy's trigger it fires) is one statement, whose cost must
    # stay bounded whatever the file's size (DB_STATEMENT_TIMEOUT_MS holds for each)
    for start in range(0, len(chunks), COPY_BATCH_ROWS):
        await conn.copy_records_to_table(
            "langchain_pg_embedding",
            columns=list(queries.EMBEDDING_COPY_COLUMNS),
            # a generator: each row's JSON is made as COPY sends it, not all of them at once
            records=(
                (
                    c.id,
                    info.collection_id,
                    c.embedding,
                    c.text,
                    json.dumps(c.metadata, ensure_ascii=False),
                    record.file_id,
                )
                for c in chunks[start : start + COPY_BATCH_ROWS]
            ),
        )
    await conn.execute(
        queries.UPSERT_FILE,
        info.collection_id,
        record.file_id,
        record.owner,
        record.uploader,
        record.filename,
        record.content_type,
        record.size_bytes,
        record.sha256,
        record.blob_key,
        record.chunk_count,
        record.embedding_model,
        record.embedding_dim,
        json.dumps(record.storage_metadata) if record.storage_metadata is not None else None,
        list(record.ocr_pages) if record.ocr_pages is not None else None,
        list(record.empty_pages) if record.empty_pages is not None else None,
    )
    return str(previous_blob) if previous_blob and previous_blob != record.blob_key else None


async def delete_files(conn: asyncpg.Connection, scope: Scope) -> DeleteResult:
    """Delete the chunks and catalogue rows of the scope's files; report what was found.

    Must run inside a transaction (the blob checks read what the delete left).
    """
    if scope.file_ids is None:
        raise ValueError("a delete needs the file ids to delete")
    result = DeleteResult()
    blob_keys: set[str] = set()
    for row in await conn.fetch(queries.DELETE_FILES, *scope.sql_args()):
        result.found.add(row["file_id"])
        if row["blob_key"]:
            blob_keys.add(row["blob_key"])
    result.blob_keys = sorted(blob_keys)
    for key in result.blob_keys:
        if not await conn.fetchval(queries.BLOB_STILL_REFERENCED, key):
            result.orphan_blob_keys.append(key)
    return result


async def blob_still_referenced(conn: asyncpg.Connection, key: str) -> bool:
    """True when another catalogue row still points at this blob."""
    return bool(await conn.fetchval(queries.BLOB_STILL_REFERENCED, key))


# One advisory lock per original (two-key form: our class number, the key's hash; a collision only
# serialises two unrelated originals). An upload holds it shared from "the original is stored" to
# the commit of the row that refers to it; a removal holds it exclusively from "no row refers to
# it" to the removal itself. So a removal never decides on a reference that is about to commit.
BLOB_LOCK_CLASS = 728_003
_LOCK_BLOB_SHARED = "SELECT pg_advisory_xact_lock_shared($1::int, hashtext($2))"
_LOCK_BLOB_EXCLUSIVE = "SELECT pg_advisory_xact_lock($1::int, hashtext($2))"


async def lock_blob(conn: asyncpg.Connection, key: str, *, shared: bool) -> None:
    """Take the original's lock until the end of the current transaction (shared: an upload)."""
    await conn.execute(_LOCK_BLOB_SHARED if shared else _LOCK_BLOB_EXCLUSIVE, BLOB_LOCK_CLASS, key)
