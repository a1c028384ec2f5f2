"""The job kinds the service knows, and the shape of each payload.

Registration point for the V2 index: its helper functions plug in through `register_v2` (called by
the lifespan, `app/jobs/setup.py`), one plain async function per kind:

    async def index_file(payload: V2IndexFile, progress: Progress) -> dict | None
    async def backfill(payload: V2Backfill, progress: Progress) -> dict | None

Until they are registered, no worker claims those kinds and `POST /admin/reindex` answers 409.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.registry import JobRegistry, Progress

INDEX_UPLOAD = "index-upload"  # an upload accepted with 202: index it (V1)
REEMBED_MISSING = "reembed-missing"  # periodic: embed chunks stored without a vector
MAINTENANCE = "maintenance"  # periodic: one pass of a task of app/maintenance/
V2_INDEX_FILE = "v2-index-file"  # index one file into the V2 index
V2_BACKFILL = "v2-backfill"  # index every file of a namespace into the V2 index


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IndexUpload(_Payload):
    """`index-upload`: an original already in the blob store, to index as `file_id` of `owner`."""

    file_id: str = Field(min_length=1)
    owner: str
    uploader: str
    filename: str
    content_type: str | None = None
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    storage_metadata: dict[str, Any] | None = None


class MaintenancePass(_Payload):
    """`maintenance`: the registry name of the task (`catalogue`, `vector-copy`, `hnsw-index-384`)."""

    task: str = Field(min_length=1)


class ReembedMissing(_Payload):
    """`reembed-missing`: no arguments (every store of chunks without vectors is swept)."""


class V2IndexFile(_Payload):
    """`v2-index-file`: (re)build the V2 index entries of one file."""

    file_id: str = Field(min_length=1)
    owner: str = Field(min_length=1, description="the namespace the file belongs to")
    force: bool = Field(False, description="rebuild even when the index is current for this file")


class V2Backfill(_Payload):
    """`v2-backfill`: index every file of a namespace into the V2 index."""

    namespace: str = Field(min_length=1)
    force: bool = Field(False, description="rebuild files whose index is current too")


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
