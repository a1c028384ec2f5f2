"""Admin routes (admins only: RAG_ADMIN_USER_IDS or a token with role ADMIN; 403 otherwise).

`GET /admin/status` the queue, running jobs, unsearchable chunks, versions and maintenance;
`GET /admin/jobs` (and one job), `POST /admin/jobs/{id}/retry` for a parked job,
`POST /admin/reindex` to (re)build a namespace's V2 index as a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from app.api.jobs import JobIdPath
from app.deps import AdminPrincipal, EvidenceDep, JobsDep
from app.errors import NotFound, RagError
from app.jobs.schemas import (
    AdminJobOut,
    AdminStatus,
    JobList,
    MissingOut,
    QueueOut,
    ReindexAccepted,
    RunningOut,
    TaskOut,
    WorkerOut,
)
from app.safe_text import safe_str
from app.schemas import AUTHED_ERRORS, ErrorResponse, error_responses

if TYPE_CHECKING:
    _Kind = str
    _Namespace = str
else:
    _Kind = safe_str(min_length=1, max_length=100)
    _Namespace = safe_str(min_length=1, max_length=512)

router = APIRouter(prefix="/admin", tags=["admin"])


class Conflict(RagError):
    """The job is not in a state that allows this."""

    status_code = 409
    default_detail = "Conflict"


def _doc(code: int, text: str) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse, "description": text}}


_ADMIN = error_responses(403, *AUTHED_ERRORS)


@router.get("/status", response_model=AdminStatus, responses=_ADMIN)
async def admin_status(request: Request, principal: AdminPrincipal, jobs: JobsDep) -> AdminStatus:
    """Queue depth, running jobs with progress, documents with unsearchable chunks, versions, tasks."""
    stats = await jobs.service.queue_stats()
    missing = await jobs.missing()
    versions: dict[str, str | None] = {"service": request.app.version, **await jobs.service.versions()}
    c = stats.counts
    return AdminStatus(
        queue=QueueOut(
            queued=c.queued,
            due=c.due,
            running=c.running,
            done=c.done,
            failed=c.failed,
            oldest_due_s=c.oldest_due_s,
        ),
        running=[
            RunningOut(
                id=r.id,
                kind=r.kind,
                attempt=r.attempts,
                done=r.progress_done,
                total=r.progress_total,
                note=r.progress_note,
                running_s=r.running_s,
                worker=r.worker,
            )
            for r in stats.running
        ],
        worker=WorkerOut(
            name=stats.worker,
            concurrency=stats.concurrency,
            running=len(stats.local_running),
            kinds=jobs.registry.names(),
        ),
        missing_vectors={
            name: MissingOut(documents=m.documents, chunks=m.chunks) for name, m in missing.items()
        },
        documents_missing_vectors=sum(m.documents for m in missing.values()),
        versions=versions,
        maintenance=[
            TaskOut(
                name=t.name,
                state=t.state,
                progress=t.progress,
                interval_s=t.interval,
                last_error=t.last_error,
                last_run=t.last_run,
                last_duration_s=t.last_duration_s,
                runs=t.runs,
                failures=t.failures,
            )
            for t in jobs.maintenance.registry.statuses()
        ],
    )


@router.get("/jobs", response_model=JobList, responses=_ADMIN)
async def admin_jobs(
    principal: AdminPrincipal,
    jobs: JobsDep,
    status: Annotated[
        Literal["queued", "running", "done", "failed"] | None, Query(description="only these")
    ] = None,
    kind: Annotated[_Kind | None, Query(description="only jobs of this kind")] = None,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1, description="ids below this (paging)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    """Jobs, newest first, optionally of one status (`failed`: the parked ones) and kind."""
    rows = await jobs.service.list_jobs(status=status, kind=kind, before_id=before, limit=limit)
    return JobList(
        jobs=[AdminJobOut.of(r) for r in rows], next_before=rows[-1].id if len(rows) == limit else None
    )


@router.get("/jobs/{job_id}", response_model=AdminJobOut, responses={**_ADMIN, **error_responses(404)})
async def admin_job(job_id: JobIdPath, principal: AdminPrincipal, jobs: JobsDep) -> AdminJobOut:
    """One job, everything stored about it."""
    row = await jobs.service.get(job_id)
    if row is None:
        raise NotFound("No such job")
    return AdminJobOut.of(row)


@router.post(
    "/jobs/{job_id}/retry",
    response_model=AdminJobOut,
    responses={
        **_ADMIN,
        **error_responses(404),
        **_doc(409, "The job is not failed (only parked jobs are retried), or the same work already waits"),
    },
)
async def admin_retry(job_id: JobIdPath, principal: AdminPrincipal, jobs: JobsDep) -> AdminJobOut:
    """Send a parked (failed) job back to the queue with all its attempts anew."""
    outcome = await jobs.service.retry(job_id)
    if outcome == "missing":
        raise NotFound("No such job")
    if outcome == "duplicate":
        raise Conflict("The same work is already waiting as another job; that one will run")
    if outcome != "queued":
        raise Conflict(f"The job is {outcome}, not failed: only parked jobs are retried")
    row = await jobs.service.get(job_id)
    if row is None:  # pruned between the two statements: as good as missing
        raise NotFound("No such job")
    return AdminJobOut.of(row)


@router.post(
    "/reindex",
    status_code=202,
    response_model=ReindexAccepted,
    responses=_ADMIN,
)
async def admin_reindex(
    principal: AdminPrincipal,
    jobs: JobsDep,
    evidence: EvidenceDep,
    namespace: Annotated[_Namespace, Query(description="the owner whose files to index: a user or Agent id")],
    force: Annotated[
        bool,
        Query(
            description="a run that links no earlier document: every file is parsed and embedded again, "
            "unchanged ones too"
        ),
    ] = False,
) -> ReindexAccepted:
    """Queue the V2 backfill of a namespace: a new run of all its files, one job per file, activated
    when every file is staged (a waiting request for the namespace is joined, not doubled).

    Without `force`, unchanged files link the documents they already have (no parsing, no embedding)
    and changed ones are rebuilt; with `force`, every file is parsed and embedded again."""
    added = await evidence.reindex(namespace=namespace, force=force, created_by=principal.namespace)
    row = await jobs.service.get(added.id)
    if row is None:
        raise NotFound("The job was removed before it could be read")
    return ReindexAccepted(job=AdminJobOut.of(row), created=added.created)
