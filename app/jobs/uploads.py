"""Uploads: indexed at once (`200`), or accepted as jobs (`202`) that a worker indexes.

`Uploads.accept(..., background=)` chooses. A job is opt-in only (`?async=true`, or
`EMBED_ASYNC_OVER_BYTES` for large files): LibreChat expects the synchronous `200` of `/embed`, and
gets it unless the operator chose otherwise. For a job the original is stored first, under its
SHA-256, so any replica can fetch it; the job then runs the same ingest as a synchronous upload, so
a failure leaves the file's previous version as it was.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from app.clients.blobs import BlobNotFound, BlobStore, blob_key
from app.config import Settings
from app.ingest.pipeline import EmbedOutcome, IngestService, SourceFile
from app.jobs.kinds import INDEX_UPLOAD, IndexUpload
from app.jobs.registry import JobRegistry, PermanentJobError, Progress
from app.jobs.service import JobService

UPLOAD_PRIORITY = 10  # uploads somebody waits for come before background work


@dataclass(frozen=True)
class Queued:
    """An upload accepted as a job: follow it at `/jobs/{job_id}`."""

    job_id: int


def wants_job(settings: Settings, *, asked: bool, size: int) -> bool:
    """True when an upload is to be a job: asked for, or larger than EMBED_ASYNC_OVER_BYTES (when set)."""
    limit = settings.embed_async_over_bytes
    return asked or (limit > 0 and size > limit)


def upload_key(owner: str, file_id: str) -> str:
    """The dedupe key of a file's upload job: a newer upload of the same file replaces a waiting one."""
    return f"upload:{owner}\x1f{file_id}"


class Uploads:
    """Accepts uploads, indexed now or as `index-upload` jobs, and runs those jobs."""

    def __init__(self, settings: Settings, ingest: IngestService, blobs: BlobStore, jobs: JobService) -> None:
        self.settings = settings
        self.ingest = ingest
        self.blobs = blobs
        self.jobs = jobs

    def install(self, registry: JobRegistry) -> None:
        """Register the kind."""
        registry.register(INDEX_UPLOAD, self.run, payload=IndexUpload, priority=UPLOAD_PRIORITY)

    async def accept(
        self,
        source: SourceFile,
        *,
        file_id: str,
        owner: str,
        uploader: str,
        storage_metadata: dict[str, Any] | None = None,
        background: bool = False,
    ) -> EmbedOutcome | Queued:
        """Index `source` now (its outcome), or store the original and queue its indexing (the job).

        `background`: the caller asked for a job (`?async=true`); a file over EMBED_ASYNC_OVER_BYTES
        becomes one anyway.
        """
        if not wants_job(self.settings, asked=background, size=source.size):
            return await self.ingest.ingest(
                source, file_id=file_id, owner=owner, uploader=uploader, storage_metadata=storage_metadata
            )
        await self.blobs.put_file(
            blob_key(source.sha256),
            source.path,
            content_type=source.content_type or "application/octet-stream",
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
        added = await self.jobs.enqueue(
            INDEX_UPLOAD, payload, dedupe_key=upload_key(owner, file_id), mode="replace", created_by=uploader
        )
        return Queued(added.id)

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
        progress(outcome.chunk_count, outcome.chunk_count, "stored")
        result: dict[str, Any] = {
            "file_id": outcome.file_id,
            "chunks": outcome.chunk_count,
            "embedded": outcome.embedded,
            "reused": outcome.reused,
        }
        # each derived index's state: evidence search searchable now, or queued and why
        for name, state in outcome.derived.items():
            result[name] = dict(state)
        # what /embed answers synchronously about a scan, when there is something to say
        if outcome.ocr_pages:
            result["ocr_pages"] = list(outcome.ocr_pages)
        if outcome.empty_pages:
            result["empty_pages"] = list(outcome.empty_pages)
        return result
