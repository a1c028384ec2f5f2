"""The life of a V2 index run: start, activate, fail, its status, and the profile it was started with.

    run = await start_run(ctx, namespace="agent_x", index_version="v2", file_ids=["f1", "f2"])
    await index_file(ctx, run.run_id, "f1")       # app/evidence/index/staging.py
    await activate(ctx, run.run_id)               # only once every expected file is staged

Staging a file never touches what `/query_v2` reads: queries read the active run only, and
activation swaps runs in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import BadRequest
from app.evidence.index.context import V2Context
from app.evidence.store import documents as document_store
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.store import chunks as v1_store
from app.store.scope import Scope

logger = logging.getLogger(__name__)


async def namespace_file_ids(ctx: V2Context, namespace: str, *, limit: int = 1_000_000) -> list[str]:
    """Every file of the namespace (its V1 rows, read through the scope), by id."""
    scope = Scope.of(ctx.info.collection_id, [namespace])
    async with ctx.pool.acquire() as conn:
        return await v1_store.list_file_ids(conn, scope, limit=limit)


async def start_run(
    ctx: V2Context,
    *,
    namespace: str,
    index_version: str | None = None,
    file_ids: Sequence[str] | None = None,
    origin: str = "admin",
    created_by: str | None = None,
    options: dict[str, Any] | None = None,
) -> run_store.RunRecord:
    """A new running run of `namespace` that must contain `file_ids` (default: all of its files).

    BadRequest when a file id is not a file of the namespace, or when there is no file at all.
    """
    known = await namespace_file_ids(ctx, namespace)
    wanted = list(dict.fromkeys(file_ids)) if file_ids is not None else known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise BadRequest(
            f"{len(unknown)} file id(s) are not files of namespace {namespace}: {shown}. "
            "Upload them first, or leave them out"
        )
    if not wanted:
        raise BadRequest(f"Namespace {namespace} has no files to index; upload files through /embed first")
    profile = ctx.profile
    async with ctx.pool.acquire() as conn:
        run = await run_store.create_run(
            conn,
            ctx.info.collection_id,
            namespace=namespace,
            index_version=index_version or ctx.settings.v2_index_version,
            extractor_version=profile.extractor_version,
            embedding_model=profile.embedding_model,
            embedding_dim=ctx.embedder.dimensions,
            file_ids=wanted,
            origin=origin,
            created_by=created_by,
            settings={**profile.describe(), **(options or {})},
        )
    logger.info("V2 run %d started for %s (%d files)", run.run_id, namespace, len(wanted))
    return run


class RunNarrower(run_store.RunError):
    """Activating the run would make the namespace's default answers read fewer of its files."""


async def files_held(ctx: V2Context, run_id: int, namespace_files: set[str]) -> int:
    """How many of the namespace's current files a run holds (files deleted since do not count)."""
    async with ctx.pool.acquire() as conn:
        return sum(1 for f in await run_store.run_files(conn, run_id) if f.file_id in namespace_files)


async def _refuse_narrower(ctx: V2Context, run_id: int) -> None:
    async with ctx.pool.acquire() as conn:
        run = await run_store.require_run(conn, ctx.info.collection_id, run_id)
        current = await run_store.active_run(conn, ctx.info.collection_id, run.namespace)
        states = {f.state for f in await run_store.run_files(conn, run_id)}
    if current is None or current.run_id == run_id or run.status != "running" or states - {"staged"}:
        return  # nothing to compare with, or the activation is refused for what the run itself lacks
    files = set(await namespace_file_ids(ctx, run.namespace))
    held, current_held = await files_held(ctx, run_id, files), await files_held(ctx, current.run_id, files)
    if held < current_held:
        raise RunNarrower(
            f"Index run {run_id} holds {held} of the {len(files)} files of {run.namespace}, fewer than the "
            f"{current_held} of run {current.run_id} ({current.index_version}), which answers /query_v2 "
            "without index_version now; activated, it would answer those queries instead and refuse what "
            "the other files answer. Activate it with force=true if that is meant"
        )


async def activate(ctx: V2Context, run_id: int, *, force: bool = True) -> run_store.RunRecord:
    """Make a complete run the active one (the previous one is abandoned), then prune documents.

    Without `force`, a run that holds fewer of the namespace's files than the run answering its
    queries now is refused (RunNarrower): an operator's test run must not become everyone's default.
    """
    if not force:
        await _refuse_narrower(ctx, run_id)
    async with ctx.pool.acquire() as conn:
        run = await run_store.activate_run(conn, ctx.info.collection_id, run_id)
        pruned = await document_store.prune_documents(conn, ctx.info.collection_id)
    logger.info(
        "V2 run %d is active for %s (%s); %d documents pruned",
        run_id,
        run.namespace,
        run.index_version,
        pruned,
    )
    return run


async def fail(ctx: V2Context, run_id: int, reason: str) -> run_store.RunRecord:
    """Mark a running run failed: what queries read does not change."""
    async with ctx.pool.acquire() as conn:
        run = await run_store.fail_run(conn, ctx.info.collection_id, run_id, reason)
        await document_store.prune_documents(conn, ctx.info.collection_id)
    logger.info("V2 run %d failed: %s", run_id, reason)
    return run


@dataclass(frozen=True)
class RunStatus:
    """A run with its files and their counts per state."""

    run: run_store.RunRecord
    counts: dict[str, int]
    files: list[run_store.RunFileRecord]
    chunks: int


async def run_status(ctx: V2Context, run_id: int) -> RunStatus:
    """The run, every expected file's progress, and how many chunks it holds."""
    async with ctx.pool.acquire() as conn:
        run = await run_store.require_run(conn, ctx.info.collection_id, run_id)
        files = await run_store.run_files(conn, run_id)
        chunks, _ = await read_store.run_stats(conn, run_id)
    counts: dict[str, int] = dict.fromkeys(run_store.FILE_STATES, 0)
    for item in files:
        counts[item.state] += 1
    return RunStatus(run, counts, files, chunks)


def describe_run(status: RunStatus) -> str:
    """One line of a run's progress."""
    c = status.counts
    return (
        f"run {status.run.run_id} ({status.run.namespace}, {status.run.index_version}): {c['staged']} of "
        f"{status.run.expected_files} files staged, {c['staging']} staging, {c['failed']} failed; "
        f"{status.run.status}"
    )


class ProfileMismatch(run_store.RunStateError):
    """The run was started by a service with another extractor version or embedding model."""


def check_profile(ctx: V2Context, run: run_store.RunRecord) -> None:
    """ProfileMismatch when the run was started by a service with another extractor or model."""
    profile = ctx.profile
    if run.extractor_version != profile.extractor_version or run.embedding_model != profile.embedding_model:
        raise ProfileMismatch(
            f"Index run {run.run_id} was started with extractor {run.extractor_version} and model "
            f"{run.embedding_model}; this service runs {profile.extractor_version} and "
            f"{profile.embedding_model}. Start a new run"
        )


def reindex_needed(ctx: V2Context, run: run_store.RunRecord) -> str | None:
    """Why a run must be rebuilt with `force` to match this service (another extractor or model
    identity, contextual chunking included), or None when it matches."""
    profile = ctx.profile
    changed = [
        f"{what} {then} (this service: {now})"
        for what, then, now in (
            ("extractor", run.extractor_version, profile.extractor_version),
            ("model", run.embedding_model, profile.embedding_model),
        )
        if then != now
    ]
    if not changed:
        return None
    return (
        f"built with {' and '.join(changed)}: new uploads cannot join it; reindex the namespace with "
        "force=true"
    )


def forced(run: run_store.RunRecord) -> bool:
    """True for a run started with `force`: nothing of earlier documents is linked or reused."""
    return run.settings.get("force") is True
