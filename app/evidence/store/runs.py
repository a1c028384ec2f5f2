"""V2 index runs and their expected files: create, stage (link), activate, fail; the run errors.

A run's content is exactly its staged `ragoverlay_v2_run_files` rows, each pointing at a document
(`app/evidence/store/documents.py`). Run bookkeeping is admin data: it takes ids, not a scope.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from app.evidence.store.calls import named_insert
from app.evidence.store.documents import DocumentSource
from app.store import queries
from app.store.db import rows_affected

RunStatus = Literal["running", "active", "failed", "abandoned"]

FileState = Literal["pending", "staging", "staged", "failed"]

RUN_STATUSES: tuple[RunStatus, ...] = ("running", "active", "failed", "abandoned")

FILE_STATES: tuple[FileState, ...] = ("pending", "staging", "staged", "failed")


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


class FileChanged(RunError):
    """The file was uploaded again while its staging ran: its document shows a replaced version."""


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


# --- statements ----------------------------------------------------------------------------------


_RUN_COLUMNS = """
    run_id, namespace, index_version, extractor_version, embedding_model, embedding_dim, expected_files,
    status, origin, created_by, error, created_at, updated_at, activated_at, finished_at, settings::text
"""


@dataclass(frozen=True, slots=True)
class RunValues:
    """A new `ragoverlay_v2_runs` row: one field per column, bound by its name."""

    collection_id: uuid.UUID
    namespace: str
    index_version: str
    extractor_version: str
    embedding_model: str
    embedding_dim: int | None
    expected_files: int
    origin: str
    created_by: str | None
    settings: str  # JSON


RUN_INSERT = named_insert("ragoverlay_v2_runs", RunValues)
INSERT_RUN = f"{RUN_INSERT.sql} RETURNING {_RUN_COLUMNS}"

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

# the rule is the SQL function's (evidence/store/sql/50_v2_index.sql): /query_v2's statement re-checks it
ACTIVE_RUN = f"""
    SELECT {_RUN_COLUMNS}
    FROM ragoverlay_v2_active_run(p_collection => $1, p_namespace => $2, p_index_version => $3)
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
        values = RunValues(
            collection_id=collection_id,
            namespace=namespace,
            index_version=index_version,
            extractor_version=extractor_version,
            embedding_model=embedding_model,
            embedding_dim=embedding_dim,
            expected_files=len(files),
            origin=origin,
            created_by=created_by,
            settings=json.dumps(dict(settings or {}), sort_keys=True),
        )
        row = await conn.fetchrow(INSERT_RUN, *RUN_INSERT.bind(values))
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


# the file's catalogue version, read under the lock an upload of the file holds until its commit
# (queries.LOCK_FILE): a staging that checks here cannot interleave with a re-upload
CATALOGUE_VERSION = """
    SELECT sha256 FROM ragoverlay_files WHERE collection_id = $1 AND file_id = $2 AND owner = $3
"""


async def require_current_version(
    conn: asyncpg.Connection, collection_id: uuid.UUID, owner: str, file_id: str, version: str | None
) -> None:
    """Refuse (FileChanged) to link a document whose version is not the file's current one.

    Call inside the transaction that links it: the lock taken here is the one a re-upload of the
    file holds until it commits, so the answer stays true until this transaction ends.
    """
    await conn.execute(queries.LOCK_FILE, str(collection_id), file_id, owner)
    current = await conn.fetchval(CATALOGUE_VERSION, collection_id, file_id, owner)
    if current is not None and current != version:
        raise FileChanged(
            f"File {file_id} was uploaded again while it was staged; its new version is staged instead"
        )
