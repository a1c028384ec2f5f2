"""V2 index storage: runs, their files, documents, chunks, entities and term counts (migration 0010).

Every function takes a connection, so callers choose the transaction. Reads and deletes of file
rows take the caller's `Scope` and run inside it in SQL (`app/store/sql/50_v2_index.sql`), exactly as
V1's do; the run bookkeeping (runs, their file lists) is admin data and takes ids.

A run's content is exactly its staged `ragoverlay_v2_run_files` rows, each pointing at a document.
A document (one parsed version of one file of one owner) is shared by every run that links it, so
re-indexing unchanged files costs no embedding call.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal

import asyncpg
import numpy as np

from app.store.db import rows_affected, try_advisory_lock
from app.store.migrate import read_template
from app.store.scope import SCOPE_SQL, Scope
from app.store.v2_search import label_key
from app.store.vector_index import MAX_INDEX_DIMS, IndexSpec, ensure_walk, index_state

RunStatus = Literal["running", "active", "failed", "abandoned"]
FileState = Literal["pending", "staging", "staged", "failed"]
DocumentSource = Literal["original", "derivative", "v1_chunks"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "active", "failed", "abandoned")
FILE_STATES: tuple[FileState, ...] = ("pending", "staging", "staged", "failed")
# a stored term is at most this long (tsvector lexemes must stay under 2 KB; see the migration)
MAX_TERM_CHARS = 200


class RunError(Exception):
    """A run operation that cannot be done; `detail` says why (the API maps it to a status)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


class RunNotFound(RunError):
    """No such run in this collection."""


class RunStateError(RunError):
    """The run is not in a state that allows the operation (e.g. staging into a failed run)."""


class RunIncomplete(RunError):
    """Activation refused: not every expected file is staged."""


class RunFileGone(RunError):
    """The file is not (or no longer) one of the run's files."""


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One index run."""

    run_id: int
    namespace: str
    index_version: str
    extractor_version: str
    embedding_model: str
    embedding_dim: int | None
    expected_files: int
    status: RunStatus
    origin: str
    created_by: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None
    finished_at: datetime | None
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFileRecord:
    """One expected file of a run and how far it got."""

    file_id: str
    state: FileState
    document_id: int | None
    source: DocumentSource | None
    linked: bool
    attempts: int
    chunks: int | None
    error: str | None
    updated_at: datetime
    surveyed: bool = False  # its repeated-block fingerprints are known to the run


@dataclass(frozen=True)
class EntityRow:
    """An entity found in a chunk."""

    kind: str
    raw: str
    normalized: str
    value: float | None = None
    unit: str | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A chunk ready to store (the chunker's `ChunkRecord` plus its vector, when it has one)."""

    ordinal: int
    chunk_id: str
    kind: str
    page: int | None
    page_label: str | None
    section: tuple[str, ...]
    content: str
    embed_text: str
    search_text: str
    tokens: int
    table_caption: str | None = None
    table_index: int | None = None
    row_index: int | None = None
    row_label: str | None = None
    headers: tuple[str, ...] = ()
    row_values: tuple[str, ...] = ()
    units: tuple[str | None, ...] = ()
    footnotes: tuple[str, ...] = ()
    whole_table: bool = False
    entities: tuple[EntityRow, ...] = ()
    embedding: np.ndarray | None = None

    @property
    def embed_digest(self) -> str:
        """sha256 of the embedded text: a vector is reusable for the same text and model."""
        return text_digest(self.embed_text)

    @property
    def terms(self) -> list[str]:
        """The lexical terms: `search_text.split()`, each cut to MAX_TERM_CHARS."""
        return [term[:MAX_TERM_CHARS] for term in self.search_text.split()]


@dataclass(frozen=True)
class DocumentRow:
    """One parsed version of one file of one owner."""

    file_id: str
    owner: str
    checksum: str
    extractor_version: str
    embedding_model: str
    source: DocumentSource
    filename: str
    title: str
    language: str | None = None
    document_number: str | None = None
    revision: str | None = None
    publication_date: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    fingerprints: frozenset[str] = frozenset()
    repeated_removed: frozenset[str] = frozenset()
    embedding_error: str | None = None


@dataclass(frozen=True)
class ReusableDocument:
    """A stored document that a new run may link instead of parsing and embedding again."""

    document_id: int
    fingerprints: frozenset[str]
    repeated_removed: frozenset[str]
    chunk_count: int
    vectors_missing: int
    source: DocumentSource


@dataclass(frozen=True)
class StoredChunk:
    """A V2 chunk read back (what a channel or a test sees)."""

    document_id: int
    ordinal: int
    chunk_id: str
    file_id: str
    owner: str
    kind: str
    page: int | None
    page_label: str | None
    section: list[str]
    table_caption: str | None
    row_label: str | None
    headers: list[str]
    row_values: list[str]
    units: list[str | None]
    footnotes: list[str]
    content: str
    embed_text: str
    search_text: str
    tokens: int
    has_vector: bool


@dataclass(frozen=True)
class MissingVector:
    """A chunk stored without a vector (the provider failed): the re-embed sweep's unit of work."""

    document_id: int
    ordinal: int
    embedding_model: str
    embed_text: str
    tokens: int
    dims: int | None = None  # the dimension of the document's other vectors (None: it has none)


def text_digest(text: str) -> str:
    """sha256 hex of a text (surrogates kept), the key vectors are reused by."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _vector(value: Any) -> np.ndarray:
    if hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


# --- statements ----------------------------------------------------------------------------------

_RUN_COLUMNS = """
    run_id, namespace, index_version, extractor_version, embedding_model, embedding_dim, expected_files,
    status, origin, created_by, error, created_at, updated_at, activated_at, finished_at, settings::text
"""
INSERT_RUN = f"""
    INSERT INTO ragoverlay_v2_runs (collection_id, namespace, index_version, extractor_version,
                                    embedding_model, embedding_dim, expected_files, origin, created_by,
                                    settings)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)
    RETURNING {_RUN_COLUMNS}
"""
INSERT_RUN_FILES = """
    INSERT INTO ragoverlay_v2_run_files (run_id, file_id)
    SELECT $1, f FROM unnest($2::text[]) AS f
    ON CONFLICT (run_id, file_id) DO NOTHING
"""
SELECT_RUN = f"SELECT {_RUN_COLUMNS} FROM ragoverlay_v2_runs WHERE collection_id = $1 AND run_id = $2"
SELECT_RUN_FOR_UPDATE = SELECT_RUN + " FOR UPDATE"
LIST_RUNS = f"""
    SELECT {_RUN_COLUMNS} FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND ($2::text IS NULL OR namespace = $2)
      AND ($3::text[] IS NULL OR status = ANY ($3::text[]))
    ORDER BY run_id DESC
    LIMIT $4
"""
RUN_FILES = """
    SELECT file_id, state, document_id, source, linked, attempts, chunks, error, updated_at,
           fingerprints IS NOT NULL AS surveyed
    FROM ragoverlay_v2_run_files WHERE run_id = $1
    ORDER BY file_id
"""
RUN_FILE_COUNTS = "SELECT state, count(*) AS n FROM ragoverlay_v2_run_files WHERE run_id = $1 GROUP BY state"
RUN_FILE = """
    SELECT file_id, state, document_id, source, linked, attempts, chunks, error, updated_at,
           fingerprints IS NOT NULL AS surveyed
    FROM ragoverlay_v2_run_files WHERE run_id = $1 AND file_id = $2
"""
ADD_RUN_FILE = """
    WITH added AS (
        INSERT INTO ragoverlay_v2_run_files (run_id, file_id) VALUES ($1, $2)
        ON CONFLICT (run_id, file_id) DO NOTHING
        RETURNING run_id
    )
    UPDATE ragoverlay_v2_runs r SET expected_files = r.expected_files + 1, updated_at = now()
    FROM added a WHERE r.run_id = a.run_id
"""
START_FILE = """
    UPDATE ragoverlay_v2_run_files
    SET state = CASE WHEN state = 'staged' THEN state ELSE 'staging' END,
        attempts = attempts + 1, updated_at = now()
    WHERE run_id = $1 AND file_id = $2
"""
FAIL_FILE = """
    UPDATE ragoverlay_v2_run_files
    SET state = CASE WHEN state = 'staged' THEN state ELSE 'failed' END, error = $3, updated_at = now()
    WHERE run_id = $1 AND file_id = $2
"""
SET_FINGERPRINTS = """
    UPDATE ragoverlay_v2_run_files SET fingerprints = $3::text[], updated_at = now()
    WHERE run_id = $1 AND file_id = $2
"""
LINK_FILE = """
    UPDATE ragoverlay_v2_run_files
    SET state = 'staged', document_id = $3, source = $4, linked = $5, chunks = $6, fingerprints = $7::text[],
        error = NULL, updated_at = now()
    WHERE run_id = $1 AND file_id = $2
"""
RUN_FINGERPRINTS = """
    SELECT rf.file_id, rf.fingerprints FROM ragoverlay_v2_run_files rf
    WHERE rf.run_id = $1 AND rf.fingerprints IS NOT NULL
"""
TOUCH_RUN = "UPDATE ragoverlay_v2_runs SET updated_at = now() WHERE run_id = $1"
SET_RUN_DIM = """
    UPDATE ragoverlay_v2_runs SET embedding_dim = $2, updated_at = now()
    WHERE run_id = $1 AND embedding_dim IS NULL
"""
ABANDON_ACTIVE = """
    UPDATE ragoverlay_v2_runs SET status = 'abandoned', finished_at = now(), updated_at = now()
    WHERE collection_id = $1 AND namespace = $2 AND index_version = $3 AND status = 'active'
    RETURNING run_id
"""
MAKE_ACTIVE = f"""
    UPDATE ragoverlay_v2_runs SET status = 'active', activated_at = now(), updated_at = now(), error = NULL
    WHERE run_id = $1
    RETURNING {_RUN_COLUMNS}
"""
MAKE_FAILED = f"""
    UPDATE ragoverlay_v2_runs SET status = 'failed', error = $2, finished_at = now(), updated_at = now()
    WHERE run_id = $1
    RETURNING {_RUN_COLUMNS}
"""
LOCK_NAMESPACE_VERSION = """
    SELECT pg_advisory_xact_lock(
        hashtextextended('ragoverlay-v2:' || $1 || chr(31) || $2 || chr(31) || $3, 0))
"""
ACTIVE_RUNS = f"""
    SELECT {_RUN_COLUMNS} FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND status = 'active' AND ($2::text IS NULL OR namespace = $2)
    ORDER BY namespace, index_version
"""
OPEN_RUNS_OF_NAMESPACE = f"""
    SELECT {_RUN_COLUMNS} FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND namespace = $2 AND status IN ('running', 'active')
    ORDER BY run_id
"""
ACTIVE_RUN = f"""
    SELECT {_RUN_COLUMNS} FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND namespace = $2 AND status = 'active'
      AND ($3::text IS NULL OR index_version = $3)
    ORDER BY activated_at DESC, run_id DESC
    LIMIT 1
"""
REUSABLE_DOCUMENT = """
    SELECT document_id, fingerprints, repeated_removed, chunk_count, vectors_missing, source
    FROM ragoverlay_v2_documents
    WHERE collection_id = $1 AND owner = $2 AND file_id = $3 AND checksum = $4
      AND extractor_version = $5 AND embedding_model = $6
    ORDER BY vectors_missing, document_id DESC
"""
INSERT_DOCUMENT = """
    INSERT INTO ragoverlay_v2_documents (
        collection_id, file_id, owner, checksum, extractor_version, embedding_model, source, filename,
        title, language, document_number, revision, publication_date, metadata, fingerprints,
        repeated_removed, chunk_count, term_total, vectors_missing, embedding_error, title_key, filename_key,
        number_key)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15::text[], $16::text[],
            $17, $18, $19, $20, $21, $22, $23)
    RETURNING document_id
"""
CHUNK_COPY_COLUMNS = (
    "document_id", "ordinal", "chunk_id", "collection_id", "file_id", "owner", "kind", "page", "page_label",
    "section", "table_caption", "table_index", "row_index", "row_label", "headers", "row_values", "units",
    "footnotes", "whole_table", "content", "embed_text", "embed_digest", "tokens", "search_text", "terms",
    "term_count", "dims", "embedding", "row_label_key",
)  # fmt: skip
ENTITY_COPY_COLUMNS = (
    "document_id", "ordinal", "position", "collection_id", "file_id", "owner", "kind", "raw", "normalized",
    "value", "unit",
)  # fmt: skip
TERM_COPY_COLUMNS = ("document_id", "term", "chunks")
POSTING_COPY_COLUMNS = ("document_id", "ordinal", "term", "tf", "term_count")
# Vectors already made by `model` for these embedded texts: the file's earlier versions, or any
# document with the same bytes (another file id holding the same original).
REUSABLE_VECTORS = """
    SELECT DISTINCT ON (c.embed_digest) c.embed_digest, c.embedding
    FROM ragoverlay_v2_documents d
    JOIN ragoverlay_v2_chunks c ON c.document_id = d.document_id
    WHERE d.collection_id = $1 AND d.embedding_model = $2
      AND (d.checksum = $3 OR (d.owner = $4 AND d.file_id = $5))
      AND c.embed_digest = ANY ($6::text[]) AND c.embedding IS NOT NULL
"""
# Chunks without a vector in key order after ($4, $5), with the dimension of their document's
# other vectors (a new vector must match it).
MISSING_VECTORS = """
    SELECT c.document_id, c.ordinal, d.embedding_model, c.embed_text, c.tokens,
           (SELECT o.dims FROM ragoverlay_v2_chunks o
            WHERE o.document_id = c.document_id AND o.dims IS NOT NULL LIMIT 1) AS dims
    FROM ragoverlay_v2_documents d
    JOIN ragoverlay_v2_chunks c ON c.document_id = d.document_id AND c.embedding IS NULL
    WHERE d.collection_id = $1 AND d.vectors_missing > 0
      AND ($2::text IS NULL OR d.embedding_model = $2)
      AND ($4::bigint IS NULL OR (c.document_id, c.ordinal) > ($4::bigint, $5::integer))
    ORDER BY c.document_id, c.ordinal
    LIMIT $3
"""
COUNT_MISSING = """
    SELECT count(*) AS documents, coalesce(sum(vectors_missing), 0)::bigint AS chunks
    FROM ragoverlay_v2_documents
    WHERE collection_id = $1 AND vectors_missing > 0
"""
SET_VECTOR = """
    UPDATE ragoverlay_v2_chunks SET embedding = $3, dims = vector_dims($3::vector)
    WHERE document_id = $1 AND ordinal = $2 AND embedding IS NULL
    RETURNING 1
"""
RECOUNT_MISSING = """
    UPDATE ragoverlay_v2_documents d
    SET vectors_missing = (SELECT count(*) FROM ragoverlay_v2_chunks c
                           WHERE c.document_id = d.document_id AND c.embedding IS NULL),
        embedding_error = CASE WHEN EXISTS (SELECT 1 FROM ragoverlay_v2_chunks c
                                            WHERE c.document_id = d.document_id AND c.embedding IS NULL)
                               THEN d.embedding_error END
    WHERE d.document_id = ANY ($1::bigint[])
"""
# Documents that no running or active run links (a failed or abandoned run keeps its file list,
# pointing at nothing once pruned).
PRUNE_DOCUMENTS = """
    DELETE FROM ragoverlay_v2_documents d
    WHERE d.collection_id = $1
      AND NOT EXISTS (SELECT 1 FROM ragoverlay_v2_run_files rf
                      JOIN ragoverlay_v2_runs r ON r.run_id = rf.run_id
                      WHERE rf.document_id = d.document_id AND r.status IN ('running', 'active'))
"""
RUN_CHUNKS = f"""
    SELECT c.document_id, c.ordinal, c.chunk_id, c.file_id, c.owner, c.kind, c.page, c.page_label,
           c.section, c.table_caption, c.row_label, c.headers, c.row_values, c.units, c.footnotes,
           c.content, c.embed_text, c.search_text, c.tokens, c.embedding IS NOT NULL AS has_vector
    FROM ragoverlay_v2_run_chunks(p_scope => {SCOPE_SQL}, p_run => $7, p_limit => $8) AS c
"""
DELETE_FILES = f"SELECT d.file_id FROM ragoverlay_v2_delete_files(p_scope => {SCOPE_SQL}) AS d"
RUN_STATS = "SELECT chunks, average_length FROM ragoverlay_v2_run_stats($1)"
TERM_STATS = "SELECT term, df FROM ragoverlay_v2_term_stats($1, $2::text[])"
# The stored original of one file, read in the namespace's scope (admin work on behalf of it).
CATALOGUE_FILE = f"""
    SELECT f.filename, f.content_type, f.sha256, f.blob_key, f.size_bytes
    FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = $7
      AND ragoverlay_in_scope({SCOPE_SQL}, f.collection_id, f.file_id, f.owner)
    ORDER BY f.owner
    LIMIT 1
"""
SCHEMA_READY = """
    SELECT to_regclass('ragoverlay_v2_chunks') IS NOT NULL
       AND to_regproc('ragoverlay_v2_run_chunks') IS NOT NULL
"""


# --- runs ----------------------------------------------------------------------------------------


def _run(row: asyncpg.Record) -> RunRecord:
    settings = json.loads(row["settings"]) if row["settings"] else {}
    return RunRecord(
        run_id=int(row["run_id"]),
        namespace=row["namespace"],
        index_version=row["index_version"],
        extractor_version=row["extractor_version"],
        embedding_model=row["embedding_model"],
        embedding_dim=row["embedding_dim"],
        expected_files=int(row["expected_files"]),
        status=row["status"],
        origin=row["origin"],
        created_by=row["created_by"],
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        activated_at=row["activated_at"],
        finished_at=row["finished_at"],
        settings=settings if isinstance(settings, dict) else {},
    )


def _run_file(row: asyncpg.Record) -> RunFileRecord:
    return RunFileRecord(
        file_id=row["file_id"],
        state=row["state"],
        document_id=row["document_id"],
        source=row["source"],
        linked=bool(row["linked"]),
        attempts=int(row["attempts"]),
        chunks=row["chunks"],
        error=row["error"],
        updated_at=row["updated_at"],
        surveyed=bool(row["surveyed"]),
    )


async def create_run(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    namespace: str,
    index_version: str,
    extractor_version: str,
    embedding_model: str,
    embedding_dim: int | None,
    file_ids: Sequence[str],
    origin: str = "admin",
    created_by: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> RunRecord:
    """A new `running` run that must contain `file_ids` (distinct, in any order)."""
    files = list(dict.fromkeys(file_ids))
    async with conn.transaction():
        row = await conn.fetchrow(
            INSERT_RUN,
            collection_id,
            namespace,
            index_version,
            extractor_version,
            embedding_model,
            embedding_dim,
            len(files),
            origin,
            created_by,
            json.dumps(dict(settings or {}), sort_keys=True),
        )
        run = _run(row)
        await conn.execute(INSERT_RUN_FILES, run.run_id, files)
    return run


async def get_run(conn: asyncpg.Connection, collection_id: uuid.UUID, run_id: int) -> RunRecord | None:
    """The run, or None when this collection has no such run."""
    row = await conn.fetchrow(SELECT_RUN, collection_id, run_id)
    return _run(row) if row is not None else None


async def require_run(conn: asyncpg.Connection, collection_id: uuid.UUID, run_id: int) -> RunRecord:
    """The run, or RunNotFound."""
    run = await get_run(conn, collection_id, run_id)
    if run is None:
        raise RunNotFound(f"There is no index run {run_id}")
    return run


async def list_runs(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    namespace: str | None = None,
    statuses: Sequence[str] | None = None,
    limit: int = 100,
) -> list[RunRecord]:
    """Runs of the collection, newest first."""
    rows = await conn.fetch(LIST_RUNS, collection_id, namespace, list(statuses) if statuses else None, limit)
    return [_run(r) for r in rows]


async def run_files(conn: asyncpg.Connection, run_id: int) -> list[RunFileRecord]:
    """Every expected file of the run with its progress, by file id."""
    return [_run_file(r) for r in await conn.fetch(RUN_FILES, run_id)]


async def run_file(conn: asyncpg.Connection, run_id: int, file_id: str) -> RunFileRecord | None:
    """One expected file of the run, or None."""
    row = await conn.fetchrow(RUN_FILE, run_id, file_id)
    return _run_file(row) if row is not None else None


async def run_file_counts(conn: asyncpg.Connection, run_id: int) -> dict[str, int]:
    """How many of the run's files are in each state (every state present, 0 when none)."""
    counts: dict[str, int] = dict.fromkeys(FILE_STATES, 0)
    for row in await conn.fetch(RUN_FILE_COUNTS, run_id):
        counts[row["state"]] = int(row["n"])
    return counts


async def add_run_file(conn: asyncpg.Connection, run_id: int, file_id: str) -> bool:
    """Make `file_id` an expected file of the run (a new upload while the run is open)."""
    return rows_affected(await conn.execute(ADD_RUN_FILE, run_id, file_id)) > 0


async def start_file(conn: asyncpg.Connection, run_id: int, file_id: str) -> None:
    """Record an attempt at staging the file (state `staging` unless it is staged already)."""
    await conn.execute(START_FILE, run_id, file_id)


async def fail_file(conn: asyncpg.Connection, run_id: int, file_id: str, error: str) -> None:
    """Record that staging the file failed (a staged file keeps its document)."""
    await conn.execute(FAIL_FILE, run_id, file_id, error[:2000])


async def set_fingerprints(
    conn: asyncpg.Connection, run_id: int, file_id: str, fingerprints: Iterable[str]
) -> None:
    """Keep a file's boilerplate fingerprints on the run (counted before its document is stored)."""
    await conn.execute(SET_FINGERPRINTS, run_id, file_id, sorted(fingerprints))


async def run_fingerprints(conn: asyncpg.Connection, run_id: int) -> dict[str, frozenset[str]]:
    """The fingerprints known per file of the run."""
    return {
        r["file_id"]: frozenset(r["fingerprints"] or ()) for r in await conn.fetch(RUN_FINGERPRINTS, run_id)
    }


async def link_file(
    conn: asyncpg.Connection,
    run_id: int,
    file_id: str,
    *,
    document_id: int,
    source: DocumentSource,
    linked: bool,
    chunks: int,
    fingerprints: Iterable[str],
) -> None:
    """Point the run's file at a stored document: the file is staged."""
    status = await conn.execute(
        LINK_FILE, run_id, file_id, document_id, source, linked, chunks, sorted(fingerprints)
    )
    if rows_affected(status) == 0:
        # the file left the run meanwhile (deleted): the caller's transaction must not keep the document
        raise RunFileGone(f"File {file_id} is no longer one of the files of index run {run_id}")
    await conn.execute(TOUCH_RUN, run_id)


async def set_run_dimension(conn: asyncpg.Connection, run_id: int, dims: int) -> None:
    """Record the embedding dimension of the run once its first vector exists."""
    await conn.execute(SET_RUN_DIM, run_id, dims)


async def activate_run(conn: asyncpg.Connection, collection_id: uuid.UUID, run_id: int) -> RunRecord:
    """Make a complete running run the active one of its (namespace, index_version), atomically.

    The previous active run becomes `abandoned` in the same transaction. RunIncomplete when a
    file is not staged, RunStateError when the run is not running.
    """
    async with conn.transaction():
        row = await conn.fetchrow(SELECT_RUN_FOR_UPDATE, collection_id, run_id)
        if row is None:
            raise RunNotFound(f"There is no index run {run_id}")
        run = _run(row)
        if run.status != "running":
            raise RunStateError(f"Index run {run_id} is {run.status}; only a running run can be activated")
        counts = await run_file_counts(conn, run_id)
        waiting = counts["pending"] + counts["staging"] + counts["failed"]
        if waiting or counts["staged"] != run.expected_files:
            raise RunIncomplete(
                f"Index run {run_id} is not complete: {counts['staged']} of {run.expected_files} files "
                f"staged ({counts['pending']} pending, {counts['staging']} staging, {counts['failed']} "
                "failed); stage the rest, then activate"
            )
        await conn.execute(LOCK_NAMESPACE_VERSION, str(collection_id), run.namespace, run.index_version)
        await conn.fetch(ABANDON_ACTIVE, collection_id, run.namespace, run.index_version)
        active = _run(await conn.fetchrow(MAKE_ACTIVE, run_id))
    return active


async def fail_run(conn: asyncpg.Connection, collection_id: uuid.UUID, run_id: int, error: str) -> RunRecord:
    """Mark a running run failed; what queries see does not change."""
    async with conn.transaction():
        row = await conn.fetchrow(SELECT_RUN_FOR_UPDATE, collection_id, run_id)
        if row is None:
            raise RunNotFound(f"There is no index run {run_id}")
        run = _run(row)
        if run.status != "running":
            raise RunStateError(f"Index run {run_id} is {run.status}; only a running run can be failed")
        return _run(await conn.fetchrow(MAKE_FAILED, run_id, error[:2000]))


async def active_runs(
    conn: asyncpg.Connection, collection_id: uuid.UUID, namespace: str | None = None
) -> list[RunRecord]:
    """The active runs (one per namespace and index version), optionally of one namespace."""
    return [_run(r) for r in await conn.fetch(ACTIVE_RUNS, collection_id, namespace)]


async def active_run(
    conn: asyncpg.Connection, collection_id: uuid.UUID, namespace: str, index_version: str | None = None
) -> RunRecord | None:
    """The namespace's active run of `index_version` (None: the most recently activated one)."""
    row = await conn.fetchrow(ACTIVE_RUN, collection_id, namespace, index_version)
    return _run(row) if row is not None else None


async def open_runs(conn: asyncpg.Connection, collection_id: uuid.UUID, namespace: str) -> list[RunRecord]:
    """The namespace's running and active runs (where a new upload must be staged)."""
    return [_run(r) for r in await conn.fetch(OPEN_RUNS_OF_NAMESPACE, collection_id, namespace)]


# --- documents -----------------------------------------------------------------------------------


async def reusable_documents(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    owner: str,
    file_id: str,
    checksum: str,
    extractor_version: str,
    embedding_model: str,
) -> list[ReusableDocument]:
    """Stored documents of this file with the same bytes, extractor and model (most complete first)."""
    rows = await conn.fetch(
        REUSABLE_DOCUMENT, collection_id, owner, file_id, checksum, extractor_version, embedding_model
    )
    return [
        ReusableDocument(
            document_id=int(r["document_id"]),
            fingerprints=frozenset(r["fingerprints"] or ()),
            repeated_removed=frozenset(r["repeated_removed"] or ()),
            chunk_count=int(r["chunk_count"]),
            vectors_missing=int(r["vectors_missing"]),
            source=r["source"],
        )
        for r in rows
    ]


async def reusable_vectors(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    embedding_model: str,
    checksum: str,
    owner: str,
    file_id: str,
    digests: Sequence[str],
) -> dict[str, np.ndarray]:
    """Vectors `embedding_model` already made for these embedded texts (by digest)."""
    if not digests:
        return {}
    rows = await conn.fetch(
        REUSABLE_VECTORS, collection_id, embedding_model, checksum, owner, file_id, list(set(digests))
    )
    return {r["embed_digest"]: _vector(r["embedding"]) for r in rows}


def _chunk_record(
    document_id: int, collection_id: uuid.UUID, document: DocumentRow, chunk: ChunkRow
) -> tuple[Any, ...]:
    terms = chunk.terms
    vector = chunk.embedding
    return (
        document_id,
        chunk.ordinal,
        uuid.UUID(chunk.chunk_id),
        collection_id,
        document.file_id,
        document.owner,
        chunk.kind,
        chunk.page,
        chunk.page_label,
        list(chunk.section),
        chunk.table_caption,
        chunk.table_index,
        chunk.row_index,
        chunk.row_label,
        list(chunk.headers),
        list(chunk.row_values),
        list(chunk.units),
        list(chunk.footnotes),
        chunk.whole_table,
        chunk.content,
        chunk.embed_text,
        chunk.embed_digest,
        chunk.tokens,
        chunk.search_text,
        terms,
        len(terms),
        int(vector.shape[0]) if vector is not None else None,
        np.asarray(vector, dtype=np.float32) if vector is not None else None,
        _key(chunk.row_label),
    )


def _key(text: str | None) -> str | None:
    """The exact channel's match key of a name (None for no name, or one without any token)."""
    return (label_key(text) or None) if text else None


async def insert_document(
    conn: asyncpg.Connection, collection_id: uuid.UUID, document: DocumentRow, chunks: Sequence[ChunkRow]
) -> int:
    """Store a document with its chunks, entities, term counts and postings; returns its id.

    Run it in a transaction together with `link_file`, so a run never points at half a document.
    """
    missing = sum(1 for c in chunks if c.embedding is None)
    term_total = sum(len(c.terms) for c in chunks)
    document_id = int(
        await conn.fetchval(
            INSERT_DOCUMENT,
            collection_id,
            document.file_id,
            document.owner,
            document.checksum,
            document.extractor_version,
            document.embedding_model,
            document.source,
            document.filename,
            document.title,
            document.language,
            document.document_number,
            document.revision,
            document.publication_date,
            json.dumps(dict(document.metadata), ensure_ascii=False, default=str),
            sorted(document.fingerprints),
            sorted(document.repeated_removed),
            len(chunks),
            term_total,
            missing,
            document.embedding_error,
            _key(document.title),
            _key(PurePosixPath(document.filename).stem or document.filename),
            _key(document.document_number),
        )
    )
    if not chunks:
        return document_id
    await conn.copy_records_to_table(
        "ragoverlay_v2_chunks",
        columns=list(CHUNK_COPY_COLUMNS),
        records=[_chunk_record(document_id, collection_id, document, c) for c in chunks],
    )
    entities = [
        (
            document_id,
            chunk.ordinal,
            position,
            collection_id,
            document.file_id,
            document.owner,
            entity.kind,
            entity.raw,
            entity.normalized,
            entity.value,
            entity.unit,
        )
        for chunk in chunks
        for position, entity in enumerate(chunk.entities)
    ]
    if entities:
        await conn.copy_records_to_table(
            "ragoverlay_v2_entities", columns=list(ENTITY_COPY_COLUMNS), records=entities
        )
    frequency: Counter[str] = Counter()
    for chunk in chunks:
        frequency.update(set(chunk.terms))
    await conn.copy_records_to_table(
        "ragoverlay_v2_document_terms",
        columns=list(TERM_COPY_COLUMNS),
        records=[(document_id, term, n) for term, n in frequency.items()],
    )
    # the lexical channel's postings (migration 0013): one per chunk and distinct term
    postings: list[tuple[int, int, str, int, int]] = []
    for chunk in chunks:
        terms = chunk.terms
        postings.extend(
            (document_id, chunk.ordinal, term, tf, len(terms)) for term, tf in Counter(terms).items()
        )
    await conn.copy_records_to_table(
        "ragoverlay_v2_postings", columns=list(POSTING_COPY_COLUMNS), records=postings
    )
    return document_id


async def prune_documents(conn: asyncpg.Connection, collection_id: uuid.UUID) -> int:
    """Delete documents that no running or active run links; returns how many."""
    return rows_affected(await conn.execute(PRUNE_DOCUMENTS, collection_id))


# --- vectors the provider could not make ---------------------------------------------------------


async def chunks_missing_vectors(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    embedding_model: str | None = None,
    limit: int = 256,
    after: tuple[int, int] | None = None,
) -> list[MissingVector]:
    """Chunks stored without a vector (the provider failed while staging), in (document, ordinal)
    order after `after`, oldest documents first."""
    rows = await conn.fetch(
        MISSING_VECTORS,
        collection_id,
        embedding_model,
        limit,
        after[0] if after else None,
        after[1] if after else None,
    )
    return [
        MissingVector(
            int(r["document_id"]),
            int(r["ordinal"]),
            r["embedding_model"],
            r["embed_text"],
            r["tokens"],
            r["dims"],
        )
        for r in rows
    ]


async def count_missing_vectors(conn: asyncpg.Connection, collection_id: uuid.UUID) -> tuple[int, int]:
    """Documents with chunks stored without a vector, and how many such chunks (any model)."""
    row = await conn.fetchrow(COUNT_MISSING, collection_id)
    return int(row["documents"]), int(row["chunks"])


async def set_chunk_vectors(conn: asyncpg.Connection, vectors: Sequence[tuple[int, int, np.ndarray]]) -> int:
    """Store vectors for chunks that had none ((document_id, ordinal, vector)); returns rows updated."""
    if not vectors:
        return 0
    updated = 0
    async with conn.transaction():
        for document_id, ordinal, vector in vectors:
            if await conn.fetchval(SET_VECTOR, document_id, ordinal, np.asarray(vector, dtype=np.float32)):
                updated += 1
        await conn.execute(RECOUNT_MISSING, sorted({v[0] for v in vectors}))
    return updated


# --- reads and deletes in the caller's scope -----------------------------------------------------


async def run_chunks(conn: asyncpg.Connection, scope: Scope, run_id: int, *, limit: int) -> list[StoredChunk]:
    """The chunks of a run the scope may read, by file and ordinal."""
    rows = await conn.fetch(RUN_CHUNKS, *scope.for_reading().sql_args(), run_id, limit)
    return [
        StoredChunk(
            document_id=int(r["document_id"]),
            ordinal=int(r["ordinal"]),
            chunk_id=str(r["chunk_id"]),
            file_id=r["file_id"],
            owner=r["owner"],
            kind=r["kind"],
            page=r["page"],
            page_label=r["page_label"],
            section=list(r["section"]),
            table_caption=r["table_caption"],
            row_label=r["row_label"],
            headers=list(r["headers"]),
            row_values=list(r["row_values"]),
            units=list(r["units"]),
            footnotes=list(r["footnotes"]),
            content=r["content"],
            embed_text=r["embed_text"],
            search_text=r["search_text"],
            tokens=int(r["tokens"]),
            has_vector=bool(r["has_vector"]),
        )
        for r in rows
    ]


async def delete_files(conn: asyncpg.Connection, scope: Scope) -> set[str]:
    """Delete the V2 rows of the scope's files (documents, chunks, entities, run entries).

    Run it in the V1 delete's transaction, before the catalogue rows go (the uploader rule reads them).
    """
    if scope.file_ids is None:
        raise ValueError("a delete needs the file ids to delete")
    return {r["file_id"] for r in await conn.fetch(DELETE_FILES, *scope.sql_args())}


async def run_stats(conn: asyncpg.Connection, run_id: int) -> tuple[int, float]:
    """BM25's N (chunks of the run) and mean chunk length in terms."""
    row = await conn.fetchrow(RUN_STATS, run_id)
    return int(row["chunks"]), float(row["average_length"])


async def term_stats(conn: asyncpg.Connection, run_id: int, terms: Sequence[str]) -> dict[str, int]:
    """BM25's document frequency of each term in the run."""
    return {r["term"]: int(r["df"]) for r in await conn.fetch(TERM_STATS, run_id, list(terms))}


@dataclass(frozen=True)
class CatalogueEntry:
    """What the catalogue knows about a stored original."""

    filename: str
    content_type: str | None
    sha256: str | None
    blob_key: str | None
    size_bytes: int | None


async def catalogue_file(conn: asyncpg.Connection, scope: Scope, file_id: str) -> CatalogueEntry | None:
    """The catalogue row of `file_id` inside `scope` (one owner: the run's namespace), or None."""
    row = await conn.fetchrow(CATALOGUE_FILE, *scope.for_reading().sql_args(), file_id)
    if row is None:
        return None
    return CatalogueEntry(
        row["filename"], row["content_type"], row["sha256"], row["blob_key"], row["size_bytes"]
    )


async def schema_ready(conn: asyncpg.Connection) -> bool:
    """True when the V2 tables and functions exist."""
    return bool(await conn.fetchval(SCHEMA_READY))


# --- the HNSW index of each dimension over V2 chunk vectors --------------------------------------

_V2_BUILD_LOCK_KEY = 0x72616732  # "rag2": V1's builds use another key, so neither waits for the other
V2_WALK_TEMPLATE = "v2_walk.template.sql"


@dataclass(frozen=True)
class V2IndexSpec(IndexSpec):
    """The HNSW index of one dimension on `ragoverlay_v2_chunks` (partial on `dims`, like V1's copy)."""

    @property
    def name(self) -> str:
        """Index name."""
        return f"ragoverlay_v2_hnsw_{self.dims}"

    @property
    def function_name(self) -> str:
        """The walk function over this index."""
        return f"ragoverlay_v2_vec_walk_{self.dims}"

    @property
    def function_sql(self) -> str:
        """The walk function's SQL: the template with this dimension filled in."""
        return read_template(V2_WALK_TEMPLATE).replace("__DIMS__", str(int(self.dims)))

    @property
    def create_sql(self) -> str:
        """CREATE INDEX CONCURRENTLY statement ($M and $EFC are replaced by integers of ours)."""
        return (
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.name} ON ragoverlay_v2_chunks "
            f"USING hnsw ((embedding::halfvec({self.dims})) halfvec_cosine_ops) "
            f"WITH (m = $M, ef_construction = $EFC) WHERE dims = {self.dims}"
        )


def v2_index_spec(dims: int) -> V2IndexSpec | None:
    """The V2 index to build for `dims`, or None when pgvector cannot index that many dimensions."""
    return V2IndexSpec(dims) if 0 < dims <= MAX_INDEX_DIMS else None


async def build_v2_index(
    conn: asyncpg.Connection, spec: V2IndexSpec, *, m: int, ef_construction: int, memory: str
) -> bool:
    """Build the index unless another session is; True when it is valid (with its walk function).

    `conn` must be a dedicated connection outside any transaction (CONCURRENTLY needs that).
    """
    async with try_advisory_lock(conn, _V2_BUILD_LOCK_KEY, spec.dims) as got:
        if not got:
            return False
        state = await index_state(conn, spec)
        if state == "building":  # we hold the lock: a crash left it invalid
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {spec.name}")
            state = "missing"
        if state == "missing":
            await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)
            await conn.execute("SET statement_timeout = 0")
            await conn.execute(
                spec.create_sql.replace("$M", str(int(m))).replace("$EFC", str(int(ef_construction)))
            )
        valid = await index_state(conn, spec) == "valid"
        if valid:
            await ensure_walk(conn, spec)
        return valid
