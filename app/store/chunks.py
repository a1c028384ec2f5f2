"""V1 chunk storage on rag_api's `langchain_pg_embedding`: search, read, replace, delete.

Every function takes a connection, so callers choose the transaction (and tests can roll back).
Every read and delete carries the caller's namespaces in its WHERE clause.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import numpy as np

from app.store import queries
from app.store.db import StoreInfo


@dataclass(frozen=True)
class ChunkHit:
    """One search result: a stored chunk and its cosine distance to the query."""

    id: uuid.UUID
    file_id: str
    text: str
    metadata: dict[str, Any]
    distance: float


@dataclass(frozen=True)
class SearchPlan:
    """How a search may run: the exact-scan threshold and the usable HNSW index, if any."""

    exact_max_rows: int
    estimate: int = 0  # visible rows expected (files x average chunks per file)
    check_dims: bool = True  # False when every catalogued row has the query's dimension
    index_function: str | None = None  # the valid HNSW index's walk function; None = exact only
    index_dims: int = 0
    cost_factor: float = 1.0
    ef_search: int = 100
    max_scan_tuples: int = 20_000
    legacy_unowned: bool = False
    use_copy: bool = False  # the compact vector copy (ragoverlay_vectors) is complete


@dataclass
class SearchResult:
    """Hits plus how they were found (for Server-Timing and tests)."""

    hits: list[ChunkHit]
    path: str
    visible_estimate: int


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


@dataclass
class DeleteResult:
    """What a delete removed: file ids found in scope, and blobs no longer referenced."""

    found: set[str] = field(default_factory=set)
    orphan_blob_keys: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=32)
def _sql(template: str, param: int, legacy_unowned: bool) -> str:
    return queries.with_owner_predicate(template, param, legacy_unowned=legacy_unowned)


def _to_numpy(value: Any) -> np.ndarray:
    """pgvector's codec yields a `Vector`; older versions yield ndarray."""
    if hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def _meta(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


async def search(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    vector: np.ndarray,
    file_ids: Sequence[str],
    owners: Sequence[str],
    k: int,
    plan: SearchPlan,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> SearchResult:
    """Top-`k` chunks nearest to `vector` among the caller's rows of `file_ids`, in one round trip."""
    rows = await conn.fetch(
        queries.SEARCH_FUNCTION,
        vector,
        info.collection_id,
        list(file_ids),
        list(owners),
        k,
        plan.legacy_unowned,
        plan.estimate,
        plan.check_dims,
        plan.exact_max_rows,
        plan.index_function,
        plan.index_dims,
        plan.ef_search,
        plan.max_scan_tuples,
        plan.cost_factor,
        plan.use_copy,
        timeout=timeout,
    )
    hits = [
        ChunkHit(r["uuid"], r["custom_id"], r["document"] or "", _meta(r["cmetadata"]), float(r["distance"]))
        for r in rows
    ]
    path = rows[0]["path"] if rows else "none"
    estimate = int(rows[0]["visible_estimate"]) if rows else 0
    return SearchResult(hits, path, estimate)


async def search_exact_reference(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    vector: np.ndarray,
    file_ids: Sequence[str],
    owners: Sequence[str],
    k: int,
    legacy_unowned: bool = False,
) -> list[ChunkHit]:
    """Plain exact top-`k` (no function, no index): the reference the tests compare against."""
    sql = _sql(queries.SEARCH_TEMPLATE, 4, legacy_unowned)
    rows = await conn.fetch(
        sql, vector, info.collection_id, list(file_ids), list(owners), int(vector.shape[0]), k
    )
    return [
        ChunkHit(r["uuid"], r["custom_id"], r["document"] or "", _meta(r["cmetadata"]), float(r["distance"]))
        for r in rows
    ]


# Per-file chunk counts are kept in memory for the path choice up to this many catalogued files
# (~200 bytes each); above it the estimate falls back to files x average chunks per file.
FILE_MAP_MAX = 100_000


@dataclass(frozen=True)
class CatalogueStats:
    """Sizes and dimensions of one collection's files, for the search path choice."""

    files: int = 0
    chunks: int = 0
    uniform_dims: int | None = None  # the single dimension of every catalogued file, if there is one
    # file id -> owner -> chunk count; None when the catalogue is larger than FILE_MAP_MAX
    file_chunks: dict[str, dict[str, int]] | None = None

    @property
    def chunks_per_file(self) -> float:
        """Average chunks per file (20 before anything is known: rag_api's typical file)."""
        return self.chunks / self.files if self.files else 20.0

    def estimate(self, file_ids: Sequence[str], owners: Sequence[str]) -> int:
        """Rows of `file_ids` that `owners` can see, as far as the catalogue knows.

        Only the path choice uses this; authorisation is the database's. A listed file catalogued
        under other owners counts 0 (a knowledge base listed without its `entity_id` sees none of
        the Agent's files); a file the catalogue has not seen yet counts the average.
        """
        if self.file_chunks is None:
            return round(len(file_ids) * self.chunks_per_file)
        total = 0.0
        for file_id in file_ids:
            by_owner = self.file_chunks.get(file_id)
            if by_owner is None:
                total += self.chunks_per_file
                continue
            for owner in owners:
                total += by_owner.get(owner, 0)
        return round(total)

    def with_file(self, file_id: str, owner: str, dims: int | None, chunks: int) -> CatalogueStats:
        """These statistics plus (or with a new version of) one stored file."""
        uniform = self.uniform_dims if (self.files == 0 or self.uniform_dims == dims) else None
        if self.files == 0:
            uniform = dims
        file_chunks = self.file_chunks
        previous = 0
        if file_chunks is not None:
            # replaced in place: requests read the map on the event loop, between awaits
            previous = file_chunks.setdefault(file_id, {}).get(owner, 0)
            file_chunks[file_id][owner] = chunks
        new_file = previous == 0
        return CatalogueStats(
            self.files + (1 if new_file else 0), self.chunks + chunks - previous, uniform, file_chunks
        )


async def catalogue_stats(conn: asyncpg.Connection, info: StoreInfo) -> CatalogueStats:
    """Current catalogue statistics of the collection (with per-file counts when small enough)."""
    row = await conn.fetchrow(queries.CATALOGUE_STATS, info.collection_id)
    uniform = row["dims"] if row["dim_kinds"] == 1 and not row["unknown_dims"] else None
    files = int(row["files"])
    file_chunks: dict[str, dict[str, int]] | None = None
    if files <= FILE_MAP_MAX:
        file_chunks = {}
        for r in await conn.fetch(queries.CATALOGUE_FILE_CHUNKS, info.collection_id):
            file_chunks.setdefault(r["file_id"], {})[r["owner"]] = int(r["chunk_count"])
    return CatalogueStats(files, int(row["chunks"]), uniform, file_chunks)


async def documents(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    file_ids: Sequence[str],
    owners: Sequence[str],
    limit: int,
    legacy_unowned: bool = False,
) -> list[StoredChunk]:
    """The caller's chunks of `file_ids`, grouped by file, in document order."""
    sql = _sql(queries.DOCUMENTS_TEMPLATE, 3, legacy_unowned)
    rows = await conn.fetch(sql, info.collection_id, list(file_ids), list(owners), limit)
    return [StoredChunk(r["custom_id"], r["document"] or "", _meta(r["cmetadata"])) for r in rows]


async def list_file_ids(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    owners: Sequence[str],
    limit: int,
    legacy_unowned: bool = False,
) -> list[str]:
    """Distinct file ids the caller's namespaces own."""
    sql = _sql(queries.IDS_TEMPLATE, 2, legacy_unowned)
    rows = await conn.fetch(sql, info.collection_id, list(owners), limit)
    return [r["custom_id"] for r in rows]


async def existing_vectors(
    conn: asyncpg.Connection, info: StoreInfo, *, file_id: str, owner: str, model: str
) -> dict[str, np.ndarray]:
    """Vectors stored for this file and owner by `model`, by chunk digest (to skip re-embedding)."""
    rows = await conn.fetch(queries.EXISTING_VECTORS, info.collection_id, file_id, owner, model)
    out: dict[str, np.ndarray] = {}
    for r in rows:
        if r["digest"] and r["embedding"] is not None:
            out[r["digest"]] = _to_numpy(r["embedding"])
    return out


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
    if chunks:
        await conn.copy_records_to_table(
            "langchain_pg_embedding",
            columns=list(queries.EMBEDDING_COPY_COLUMNS),
            records=[
                (
                    c.id,
                    info.collection_id,
                    c.embedding,
                    c.text,
                    json.dumps(c.metadata, ensure_ascii=False),
                    record.file_id,
                )
                for c in chunks
            ],
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
    )
    return str(previous_blob) if previous_blob and previous_blob != record.blob_key else None


async def delete_files(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    file_ids: Sequence[str],
    owners: Sequence[str],
    uploader: str,
    any_owner: bool,
    legacy_unowned: bool = False,
) -> DeleteResult:
    """Delete chunks and catalogue rows of `file_ids` in the caller's delete scope.

    Must run inside a transaction. `any_owner` is DELETE_SCOPE=caller (rag_api's behaviour).
    """
    result = DeleteResult()
    ids = list(dict.fromkeys(file_ids))
    if any_owner:
        chunk_rows = await conn.fetch(queries.DELETE_CHUNKS_ANY, info.collection_id, ids)
        file_rows = await conn.fetch(queries.DELETE_FILES_ANY, info.collection_id, ids)
    else:
        sql = _sql(queries.DELETE_CHUNKS_OWNER_SCOPE_TEMPLATE, 3, legacy_unowned)
        chunk_rows = await conn.fetch(sql, info.collection_id, ids, list(owners), uploader)
        file_rows = await conn.fetch(
            queries.DELETE_FILES_OWNER_SCOPE, info.collection_id, ids, list(owners), uploader
        )
    result.found.update(r["custom_id"] for r in chunk_rows)
    result.found.update(r["file_id"] for r in file_rows)
    for key in {r["blob_key"] for r in file_rows if r["blob_key"]}:
        if not await conn.fetchval(queries.BLOB_STILL_REFERENCED, key):
            result.orphan_blob_keys.append(key)
    return result


async def blob_still_referenced(conn: asyncpg.Connection, key: str) -> bool:
    """True when another catalogue row still points at this blob."""
    return bool(await conn.fetchval(queries.BLOB_STILL_REFERENCED, key))
