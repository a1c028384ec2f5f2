"""Backfills and new uploads of V2 index runs.

A backfill is a run with origin `backfill` (`start_backfill_run`) whose files are each a job of the
queue (`app/evidence/jobs.py`): first `survey_file` for every file (its repeated-block fingerprints, so
boilerplate is judged across the whole run before any file is chunked), then `index_file`, and the
file job that finds the run complete activates it (`complete_run`, exactly once). Each step is a plain
async function of the context and ids. A new upload is staged into every open run of its namespace
(`stage_upload`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import RagError
from app.evidence.index.context import V2Context
from app.evidence.index.lifecycle import ProfileMismatch, activate, fail, start_run
from app.evidence.index.staging import index_file
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store

logger = logging.getLogger(__name__)


async def start_backfill_run(
    ctx: V2Context,
    *,
    namespace: str,
    index_version: str | None = None,
    file_ids: Sequence[str] | None = None,
    activate_when_done: bool = True,
    force: bool = False,
    created_by: str | None = None,
    job_id: int | None = None,
) -> run_store.RunRecord:
    """A new backfill run of the namespace (default: all of its files); older ones of it give way.

    A backfill run of the same namespace and index version still running is failed ("superseded"):
    the newest request wins, and it links what the older one had staged. `force`: a run that links
    no earlier document and reuses no vector (every file is parsed and embedded again).
    """
    run = await start_run(
        ctx,
        namespace=namespace,
        index_version=index_version,
        file_ids=file_ids,
        origin="backfill",
        created_by=created_by,
        options={"activate": activate_when_done, "force": force, "job_id": job_id},
    )
    async with ctx.pool.acquire() as conn:
        older = await run_store.list_runs(
            conn, ctx.info.collection_id, namespace=namespace, statuses=["running"], limit=1000
        )
    for other in older:
        same = other.origin == "backfill" and other.index_version == run.index_version
        if other.run_id < run.run_id and same:
            with contextlib.suppress(run_store.RunStateError):
                await fail(ctx, other.run_id, f"superseded by backfill run {run.run_id}")
    return run


async def start_first_run(
    ctx: V2Context, *, namespace: str, created_by: str | None = None, job_id: int | None = None
) -> run_store.RunRecord | None:
    """The backfill run a namespace's first upload queues, or None when another run indexes it.

    Unlike an operator's backfill it never supersedes: it gives way to any other running or active
    run of the namespace, even one started a moment later (so a race ends with the operator's run).
    """
    run = await start_run(
        ctx,
        namespace=namespace,
        origin="backfill",
        created_by=created_by,
        options={"activate": True, "force": False, "job_id": job_id},
    )
    async with ctx.pool.acquire() as conn:
        others = [
            r
            for r in await run_store.open_runs(conn, ctx.info.collection_id, namespace)
            if r.run_id != run.run_id
        ]
    if not others:
        return run
    with contextlib.suppress(run_store.RunStateError):
        await fail(ctx, run.run_id, f"not needed: run {others[0].run_id} indexes the namespace")
    return None


async def find_backfill_run(ctx: V2Context, namespace: str, job_id: int) -> run_store.RunRecord | None:
    """The running backfill run that job `job_id` started (its run after a crash finds it again)."""
    async with ctx.pool.acquire() as conn:
        running = await run_store.list_runs(
            conn, ctx.info.collection_id, namespace=namespace, statuses=["running"], limit=1000
        )
    return next((r for r in running if r.origin == "backfill" and r.settings.get("job_id") == job_id), None)


async def complete_run(ctx: V2Context, run_id: int) -> run_store.RunRecord | None:
    """Activate a backfill run once every file is staged; the run when this call activated it.

    Called after every file of the run is staged, by whichever job or replica: the activation
    itself re-checks the run under its row lock, so exactly one caller activates it and the others
    get None. Runs started without `activate` (and runs of `/v2/runs`) are left running.
    """
    async with ctx.pool.acquire() as conn:
        run = await run_store.get_run(conn, ctx.info.collection_id, run_id)
        if run is None or run.status != "running" or run.origin != "backfill":
            return None
        if run.settings.get("activate") is not True:
            return None
        counts = await run_store.run_file_counts(conn, run_id)
    if counts["staged"] != run.expected_files:
        return None
    try:
        active = await activate(ctx, run_id)
    except (run_store.RunIncomplete, run_store.RunStateError):
        return None  # a file arrived meanwhile, or another job activated it first
    return active


@dataclass(frozen=True)
class UploadStaging:
    """What staging a new upload did: the runs it was staged into, and those that refused it."""

    staged: list[int]
    failed: dict[int, RagError | run_store.RunError]
    activated: list[int]
    # the namespace had no running or active run at all: nothing could take the file
    no_run: bool = False


async def stage_upload(ctx: V2Context, file_id: str, owner: str) -> UploadStaging:
    """Stage a new or replaced file into every running and active run of its namespace.

    A backfill run that this file was the last one missing from is activated.
    """
    async with ctx.pool.acquire() as conn:
        runs = await run_store.open_runs(conn, ctx.info.collection_id, owner)
        for run in runs:
            await run_store.add_run_file(conn, run.run_id, file_id)
    if not runs:
        return UploadStaging([], {}, [], no_run=True)
    staged: list[int] = []
    failed: dict[int, RagError | run_store.RunError] = {}
    activated: list[int] = []
    for run in runs:
        try:
            await index_file(ctx, run.run_id, file_id)
        except ProfileMismatch as exc:
            failed[run.run_id] = exc  # another extractor or model: only a new run can take the file
            continue
        except (run_store.RunStateError, run_store.RunFileGone):
            continue  # the run was failed or abandoned, or the file deleted, meanwhile
        except (RagError, run_store.RunError) as exc:
            logger.warning(
                "V2: could not stage new upload %s into run %d: %s",
                file_id,
                run.run_id,
                getattr(exc, "detail", exc),
            )
            failed[run.run_id] = exc
            continue
        staged.append(run.run_id)
        if run.status == "running" and await complete_run(ctx, run.run_id) is not None:
            activated.append(run.run_id)
    if staged:
        async with ctx.pool.acquire() as conn:
            await document_store.prune_documents(conn, ctx.info.collection_id)  # the replaced version
    return UploadStaging(staged, failed, activated)
