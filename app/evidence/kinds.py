"""Evidence search's job kinds and the shape of each payload.

They are handled by `app/evidence/jobs.py` and plug in through `register_v2` (called when the job
system installs its kinds, app/jobs/setup.py), one plain async function per kind:

    async def index_file(payload: V2IndexFile, progress: Progress) -> dict | None
    async def backfill(payload: V2Backfill, progress: Progress) -> dict | None
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.registry import JobRegistry, Progress

V2_INDEX_FILE = "v2-index-file"  # index one file into the V2 index
V2_BACKFILL = "v2-backfill"  # index every file of a namespace into the V2 index


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class V2IndexFile(_Payload):
    """`v2-index-file`: one file of a V2 run: survey it, or stage it.

    With `run_id`, a file of that run (a backfill's); without, a new upload: the file is staged into
    every running and active run of `owner`.
    """

    file_id: str = Field(min_length=1)
    owner: str = Field(min_length=1, description="the namespace the file belongs to")
    run_id: int | None = Field(None, ge=1, description="the run (None: every open run of the owner)")
    survey: bool = Field(False, description="only read the file's repeated blocks (a backfill's first pass)")
    after_survey: bool = Field(False, description="stage once the run's survey jobs have ended")


class V2Backfill(_Payload):
    """`v2-backfill`: index every file of a namespace (or `file_ids`) into a new V2 run.

    With `run_id`, (re)plan an existing run instead: one job per file not staged yet.
    """

    namespace: str = Field(min_length=1)
    force: bool = Field(False, description="parse and embed every file again (link no earlier document)")
    run_id: int | None = Field(None, ge=1, description="a run to finish (resume) instead of a new one")
    index_version: str | None = Field(None, min_length=1, max_length=200)
    file_ids: list[str] | None = Field(None, min_length=1)
    activate: bool = Field(True, description="activate the run once every file is staged")
    first_run: bool = Field(
        False,
        description="queued by a namespace's first upload: start a run only if the namespace still has "
        "none running or active when the job runs (it never supersedes a run)",
    )


V2IndexFileFn = Callable[[V2IndexFile, Progress], Awaitable[dict[str, Any] | None]]
V2BackfillFn = Callable[[V2Backfill, Progress], Awaitable[dict[str, Any] | None]]


def register_v2(
    registry: JobRegistry, *, index_file: V2IndexFileFn | None = None, backfill: V2BackfillFn | None = None
) -> None:
    """Plug the V2 index's functions into the queue as kinds `v2-index-file` and `v2-backfill`."""
    if index_file is not None:
        file_fn = index_file

        async def run_index_file(payload: dict[str, Any], progress: Progress) -> dict[str, Any] | None:
            return await file_fn(V2IndexFile.model_validate(payload), progress)

        registry.register(V2_INDEX_FILE, run_index_file, payload=V2IndexFile, priority=5)
    if backfill is not None:
        backfill_fn = backfill

        async def run_backfill(payload: dict[str, Any], progress: Progress) -> dict[str, Any] | None:
            return await backfill_fn(V2Backfill.model_validate(payload), progress)

        registry.register(V2_BACKFILL, run_backfill, payload=V2Backfill)
