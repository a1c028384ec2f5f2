"""Uploads accepted as jobs (`202`): the original goes to the blob store, a worker indexes it.

Opt-in only (`?async=true`, or `EMBED_ASYNC_OVER_BYTES` for large files): LibreChat expects the
synchronous `200` of `/embed`, and gets it unless the operator chose otherwise. The original is
stored first, under its SHA-256, so any replica can fetch it; the job then runs the same ingest as
a synchronous upload, so a failure leaves the file's previous version as it was.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.clients.blobs import BlobNotFound, BlobStore, blob_key
from app.config import Settings
from app.ingest.pipeline import IngestService, SourceFile
from app.jobs.kinds import INDEX_UPLOAD, IndexUpload
from app.jobs.registry import JobRegistry, PermanentJobError, Progress
from app.jobs.service import JobService
from app.search.service import SearchService
from app.store.jobs import Enqueued

UPLOAD_PRIORITY = 10  # uploads somebody waits for come before background work


def wants_job(settings: Settings, *, asked: bool, size: int) -> bool:
    """True when an upload is to be indexed as a job: asked for, or larger than the set size."""
    limit = settings.embed_async_over_bytes
    return asked or (limit > 0 and size > limit)


def upload_key(owner: str, file_id: str) -> str:
    """The dedupe key of a file's upload job: a newer upload of the same file replaces a waiting one."""
    return f"upload:{owner}\x1f{file_id}"


async def accept_upload(
    jobs: JobService,
    blobs: BlobStore,
    source: SourceFile,
    *,
    file_id: str,
    owner: str,
    uploader: str,
    storage_metadata: dict[str, Any] | None,
) -> Enqueued:
    """Store the original, then queue its indexing; the job's id."""
    await blobs.put_file(
        blob_key(source.sha256), source.path, content_type=source.content_type or "application/octet-stream"
    )
    payload = IndexUpload(
        file_id=file_id,
        owner=owner,
        uploader=uploader,
        filename=source.filename,
        content_type=source.content_type,
        size=source.size,
        sha256=source.sha256,
        storage_metadata=storage_metadata,
    ).model_dump()
    return await jobs.enqueue(
        INDEX_UPLOAD, payload, dedupe_key=upload_key(owner, file_id), mode="replace", created_by=uploader
    )


class UploadJobs:
    """The `index-upload` handler: fetch the original, ingest it, note it for the search planner."""

    def __init__(
        self, settings: Settings, ingest: IngestService, blobs: BlobStore, search: SearchService
    ) -> None:
        self.settings = settings
        self.ingest = ingest
        self.blobs = blobs
        self.search = search

    def install(self, registry: JobRegistry) -> None:
        """Register the kind."""
        registry.register(INDEX_UPLOAD, self.run, payload=IndexUpload, priority=UPLOAD_PRIORITY)

    async def run(self, payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """Index one accepted upload."""
        job = IndexUpload.model_validate(payload)
        folder = self.settings.data_dir.resolve() / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"job-{uuid.uuid4().hex}.upload"
        progress(0, None, "fetching the original")
        try:
            try:
                await self.blobs.download(blob_key(job.sha256), path)
            except BlobNotFound as exc:
                raise PermanentJobError(
                    "the original is no longer in the blob store; upload the file again"
                ) from exc
            # then the ingest's stages: parsing, chunking, embedding (done/total: chunks), storing
            outcome = await self.ingest.ingest(
                SourceFile(path, job.filename, job.content_type, job.size, job.sha256),
                file_id=job.file_id,
                owner=job.owner,
                uploader=job.uploader,
                storage_metadata=job.storage_metadata,
                progress=progress,
            )
        finally:
            path.unlink(missing_ok=True)
        self.search.note_stored(outcome.record)
        progress(outcome.chunk_count, outcome.chunk_count, "stored")
        result: dict[str, Any] = {
            "file_id": outcome.file_id,
            "chunks": outcome.chunk_count,
            "embedded": outcome.embedded,
            "reused": outcome.reused,
        }
        # what /embed answers synchronously about a scan, when there is something to say
        if outcome.ocr_pages:
            result["ocr_pages"] = list(outcome.ocr_pages)
        if outcome.empty_pages:
            result["empty_pages"] = list(outcome.empty_pages)
        return result
