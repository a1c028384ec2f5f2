"""Wire models of the job routes: a caller's own job (`GET /jobs/{id}`), and the admin views."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.store.jobs import JobRow

# Errors written by the service itself (a RagError's detail, the deadline, a reclaim): shown to
# the caller who asked for the job. Anything else may hold a library's text: admins only.
_OWN_ERROR_PREFIXES = (
    "deadline:",
    "permanent:",
    "abandoned:",
    "interrupted:",
    "PayloadTooLarge:",
    "UnsupportedFileType:",
    "NoExtractableText:",
    "InvalidInput:",
    "EmbeddingProviderError:",
    "BlobStoreError:",
    "BlobNotFound:",
    "UpstreamUnavailable:",
    "ServiceUnavailable:",
)


def public_error(error: str | None) -> str | None:
    """The error a job's caller may see: the service's own sentences, else a generic one."""
    if error is None:
        return None
    if error.startswith(_OWN_ERROR_PREFIXES):
        return error
    return "the job failed unexpectedly; an admin can see why (GET /admin/jobs)"


class JobProgress(BaseModel):
    """How far a job is: `done` of `total` units (chunks, files, stages), and a note."""

    done: int | None
    total: int | None
    note: str | None


class JobOut(BaseModel):
    """A job as its caller sees it."""

    id: int
    kind: str
    status: Literal["queued", "running", "done", "failed"] = Field(
        description="queued (waiting, also between retries), running, done, or failed (parked: an admin "
        "retries it by hand)"
    )
    attempts: int = Field(description="runs started, a run abandoned by a stopped worker included")
    max_attempts: int
    created_at: datetime
    run_after: datetime = Field(description="a queued job waits until then (a retry's backoff)")
    started_at: datetime | None
    finished_at: datetime | None
    running_s: float | None = Field(description="seconds the current run has taken (running jobs)")
    progress: JobProgress | None
    error: str | None = Field(description="why the last run failed")
    result: dict[str, Any] | None

    @classmethod
    def of(cls, row: JobRow) -> JobOut:
        """The caller's view of a job row."""
        return cls(**_common(row), error=public_error(row.last_error))


class AdminJobOut(JobOut):
    """A job as an admin sees it: everything stored."""

    payload: dict[str, Any]
    dedupe_key: str | None
    priority: int
    periodic_s: float | None = Field(description="seconds between passes of a periodic job")
    worker: str | None = Field(description="host:pid:id of the worker that runs (or last ran) it")
    created_by: str | None
    heartbeat_at: datetime | None
    runs: int
    failures: int

    @classmethod
    def of(cls, row: JobRow) -> AdminJobOut:
        """The admin's view of a job row."""
        return cls(
            **_common(row),
            error=row.last_error,
            payload=row.payload,
            dedupe_key=row.dedupe_key,
            priority=row.priority,
            periodic_s=row.period_s,
            worker=row.worker,
            created_by=row.created_by,
            heartbeat_at=row.heartbeat_at,
            runs=row.runs,
            failures=row.failures,
        )


def _common(row: JobRow) -> dict[str, Any]:
    progress = None
    if row.progress_done is not None or row.progress_total is not None or row.progress_note:
        progress = JobProgress(done=row.progress_done, total=row.progress_total, note=row.progress_note)
    return {
        "id": row.id,
        "kind": row.kind,
        "status": row.status,
        "attempts": row.attempts,
        "max_attempts": row.max_attempts,
        "created_at": row.created_at,
        "run_after": row.run_after,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "running_s": row.running_s,
        "progress": progress,
        "result": row.result,
    }


class JobAccepted(BaseModel):
    """202 of an upload accepted as a job: poll `status_url` until the job is done or failed."""

    job_id: int
    state: Literal["queued"] = "queued"
    file_id: str
    filename: str
    status_url: str = Field(description="GET it (same token) for the job's state and progress")


class JobList(BaseModel):
    """`GET /admin/jobs`: newest first."""

    jobs: list[AdminJobOut]
    next_before: int | None = Field(description="pass as `before` for the next page (None: no more)")


class QueueOut(BaseModel):
    """How many jobs are in each state."""

    queued: int = Field(description="waiting, due now or later (retries wait their backoff)")
    due: int = Field(description="queued and due now: the queue's depth")
    running: int
    done: int
    failed: int = Field(description="parked: retried only by hand")
    oldest_due_s: float | None = Field(description="seconds the longest-waiting due job has waited")


class RunningOut(BaseModel):
    """A running job, on whichever replica."""

    id: int
    kind: str
    attempt: int
    done: int | None
    total: int | None
    note: str | None
    running_s: float | None
    worker: str | None


class WorkerOut(BaseModel):
    """This process's worker."""

    name: str | None = Field(description="None: INDEXER_CONCURRENCY=0, this replica runs no jobs")
    concurrency: int
    running: int
    kinds: list[str]


class MissingOut(BaseModel):
    """Chunks stored without a vector (unsearchable by meaning), per store."""

    documents: int = Field(description="documents with at least one such chunk")
    chunks: int


class TaskOut(BaseModel):
    """A maintenance task's status in this process."""

    name: str
    state: str
    progress: str
    interval_s: float
    last_error: str | None
    last_run: datetime | None
    last_duration_s: float | None
    runs: int
    failures: int


class AdminStatus(BaseModel):
    """`GET /admin/status`."""

    queue: QueueOut
    running: list[RunningOut]
    worker: WorkerOut
    missing_vectors: dict[str, MissingOut] = Field(description="per store: v1 (rag_api's table), v2 ...")
    documents_missing_vectors: int = Field(description="documents with unsearchable chunks, all stores")
    versions: dict[str, str | None]
    maintenance: list[TaskOut]


class ReindexAccepted(BaseModel):
    """`POST /admin/reindex`: the backfill job (a running or waiting one is joined)."""

    job: AdminJobOut
    created: bool = Field(description="False: the same backfill was already waiting")
