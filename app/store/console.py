"""What the operator console reads (app/console/): knowledge bases and their files, for admins only.

Every namespace of the collection is listed: the console is an admin's view, as `/admin/status` and
`/v2/runs` are. Nothing here is a search: no caller's scope applies, and nothing is returned to a
non-admin (the console's routes refuse everyone else before these run).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import asyncpg

FileSort = Literal["name", "updated", "chunks", "status"]
_ORDER: dict[str, str] = {
    "name": "f.filename, f.file_id",
    "updated": "f.updated_at DESC, f.file_id",
    "chunks": "f.chunk_count DESC, f.file_id",
    "status": "f.status DESC, f.filename, f.file_id",
}


@dataclass(frozen=True)
class KnowledgeBase:
    """One namespace: its files, V1 chunks, the evidence index's state, the last upload."""

    namespace: str
    files: int
    v1_chunks: int
    not_ready: int  # files whose V1 status is not `ready`
    last_upload: datetime | None
    run_id: int | None  # the active evidence run
    evidence_chunks: int | None
    evidence_files: int | None  # files staged in the active run
    evidence_failed: int | None  # files of the active run that failed, with their reasons in `failures`
    ocr_files: int  # files with pages OCR read (their text is OCR's reading)
    empty_page_files: int  # files with pages that show a picture but gave no text


@dataclass(frozen=True)
class FileRow:
    """One file of a namespace as the console lists it."""

    file_id: str
    filename: str
    status: str
    chunks: int
    size_bytes: int | None
    updated_at: datetime
    evidence_state: str | None  # its state in the active run (None: not in it)
    evidence_chunks: int | None
    evidence_error: str | None
    ocr_pages: list[int] | None  # the pages OCR read (None: not recorded, an older upload)
    empty_pages: list[int] | None  # the pages with a picture but no text


_KNOWLEDGE_BASES = """
WITH v1 AS (
    SELECT owner AS namespace, count(*) AS files, coalesce(sum(chunk_count), 0) AS chunks,
           count(*) FILTER (WHERE status <> 'ready') AS not_ready, max(updated_at) AS last_upload,
           count(*) FILTER (WHERE cardinality(ocr_pages) > 0) AS ocr_files,
           count(*) FILTER (WHERE cardinality(empty_pages) > 0) AS empty_page_files
    FROM ragoverlay_files WHERE collection_id = $1 GROUP BY owner
), active AS (
    SELECT r.namespace, max(r.run_id) AS run_id FROM ragoverlay_v2_runs r
    WHERE r.collection_id = $1 AND r.status = 'active' GROUP BY r.namespace
), evidence AS (
    SELECT a.namespace, a.run_id, coalesce(sum(rf.chunks), 0) AS chunks,
           count(*) FILTER (WHERE rf.state = 'staged') AS staged,
           count(*) FILTER (WHERE rf.state = 'failed') AS failed
    FROM active a LEFT JOIN ragoverlay_v2_run_files rf ON rf.run_id = a.run_id
    GROUP BY a.namespace, a.run_id
)
SELECT coalesce(v1.namespace, e.namespace) AS namespace, coalesce(v1.files, 0) AS files,
       coalesce(v1.chunks, 0) AS v1_chunks, coalesce(v1.not_ready, 0) AS not_ready, v1.last_upload,
       e.run_id, e.chunks AS evidence_chunks, e.staged AS evidence_files, e.failed AS evidence_failed,
       coalesce(v1.ocr_files, 0) AS ocr_files, coalesce(v1.empty_page_files, 0) AS empty_page_files
FROM v1 FULL JOIN evidence e ON e.namespace = v1.namespace
ORDER BY 1
"""

_FILES = """
WITH active AS (
    SELECT max(run_id) AS run_id FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND namespace = $2 AND status = 'active'
)
SELECT f.file_id, f.filename, f.status, f.chunk_count, f.size_bytes, f.updated_at, f.ocr_pages, f.empty_pages,
       rf.state AS evidence_state, rf.chunks AS evidence_chunks, rf.error AS evidence_error,
       count(*) OVER () AS total
FROM ragoverlay_files f
LEFT JOIN active a ON true
LEFT JOIN ragoverlay_v2_run_files rf ON rf.run_id = a.run_id AND rf.file_id = f.file_id
WHERE f.collection_id = $1 AND f.owner = $2
  AND ($3::text IS NULL OR f.filename ILIKE '%' || $3 || '%' OR f.file_id ILIKE '%' || $3 || '%')
ORDER BY {order}
LIMIT $4 OFFSET $5
"""


async def knowledge_bases(conn: asyncpg.Connection, collection_id: uuid.UUID) -> list[KnowledgeBase]:
    """Every namespace with files or an active evidence run."""
    rows = await conn.fetch(_KNOWLEDGE_BASES, collection_id)
    return [KnowledgeBase(**dict(row)) for row in rows]


async def files(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    namespace: str,
    *,
    search: str | None,
    sort: FileSort,
    offset: int,
    limit: int,
) -> tuple[list[FileRow], int]:
    """One page of a namespace's files (name or id containing `search`), and how many match in all."""
    # the ORDER BY comes from the fixed table above, never from the request's text
    sql = _FILES.format(order=_ORDER[sort])
    pattern = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") if search else None
    rows = await conn.fetch(sql, collection_id, namespace, pattern, limit, offset)
    total = int(rows[0]["total"]) if rows else 0
    return [
        FileRow(
            file_id=r["file_id"],
            filename=r["filename"],
            status=r["status"],
            chunks=r["chunk_count"],
            size_bytes=r["size_bytes"],
            updated_at=r["updated_at"],
            evidence_state=r["evidence_state"],
            evidence_chunks=r["evidence_chunks"],
            evidence_error=r["evidence_error"],
            ocr_pages=r["ocr_pages"],
            empty_pages=r["empty_pages"],
        )
        for r in rows
    ], total


async def namespace_file_ids(
    conn: asyncpg.Connection, collection_id: uuid.UUID, namespace: str, limit: int
) -> list[str]:
    """Up to `limit` file ids of a namespace, newest first: what the console's search page asks over."""
    rows = await conn.fetch(
        "SELECT file_id FROM ragoverlay_files WHERE collection_id = $1 AND owner = $2 "
        "ORDER BY updated_at DESC, file_id LIMIT $3",
        collection_id,
        namespace,
        limit,
    )
    return [r["file_id"] for r in rows]


@dataclass(frozen=True)
class RunRow:
    """One evidence index run with how far its files got."""

    run_id: int
    namespace: str
    status: str
    origin: str
    created_by: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None
    expected_files: int
    staged: int
    staging: int
    pending: int
    failed: int
    chunks: int
    failures: list[tuple[str, str | None]]  # (file id, reason) of up to RUN_FAILURES failed files
    running_s: float  # seconds since the run started (the database's clock)

    @property
    def expected(self) -> int:
        """Files the run expects: its count, or more when files joined it since."""
        return max(self.expected_files, self.staged + self.staging + self.pending + self.failed)

    @property
    def eta_s(self) -> float | None:
        """Seconds left for a building run at its pace so far (None: not building, or no pace yet)."""
        if self.status != "running" or not self.staged or self.staged >= self.expected:
            return None
        return self.running_s * (self.expected - self.staged - self.failed) / self.staged


RUN_FAILURES = 20

_RUNS = """
SELECT r.run_id, r.namespace, r.status, r.origin, r.created_by, r.error, r.created_at, r.updated_at,
       r.activated_at, r.expected_files, extract(epoch FROM now() - r.created_at)::float8 AS running_s,
       count(rf.file_id) FILTER (WHERE rf.state = 'staged') AS staged,
       count(rf.file_id) FILTER (WHERE rf.state = 'staging') AS staging,
       count(rf.file_id) FILTER (WHERE rf.state = 'pending') AS pending,
       count(rf.file_id) FILTER (WHERE rf.state = 'failed') AS failed,
       coalesce(sum(rf.chunks) FILTER (WHERE rf.state = 'staged'), 0) AS chunks,
       (SELECT coalesce(array_agg(ARRAY[x.file_id, coalesce(x.error, '')] ORDER BY x.file_id), '{}')
        FROM (SELECT file_id, error FROM ragoverlay_v2_run_files
              WHERE run_id = r.run_id AND state = 'failed' ORDER BY file_id LIMIT $3) x) AS failures
FROM (SELECT * FROM ragoverlay_v2_runs WHERE collection_id = $1 ORDER BY run_id DESC LIMIT $2) r
LEFT JOIN ragoverlay_v2_run_files rf ON rf.run_id = r.run_id
GROUP BY r.run_id, r.namespace, r.status, r.origin, r.created_by, r.error, r.created_at, r.updated_at,
         r.activated_at, r.expected_files
ORDER BY r.run_id DESC
"""


async def runs(
    conn: asyncpg.Connection, collection_id: uuid.UUID, limit: int, failures: int = RUN_FAILURES
) -> list[RunRow]:
    """The `limit` newest evidence runs with their files' states, chunks and first `failures` failed
    files (0: none listed, as the runs page's two-second poll needs none)."""
    rows = await conn.fetch(_RUNS, collection_id, limit, failures)
    out = []
    for r in rows:
        values = {k: r[k] for k in r.keys() if k != "failures"}
        failed = [(pair[0], pair[1] or None) for pair in (r["failures"] or [])]
        out.append(RunRow(**values, failures=failed))
    return out


@dataclass(frozen=True)
class Hour:
    """One hour of ingestion: files and V1 chunks stored, evidence chunks staged."""

    hour: datetime
    files: int
    v1_chunks: int
    evidence_chunks: int


# A file counts at its last upload (a replaced version's work is not kept anywhere); evidence chunks
# count where a run staged them from a parse (not where it linked a document another run made).
_THROUGHPUT = """
WITH hours AS (
    SELECT generate_series(date_trunc('hour', now()) - make_interval(hours => $2 - 1),
                           date_trunc('hour', now()), interval '1 hour') AS hour
), v1 AS (
    SELECT date_trunc('hour', updated_at) AS hour, count(*) AS files, sum(chunk_count) AS chunks
    FROM ragoverlay_files
    WHERE collection_id = $1 AND updated_at >= date_trunc('hour', now()) - make_interval(hours => $2 - 1)
    GROUP BY 1
), evidence AS (
    SELECT date_trunc('hour', rf.updated_at) AS hour, sum(rf.chunks) AS chunks
    FROM ragoverlay_v2_run_files rf JOIN ragoverlay_v2_runs r ON r.run_id = rf.run_id
    WHERE r.collection_id = $1 AND rf.state = 'staged' AND NOT rf.linked
      AND rf.updated_at >= date_trunc('hour', now()) - make_interval(hours => $2 - 1)
    GROUP BY 1
)
SELECT h.hour, coalesce(v1.files, 0) AS files, coalesce(v1.chunks, 0) AS v1_chunks,
       coalesce(evidence.chunks, 0) AS evidence_chunks
FROM hours h LEFT JOIN v1 ON v1.hour = h.hour LEFT JOIN evidence ON evidence.hour = h.hour
ORDER BY h.hour
"""


async def throughput(conn: asyncpg.Connection, collection_id: uuid.UUID, hours: int) -> list[Hour]:
    """Ingestion per hour over the last `hours` hours (the current one included), oldest first."""
    rows = await conn.fetch(_THROUGHPUT, collection_id, hours)
    return [Hour(r["hour"], int(r["files"]), int(r["v1_chunks"]), int(r["evidence_chunks"])) for r in rows]
