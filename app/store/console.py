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


_KNOWLEDGE_BASES = """
WITH v1 AS (
    SELECT owner AS namespace, count(*) AS files, coalesce(sum(chunk_count), 0) AS chunks,
           count(*) FILTER (WHERE status <> 'ready') AS not_ready, max(updated_at) AS last_upload
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
       e.run_id, e.chunks AS evidence_chunks, e.staged AS evidence_files, e.failed AS evidence_failed
FROM v1 FULL JOIN evidence e ON e.namespace = v1.namespace
ORDER BY 1
"""

_FILES = """
WITH active AS (
    SELECT max(run_id) AS run_id FROM ragoverlay_v2_runs
    WHERE collection_id = $1 AND namespace = $2 AND status = 'active'
)
SELECT f.file_id, f.filename, f.status, f.chunk_count, f.size_bytes, f.updated_at,
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
