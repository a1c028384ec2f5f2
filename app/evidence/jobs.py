"""The V2 index on the job queue: backfills as one job per file, new uploads, self-healing.

- `v2-backfill` plans a run and ends: it starts a backfill run of the namespace (or takes the run it
  names), then queues, for every file not staged yet, a survey job (when the run has enough files for
  repeated blocks to count, `RAG_V2__INDEX__BOILERPLATE__MIN_DOCUMENTS`) and a stage job. So the job deadline
  (`INDEXER_JOB_TIMEOUT_MS`) bounds each file, not the namespace.
- `v2-index-file` with `survey`: reads one file for its repeated-block fingerprints (kept on the
  run). Without: stages one file of the run, once the run's survey jobs have ended (a stage job that
  finds one still waiting is released, uncounted, and comes back shortly); then, when every file of
  the run is staged, activates it. Every file job checks; the activation re-checks under the run's
  row lock, so exactly one of them activates it, on whichever replica.
- `v2-index-file` without `run_id`: a new upload of a namespace in `RAG_V2_NAMESPACE_IDS`, staged into
  each of its running and active runs (queued by the upload; the upload never waits for it or fails
  because of it).

After a crash the queue takes the killed worker's job back (`INDEXER_STALE_TIMEOUT`): a file job run
again skips a file already staged, and a backfill job run again finds the run it started (the run
records the job's id). Progress lives in the run's file table (`GET /v2/runs/{run_id}`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from app.clients.embeddings import reporting_batches
from app.errors import RagError
from app.evidence.index.backfill import (
    complete_run,
    find_backfill_run,
    stage_upload,
    start_backfill_run,
    start_first_run,
)
from app.evidence.index.context import V2Context
from app.evidence.index.embedding import reembed_missing
from app.evidence.index.lifecycle import ProfileMismatch, RunStatus, describe_run, forced, run_status
from app.evidence.index.staging import index_file, survey_file
from app.evidence.kinds import V2_BACKFILL, V2_INDEX_FILE, V2Backfill, V2IndexFile, register_v2
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.jobs.policy import RetryPolicy
from app.jobs.registry import JobRegistry, PermanentJobError, Progress, ReleaseJob, current_job_id
from app.jobs.service import JobService
from app.jobs.worker import JobWorker
from app.store.jobs import Enqueued
from app.store.missing_vectors import MissingCount, ReembedBatch

logger = logging.getLogger(__name__)

# higher runs first: an upload somebody just made, then planning, then surveys before stages
UPLOAD_PRIORITY = 6
BACKFILL_PRIORITY = 5
SURVEY_PRIORITY = 4
STAGE_PRIORITY = 3
# a file /query_v2 found missing from the answering run: its staging goes before all other V2 work
# (still after the uploads somebody waits for, 10), asked at most once per file in this long
HURRY_PRIORITY = 8
HURRY_EVERY_S = 30.0
RUN_LOG_EVERY_S = 10.0  # a run being built logs its progress this often (from its file jobs)
SURVEY_WAIT_SECONDS = 2.0  # a stage job that finds surveys still waiting comes back after this
NOTE_UPLOAD_TIMEOUT_S = 5.0


def backfill_key(namespace: str) -> str:
    """Dedupe key of a namespace's backfill request: a waiting one is joined, never doubled."""
    return f"v2-backfill:{namespace}"


def first_run_key(namespace: str) -> str:
    """Dedupe key of the backfill a namespace's first upload queues (apart from operators' requests)."""
    return f"v2-first-run:{namespace}"


def run_key(run_id: int) -> str:
    """Dedupe key of the planning job of one run."""
    return f"v2-backfill-run:{run_id}"


def file_key(run_id: int, file_id: str, *, survey: bool) -> str:
    """Dedupe key of one file's survey or stage job in a run."""
    return f"v2-{'survey' if survey else 'file'}:{run_id}\x1f{file_id}"


def upload_key(owner: str, file_id: str) -> str:
    """Dedupe key of the V2 staging of a new upload."""
    return f"v2-upload:{owner}\x1f{file_id}"


class V2Jobs:
    """The handlers of `v2-backfill` and `v2-index-file`, and the calls that queue them."""

    def __init__(self, ctx: V2Context, jobs: JobService) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self._hurried: dict[tuple[str, str], float] = {}  # (namespace, file) -> when it may be asked again
        self._tasks: set[asyncio.Task[None]] = set()
        self._run_logged: dict[int, float] = {}  # run -> when its progress was last logged here

    def install(self, registry: JobRegistry) -> None:
        """Register both kinds."""
        register_v2(registry, index_file=self.index_file, backfill=self.backfill)

    # --- queueing ----------------------------------------------------------------------------------
    async def enqueue_backfill(
        self,
        *,
        namespace: str,
        run_id: int | None = None,
        force: bool = False,
        index_version: str | None = None,
        file_ids: list[str] | None = None,
        activate: bool = True,
        created_by: str | None = None,
    ) -> Enqueued:
        """Queue a backfill: of a whole namespace (a waiting one is joined), or of run `run_id`."""
        payload = V2Backfill(
            namespace=namespace,
            force=force,
            run_id=run_id,
            index_version=index_version,
            file_ids=file_ids,
            activate=activate,
        ).model_dump()
        return await self.jobs.enqueue(
            V2_BACKFILL,
            payload,
            dedupe_key=run_key(run_id) if run_id is not None else backfill_key(namespace),
            # a forced request upgrades a waiting one; a plain request joins whatever waits
            mode="replace" if force else "keep",
            created_by=created_by,
            priority=BACKFILL_PRIORITY,
        )

    async def note_upload(self, file_id: str, owner: str, created_by: str | None = None) -> int | None:
        """Queue the V2 staging of a stored file of an enabled namespace; the job's id (never raises).

        `created_by`: the uploader, who may then follow the job at `/jobs/{id}` like the upload's own.
        """
        if owner not in self.ctx.enabled_namespaces:
            return None
        try:
            async with asyncio.timeout(NOTE_UPLOAD_TIMEOUT_S):
                added = await self.jobs.enqueue(
                    V2_INDEX_FILE,
                    V2IndexFile(file_id=file_id, owner=owner).model_dump(),
                    dedupe_key=upload_key(owner, file_id),
                    priority=UPLOAD_PRIORITY,
                    created_by=created_by,
                )
        except Exception as exc:  # the V1 upload has succeeded; a reindex picks the file up later
            logger.error(
                "V2: could not queue the staging of new upload %s (%s); reindex the namespace to add it",
                file_id,
                type(exc).__name__,
            )
            return None
        return added.id

    def hurry_staging(self, namespace: str, file_ids: list[str]) -> None:
        """/query_v2 found these stored files missing from the answering run: stage them first.

        Raises the waiting staging jobs of these uploads to HURRY_PRIORITY, in the background (the
        query never waits for it; a failure is logged), at most once per file per HURRY_EVERY_S.
        """
        now = time.monotonic()
        due = [f for f in file_ids if self._hurried.get((namespace, f), 0.0) <= now]
        if not due:
            return
        if len(self._hurried) > 10_000:
            self._hurried = {k: t for k, t in self._hurried.items() if t > now}
        for file_id in due:
            self._hurried[(namespace, file_id)] = now + HURRY_EVERY_S
        task = asyncio.create_task(self._hurry(namespace, due))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hurry(self, namespace: str, file_ids: list[str]) -> None:
        try:
            moved = await self.jobs.raise_priority(
                [upload_key(namespace, f) for f in file_ids], HURRY_PRIORITY
            )
        except Exception as exc:  # the next query asks again
            logger.warning(
                "V2: could not move the staging of %s's new files ahead (%s)", namespace, type(exc).__name__
            )
            return
        if moved:
            logger.info(
                "V2: %d staging job(s) of %s moved ahead: /query_v2 is missing their files", moved, namespace
            )

    async def waiting(self, run_id: int) -> int:
        """Jobs of run `run_id` (planning, surveys, stages) still queued or running."""
        return await self.jobs.waiting(V2_BACKFILL, {"run_id": run_id}) + await self.jobs.waiting(
            V2_INDEX_FILE, {"run_id": run_id}
        )

    async def wait_for_run(
        self, run_id: int, *, show: Callable[[RunStatus], None] | None = None, poll_s: float = 0.5
    ) -> RunStatus:
        """Until the run is no longer running, or none of its jobs is queued or running any more.

        `show` is given the run's status (its file table's counts) every `poll_s`.
        """
        while True:
            status = await run_status(self.ctx, run_id)
            if show is not None:
                show(status)
            if status.run.status != "running" or not await self.waiting(run_id):
                return await run_status(self.ctx, run_id)
            await asyncio.sleep(poll_s)

    # --- handlers ----------------------------------------------------------------------------------
    async def backfill(self, job: V2Backfill, progress: Progress) -> dict[str, Any]:
        """Plan a run: start it (or take the one named, or the one this job started before a crash),
        then queue a survey and a stage job per file not staged yet."""
        ctx = self.ctx
        if job.run_id is not None:
            async with ctx.pool.acquire() as conn:
                run = await run_store.get_run(conn, ctx.info.collection_id, job.run_id)
            if run is None or run.namespace != job.namespace:
                raise PermanentJobError(f"there is no index run {job.run_id} of namespace {job.namespace}")
        else:
            job_id = current_job_id()
            found = await find_backfill_run(ctx, job.namespace, job_id) if job_id is not None else None
            if found is None:
                row = await self.jobs.get(job_id) if job_id is not None else None
                created_by = row.created_by if row is not None else None
                if job.first_run:
                    found = await start_first_run(
                        ctx, namespace=job.namespace, created_by=created_by, job_id=job_id
                    )
                    if found is None:
                        return {"namespace": job.namespace, "skipped": "another run indexes the namespace"}
                else:
                    found = await start_backfill_run(
                        ctx,
                        namespace=job.namespace,
                        index_version=job.index_version,
                        file_ids=job.file_ids,
                        activate_when_done=job.activate,
                        force=job.force,
                        created_by=created_by,
                        job_id=job_id,
                    )
            run = found
        out: dict[str, Any] = {"run_id": run.run_id, "namespace": run.namespace, "force": forced(run)}
        if run.status != "running":
            return {**out, "status": run.status, "surveys": 0, "stages": 0}
        async with ctx.pool.acquire() as conn:
            files = await run_store.run_files(conn, run.run_id)
        todo = [f for f in files if f.state != "staged"]
        survey = len(files) >= ctx.profile.boilerplate.min_documents
        surveys = [f for f in todo if survey and not f.surveyed]
        total, done = len(surveys) + len(todo), 0
        progress(0, total, f"run {run.run_id}: queueing {len(todo)} files")
        for item, is_survey in [*((f, True) for f in surveys), *((f, False) for f in todo)]:
            payload = V2IndexFile(
                file_id=item.file_id,
                owner=run.namespace,
                run_id=run.run_id,
                survey=is_survey,
                after_survey=survey and not is_survey,
            )
            await self.jobs.enqueue(
                V2_INDEX_FILE,
                payload.model_dump(),
                dedupe_key=file_key(run.run_id, item.file_id, survey=is_survey),
                created_by=run.created_by,
                priority=SURVEY_PRIORITY if is_survey else STAGE_PRIORITY,
            )
            done += 1
            progress(done, total)
        activated = None if todo else await complete_run(ctx, run.run_id)
        return {
            **out,
            "status": activated.status if activated else run.status,
            "files": len(files),
            "surveys": len(surveys),
            "stages": len(todo),
        }

    async def index_file(self, job: V2IndexFile, progress: Progress) -> dict[str, Any]:
        """Survey or stage one file of a run (then activate the run if it is complete); or a new upload."""
        if job.run_id is None:
            return await self._upload(job, progress)
        ctx = self.ctx
        out: dict[str, Any] = {"run_id": job.run_id, "file_id": job.file_id}
        async with ctx.pool.acquire() as conn:
            run = await run_store.get_run(conn, ctx.info.collection_id, job.run_id)
            entry = await run_store.run_file(conn, job.run_id, job.file_id) if run is not None else None
        if run is None or run.namespace != job.owner or run.status not in ("running", "active"):
            return {**out, "skipped": f"the run is {run.status if run is not None else 'gone'}"}
        if entry is None:
            # deleted meanwhile: it may have been the last file the run waited for
            activated = await complete_run(ctx, job.run_id)
            return {**out, "skipped": "the file is no longer one of the run's", "activated": bool(activated)}
        if job.survey:
            progress(0, 1, f"reading {job.file_id} for repeated blocks")
            return {**out, "surveyed": await survey_file(ctx, job.run_id, job.file_id)}
        if entry.state != "staged":
            if job.after_survey:
                surveys = await self.jobs.waiting(V2_INDEX_FILE, {"run_id": job.run_id, "survey": True})
                if surveys:
                    note = f"run {job.run_id}: {surveys} survey job(s) waiting"
                    raise ReleaseJob(SURVEY_WAIT_SECONDS, note)
            progress(0, 1, f"staging {job.file_id}")
            try:
                with reporting_batches(embedding_progress(progress, f"embedding {job.file_id}")):
                    outcome = await index_file(ctx, job.run_id, job.file_id)
            except ProfileMismatch as exc:
                raise PermanentJobError(exc.detail) from exc
            except run_store.RunStateError as exc:
                return {**out, "skipped": exc.detail}  # the run was failed or abandoned meanwhile
            except run_store.RunFileGone as exc:
                activated = await complete_run(ctx, job.run_id)  # deleted meanwhile
                return {**out, "skipped": exc.detail, "activated": bool(activated)}
            out.update(
                chunks=outcome.chunks,
                linked=outcome.linked,
                source=outcome.source,
                embedded=outcome.embedded,
                reused=outcome.reused,
                vectors_missing=outcome.vectors_missing,
                seconds=round(outcome.seconds, 3),
            )
        else:
            out["already_staged"] = True
        progress(1, 1, f"{job.file_id} staged")
        activated = await complete_run(ctx, job.run_id)
        await self._log_run(job.run_id)
        return {**out, "activated": activated is not None}

    async def _log_run(self, run_id: int) -> None:
        """Log the run's progress, at most once per RUN_LOG_EVERY_S, from its first file job on."""
        now = time.monotonic()
        first = self._run_logged.setdefault(run_id, now)
        if now - first < RUN_LOG_EVERY_S:
            return
        self._run_logged[run_id] = now
        try:
            status = await run_status(self.ctx, run_id)
        except Exception as exc:  # a progress line is not worth failing a staged file for
            logger.debug("V2: no progress line for run %d (%s)", run_id, type(exc).__name__)
            return
        logger.info("V2 index %s", describe_run(status))
        if status.run.status != "running":
            self._run_logged.pop(run_id, None)

    async def _upload(self, job: V2IndexFile, progress: Progress) -> dict[str, Any]:
        progress(0, 1, f"staging new upload {job.file_id}")
        with reporting_batches(embedding_progress(progress, f"embedding {job.file_id}")):
            staging = await stage_upload(self.ctx, job.file_id, job.owner)
        if staging.no_run:
            # the namespace's first upload since V2 was enabled for it: build its index, all files
            # (later uploads are staged into the run it starts; it never replaces a run)
            queued = await self.jobs.enqueue(
                V2_BACKFILL,
                V2Backfill(namespace=job.owner, first_run=True).model_dump(),
                dedupe_key=first_run_key(job.owner),
                created_by="upload",
                priority=BACKFILL_PRIORITY,
            )
            progress(1, 1, f"no index run of {job.owner} yet: backfill job {queued.id} queued")
            return {"file_id": job.file_id, "staged": [], "activated": [], "backfill_job": queued.id}
        if staging.failed:
            errors = list(staging.failed.values())
            # a dependency that may come back: run again (runs already staged are linked, not rebuilt)
            transient = next((e for e in errors if isinstance(e, RagError) and e.status_code >= 500), None)
            if transient is not None:
                raise transient
            first = errors[0]
            if isinstance(first, RagError):
                raise first
            raise PermanentJobError(first.detail)
        progress(1, 1, f"{job.file_id} staged")
        return {"file_id": job.file_id, "staged": staging.staged, "activated": staging.activated}


def embedding_progress(progress: Progress, note: str) -> Callable[[int, int], None]:
    """The embedder's batch callback as a job's progress: texts embedded of the call's (done/total)."""
    sent, of_last = 0, 0

    def batch(count: int, of: int) -> None:
        nonlocal sent, of_last
        if sent >= of_last:  # the previous call had ended: this batch belongs to a new one
            sent = 0
        sent, of_last = sent + count, of
        progress(min(sent, of), of, note)

    return batch


class V2MissingVectors:
    """The V2 index's chunks without a vector, for the self-healing sweep (a `ReembeddingStore`).

    It embeds them as a run does (`reembed_missing`: the service's model identity, texts longer
    than the window pooled) and the documents' `vectors_missing` and `embedding_error` follow.
    """

    name = "v2"

    def __init__(self, ctx: V2Context) -> None:
        self.ctx = ctx

    async def count_missing(self) -> MissingCount:
        """Chunks of the collection's V2 documents without a vector, and those documents."""
        async with self.ctx.pool.acquire() as conn:
            if not await read_store.schema_ready(conn):
                return MissingCount(0, 0)
            documents, chunks = await vector_store.count_missing_vectors(conn, self.ctx.info.collection_id)
        return MissingCount(documents, chunks)

    async def reembed(self, *, after: str | None, limit: int) -> ReembedBatch:
        """Embed one batch of chunks in (document, ordinal) order after `after` ("document:ordinal")."""
        key: tuple[int, int] | None = None
        if after is not None:
            document, _, ordinal = after.partition(":")
            key = (int(document), int(ordinal))
        done = await reembed_missing(self.ctx, limit=limit, after=key)
        last = f"{done.last[0]}:{done.last[1]}" if done.last is not None else None
        return ReembedBatch(done.listed, done.stored, done.skipped, last)


# --- a worker of the V2 kinds outside the service (scripts/v2-backfill, benchmarks) ---------------


@dataclass
class V2Worker:
    """A job worker that runs only the V2 kinds, on the service's queue, with its own registry."""

    jobs: V2Jobs
    service: JobService
    worker: JobWorker


@contextlib.asynccontextmanager
async def v2_worker(
    ctx: V2Context,
    *,
    dsn: str,
    concurrency: int,
    policy: RetryPolicy,
    job_timeout_s: float,
    stale_s: float,
) -> AsyncIterator[V2Worker]:
    """Run a worker of the V2 kinds on the collection's queue while the block runs.

    It shares the queue with any service replica running: whoever is free takes the next file.
    On exit its running jobs go back to the queue, uncounted.
    """
    registry = JobRegistry()
    worker = JobWorker(
        dsn=dsn,
        queue=ctx.info.collection_name,
        registry=registry,
        policy=policy,
        concurrency=concurrency,
        job_timeout_s=job_timeout_s,
        stale_timeout_s=stale_s,
    )
    service = JobService(ctx.pool, ctx.info.collection_name, registry, policy, worker)
    jobs = V2Jobs(ctx, service)
    jobs.install(registry)
    await worker.start()
    try:
        yield V2Worker(jobs, service, worker)
    finally:
        await worker.stop()
