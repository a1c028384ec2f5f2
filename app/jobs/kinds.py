"""The job kinds of the service's own core, and the shape of each payload.

Evidence search's kinds (`v2-index-file`, `v2-backfill`) are defined beside their handlers in
`app/evidence/kinds.py` and installed by `build_jobs` with the other kinds (app/jobs/setup.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

INDEX_UPLOAD = "index-upload"  # an upload accepted with 202: index it (V1)
REEMBED_MISSING = "reembed-missing"  # periodic: embed chunks stored without a vector
MAINTENANCE = "maintenance"  # periodic: one pass of a task of app/maintenance/


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
