"""The job queue's SQL: each call one statement, most of them a function of `sql/50_jobs.sql`.

Queue-state changes that involve a job's advisory lock (claim, finish, heartbeat, reclaim) must run
on the worker's lease connection, the session that holds its locks; reads and enqueues may run on
any connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

JobStatus = Literal["queued", "running", "done", "failed"]
JOB_STATUSES: tuple[JobStatus, ...] = ("queued", "running", "done", "failed")
EnqueueMode = Literal["keep", "replace", "periodic"]
Outcome = Literal["done", "retry", "failed", "again", "released"]
NOTIFY_CHANNEL = "ragoverlay_jobs"

_COLUMNS = """
    id, queue, kind, payload, dedupe_key, priority, status, attempts, max_attempts, period_s, retry_s,
    run_after, created_at, created_by, started_at, heartbeat_at, finished_at, worker, progress_done,
    progress_total, progress_note, last_error, result, runs, failures, now() AS db_now
"""


@dataclass(frozen=True)
class JobRow:
    """One job as stored."""

    id: int
    queue: str
    kind: str
    payload: dict[str, Any]
    dedupe_key: str | None
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    period_s: float | None
    retry_s: float | None
    run_after: datetime
    created_at: datetime
    created_by: str | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    worker: str | None
    progress_done: int | None
    progress_total: int | None
    progress_note: str | None
    last_error: str | None
    result: dict[str, Any] | None
    runs: int
    failures: int
    db_now: datetime | None = None  # the database's clock when the row was read

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> JobRow:
        """A row of `ragoverlay_jobs` (any statement selecting its columns)."""
        values = dict(row.items())
        values["payload"] = _json(values.get("payload")) or {}
        values["result"] = _json(values.get("result"))
        values.setdefault("db_now", None)
        return cls(**values)

    @property
    def running_s(self) -> float | None:
        """Seconds since the current run started (running jobs read with `db_now`)."""
        if self.status != "running" or self.started_at is None or self.db_now is None:
            return None
        return max(0.0, (self.db_now - self.started_at).total_seconds())


def _json(value: Any) -> Any:
    # asyncpg hands jsonb out as text unless a codec is set; the pool sets none
    if isinstance(value, str):
        return json.loads(value)
    return value


@dataclass(frozen=True)
class Enqueued:
    """The job a request landed on, and whether it was added (False: joined a waiting one)."""

    id: int
    created: bool


async def enqueue(
    conn: asyncpg.Connection,
    *,
    queue: str,
    kind: str,
    payload: dict[str, Any],
    dedupe_key: str | None = None,
    mode: EnqueueMode = "keep",
    priority: int = 0,
    max_attempts: int,
    delay_s: float = 0.0,
    period_s: float | None = None,
    retry_s: float | None = None,
    created_by: str | None = None,
) -> Enqueued:
    """Add a job (or join the waiting one with the same dedupe key)."""
    row = await conn.fetchrow(
        "SELECT e.job_id, e.created FROM ragoverlay_job_enqueue("
        "p_queue => $1, p_kind => $2, p_payload => $3::jsonb, p_dedupe_key => $4, p_mode => $5, "
        "p_priority => $6, p_max_attempts => $7, p_delay_s => $8, p_period_s => $9, p_retry_s => $10, "
        "p_created_by => $11) AS e",
        queue,
        kind,
        json.dumps(payload),
        dedupe_key,
        mode,
        priority,
        max_attempts,
        delay_s,
        period_s,
        retry_s,
        created_by,
    )
    assert row is not None
    return Enqueued(int(row["job_id"]), bool(row["created"]))


async def claim(
    conn: asyncpg.Connection, *, queue: str, kinds: Sequence[str], worker: str, limit: int
) -> list[JobRow]:
    """Claim up to `limit` due jobs of `kinds` (on the lease connection: it takes their locks)."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM ragoverlay_job_claim("
        "p_queue => $1, p_kinds => $2::text[], p_worker => $3, p_limit => $4)",
        queue,
        list(kinds),
        worker,
        limit,
    )
    return [JobRow.from_record(r) for r in rows]


@dataclass(frozen=True)
class Beat:
    """A running job's heartbeat, with its progress when it changed (None: unchanged)."""

    job_id: int
    attempt: int
    done: int | None = None
    total: int | None = None
    note: str | None = None


async def finish(
    conn: asyncpg.Connection,
    *,
    job_id: int,
    worker: str,
    attempt: int,
    outcome: Outcome,
    delay_s: float = 0.0,
    error: str | None = None,
    result: dict[str, Any] | None = None,
    progress: Beat | None = None,
) -> str | None:
    """End a run (on the lease connection: it releases the lock); the new status, or None."""
    status = await conn.fetchval(
        "SELECT ragoverlay_job_finish(p_id => $1, p_worker => $2, p_attempt => $3, p_outcome => $4, "
        "p_delay_s => $5, p_error => $6, p_result => $7::jsonb, p_done => $8, p_total => $9, p_note => $10)",
        job_id,
        worker,
        attempt,
        outcome,
        delay_s,
        error,
        json.dumps(result) if result is not None else None,
        progress.done if progress else None,
        progress.total if progress else None,
        progress.note if progress else None,
    )
    return str(status) if status is not None else None


async def heartbeat(conn: asyncpg.Connection, *, worker: str, beats: Sequence[Beat]) -> set[int]:
    """Record heartbeats and progress; returns the ids the worker still owns."""
    if not beats:
        return set()
    rows = await conn.fetch(
        "SELECT h AS id FROM ragoverlay_job_heartbeat(p_worker => $1, p_ids => $2::bigint[], "
        "p_attempts => $3::integer[], p_done => $4::bigint[], p_total => $5::bigint[], "
        "p_note => $6::text[]) AS h",
        worker,
        [b.job_id for b in beats],
        [b.attempt for b in beats],
        [b.done for b in beats],
        [b.total for b in beats],
        [b.note for b in beats],
    )
    return {int(r["id"]) for r in rows}


@dataclass(frozen=True)
class Reclaimed:
    """A job taken back from a worker that is gone, and what became of it."""

    job_id: int
    kind: str
    status: str
    attempts: int


async def reclaim(
    conn: asyncpg.Connection, *, queue: str, stale_s: float, worker: str | None = None
) -> list[Reclaimed]:
    """Take back stale running jobs (or those of `worker`) whose lock nobody holds."""
    rows = await conn.fetch(
        "SELECT r.job_id, r.kind, r.status, r.attempts "
        "FROM ragoverlay_job_reclaim(p_queue => $1, p_stale_s => $2, p_worker => $3) AS r",
        queue,
        stale_s,
        worker,
    )
    return [Reclaimed(int(r["job_id"]), r["kind"], r["status"], int(r["attempts"])) for r in rows]


# Locks of job claims whose statement failed before the claim returned (the session keeps a lock
# a failed transaction took): released, except those of the runs the worker knows.
RELEASE_STRAY_LOCKS = """
    SELECT count(pg_advisory_unlock(1785686643, l.objid::bigint::integer))
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
      AND l.classid = 1785686643 AND l.objsubid = 2
      AND l.objid::bigint <> ALL (SELECT ragoverlay_job_lock_id(k) FROM unnest($1::bigint[]) AS k)
"""


async def release_stray_locks(conn: asyncpg.Connection, keep: Sequence[int]) -> int:
    """Release job locks this session holds for jobs other than `keep`; returns how many."""
    return int(await conn.fetchval(RELEASE_STRAY_LOCKS, list(keep)) or 0)


async def retry(conn: asyncpg.Connection, *, queue: str, job_id: int) -> str:
    """Send a failed job back to the queue: 'queued', 'missing', 'duplicate' or its status."""
    return str(await conn.fetchval("SELECT ragoverlay_job_retry(p_queue => $1, p_id => $2)", queue, job_id))


async def get(
    conn: asyncpg.Connection, *, queue: str, job_id: int, created_by: str | None = None
) -> JobRow | None:
    """Job `job_id` of `queue`; with `created_by`, only when that caller asked for it."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM ragoverlay_jobs "
        "WHERE queue = $1 AND id = $2 AND ($3::text IS NULL OR created_by = $3)",
        queue,
        job_id,
        created_by,
    )
    return JobRow.from_record(row) if row is not None else None


async def list_jobs(
    conn: asyncpg.Connection,
    *,
    queue: str,
    status: str | None = None,
    kind: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
    created_by: str | None = None,
) -> list[JobRow]:
    """Jobs of `queue`, newest first, optionally of one status, kind and caller, below id `before_id`."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM ragoverlay_jobs "
        "WHERE queue = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR kind = $3) "
        "AND ($4::bigint IS NULL OR id < $4) AND ($6::text IS NULL OR created_by = $6) "
        "ORDER BY id DESC LIMIT $5",
        queue,
        status,
        kind,
        before_id,
        limit,
        created_by,
    )
    return [JobRow.from_record(r) for r in rows]


@dataclass(frozen=True)
class QueueCounts:
    """How many jobs of a queue are in each state, and how late the most overdue waiting one is."""

    queued: int
    due: int  # queued and due now
    running: int
    done: int
    failed: int
    oldest_due_s: float | None  # seconds the most overdue due job has waited past its run_after


async def counts(conn: asyncpg.Connection, *, queue: str) -> QueueCounts:
    """Job counts per state of `queue`."""
    row = await conn.fetchrow(
        """
        SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
               count(*) FILTER (WHERE status = 'queued' AND run_after <= now()) AS due,
               count(*) FILTER (WHERE status = 'running') AS running,
               count(*) FILTER (WHERE status = 'done') AS done,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               extract(epoch FROM now() - min(run_after) FILTER (
                   WHERE status = 'queued' AND run_after <= now()))::float8 AS oldest_due_s
        FROM ragoverlay_jobs WHERE queue = $1
        """,
        queue,
    )
    assert row is not None
    return QueueCounts(
        queued=int(row["queued"]),
        due=int(row["due"]),
        running=int(row["running"]),
        done=int(row["done"]),
        failed=int(row["failed"]),
        oldest_due_s=float(row["oldest_due_s"]) if row["oldest_due_s"] is not None else None,
    )


async def count_waiting(conn: asyncpg.Connection, *, queue: str, kind: str, matching: dict[str, Any]) -> int:
    """Jobs of `kind` queued or running whose payload contains `matching` (jsonb containment)."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM ragoverlay_jobs WHERE queue = $1 AND kind = $2 "
            "AND status IN ('queued', 'running') AND payload @> $3::jsonb",
            queue,
            kind,
            json.dumps(matching),
        )
        or 0
    )


async def raise_priority(conn: asyncpg.Connection, *, queue: str, keys: Sequence[str], priority: int) -> int:
    """Give the waiting jobs with these dedupe keys at least `priority`; how many were raised."""
    result = await conn.execute(
        "UPDATE ragoverlay_jobs SET priority = $3 "
        "WHERE queue = $1 AND status = 'queued' AND dedupe_key = ANY ($2::text[]) AND priority < $3",
        queue,
        list(keys),
        priority,
    )
    return int(result.split()[-1])


async def prune(conn: asyncpg.Connection, *, queue: str, done_days: float, failed_days: float) -> int:
    """Delete finished jobs older than their retention (done and failed apart); returns how many."""
    status = await conn.execute(
        """
        DELETE FROM ragoverlay_jobs
        WHERE queue = $1 AND (
            (status = 'done' AND finished_at < now() - $2::float8 * interval '1 day')
            OR (status = 'failed' AND finished_at < now() - $3::float8 * interval '1 day'))
        """,
        queue,
        done_days,
        failed_days,
    )
    return int((status or "0").split()[-1])


async def versions(conn: asyncpg.Connection) -> dict[str, str | None]:
    """What the status page reports of the database: server, pgvector, latest migration."""
    row = await conn.fetchrow(
        """
        SELECT current_setting('server_version') AS postgres,
               (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector,
               (SELECT max(version) FROM ragoverlay_migrations)::text AS schema
        """
    )
    assert row is not None
    return {"postgres": row["postgres"], "pgvector": row["pgvector"], "schema": row["schema"]}
