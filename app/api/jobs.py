"""`GET /jobs/{job_id}`: a caller's own job (an upload accepted with 202), its state and progress."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.deps import CurrentPrincipal, JobsDep
from app.errors import NotFound
from app.jobs.schemas import JobOut
from app.schemas import AUTHED_ERRORS, error_responses

router = APIRouter(tags=["jobs"])

MAX_JOB_ID = 2**63 - 1
JobIdPath = Annotated[int, Path(ge=1, le=MAX_JOB_ID, description="the id a 202 answer gave")]


@router.get("/jobs/{job_id}", response_model=JobOut, responses=error_responses(404, *AUTHED_ERRORS))
async def get_job(job_id: JobIdPath, principal: CurrentPrincipal, jobs: JobsDep) -> JobOut:
    """A job the caller asked for (admins: any job); 404 for anyone else's, as for a missing one."""
    # the ownership rule is in the statement: a job another caller asked for is never read
    row = await jobs.service.get(job_id, created_by=None if principal.is_admin else principal.namespace)
    if row is None:
        raise NotFound("No such job among the caller's")
    return JobOut.of(row)
