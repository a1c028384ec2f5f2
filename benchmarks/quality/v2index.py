"""Wait until the V2 index holds every file of every knowledge base, before `/query_v2` is measured.

Uploads of a namespace in `RAG_V2_NAMESPACE_IDS` are staged by background jobs into the namespace's
running and active runs, and a namespace that has no run yet gets none from an upload: its first
run is a backfill (`POST /v2/backfill`). So, per knowledge base:

- an active run of the default index version, built the way the service builds runs now (its
  extractor version), whose file table has every file of the knowledge base `staged` is ready (a
  rerun on the cached service data finds this at once; after a change of the extractor it does not,
  and a new backfill rebuilds the run);
- else a running run that expects every file is adopted and waited for (a backfill queued earlier);
- else a backfill is queued, and the knowledge base is ready when THAT run is active with every file
  staged (waiting for it, not for upload jobs, so no run is activated in the middle of measuring).

A run that fails, files that stay failed with no progress for `stall_s`, or the overall `timeout_s`
stop the run with a message naming the run, its counts and the failed files. The HNSW index of the
V2 vectors is built in the background after the first vectors are stored; it is waited for too
(`hnsw_wait_s`), but a task not done in time is only reported: queries are then exact scans.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

HNSW_PREFIX = "v2-hnsw-index-"
NO_TASK_WAIT_S = 30.0


class V2IndexError(RuntimeError):
    """The V2 index could not be made ready; the message says why and what to look at."""


@dataclass
class KbProgress:
    """One knowledge base while it is waited for."""

    kb: str
    files: frozenset[str]
    run_id: int | None = None  # the run waited for (a backfill we queued or adopted)
    backfilled: bool = False
    job_id: int | None = None
    ready_run: int | None = None
    chunks: int | None = None
    last_line: str = ""
    last_change: float = field(default_factory=time.monotonic)
    last_staged: int = -1
    seconds: float = 0.0


def covered(run: Mapping[str, Any], files: frozenset[str], extractor: str | None = None) -> bool:
    """True when the run (`GET /v2/runs/{id}`) is active, of `extractor` when given, and every one of
    `files` is staged in it."""
    info = run.get("run") or {}
    if info.get("status") != "active":
        return False
    if extractor is not None and info.get("extractor_version") != extractor:
        return False
    staged = {f.get("file_id") for f in run.get("files") or [] if f.get("state") == "staged"}
    return files <= staged


def expects_all(run: Mapping[str, Any], files: frozenset[str]) -> bool:
    """True when the run's file table names every one of `files` (whatever their state)."""
    return files <= {f.get("file_id") for f in run.get("files") or []}


def describe(kb: str, run: Mapping[str, Any]) -> str:
    """One progress line: the run, its state and the files per state."""
    info = run.get("run") or {}
    counts = run.get("counts") or {}
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()) if n)
    chunks = run.get("chunks", 0)
    return f"V2 {kb}: run {info.get('run_id')} {info.get('status')} ({parts or 'no files'}; {chunks} chunks)"


def failed_files(run: Mapping[str, Any], limit: int = 5) -> str:
    """The run's failed files with their errors (at most `limit`)."""
    bad = [f for f in run.get("files") or [] if f.get("state") == "failed"]
    shown = "; ".join(f"{f.get('file_id')}: {f.get('error')}" for f in bad[:limit])
    return f"{len(bad)} failed file(s): {shown}" + (" ..." if len(bad) > limit else "") if bad else ""


async def _get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    reply = await client.get(path, params=params or None)
    _check(reply, f"GET {path}")
    return reply.json()


def _check(reply: httpx.Response, what: str) -> None:
    if reply.status_code in (401, 403):
        raise V2IndexError(
            f"{what} answered {reply.status_code}: waiting for the V2 index needs an admin token "
            "(the benchmark's own service gets one; for --service-url pass --token or --jwt-secret)"
        )
    if reply.status_code == 503:
        raise V2IndexError(
            f"{what} answered 503: the V2 index is not available in this service ({reply.text[:200]})"
        )
    if reply.status_code >= 400:
        raise V2IndexError(f"{what} answered {reply.status_code}: {reply.text[:300]}")


def _active_run_id(status: Mapping[str, Any], kb: str) -> int | None:
    version = status.get("index_version")
    for run in status.get("active_runs") or []:
        if run.get("namespace") == kb and run.get("index_version") == version:
            return int(run["run_id"])
    return None


async def wait_for_index(
    client: httpx.AsyncClient,
    kbs: Mapping[str, Sequence[str]],
    *,
    timeout_s: float = 3 * 3600.0,
    stall_s: float = 600.0,
    hnsw_wait_s: float = 300.0,
    poll_s: float = 2.0,
    say: Callable[[str], None] = lambda _m: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> dict[str, Any]:
    """Make every knowledge base's V2 run ready (see the module docstring); returns what it did and took."""
    t0 = clock()
    deadline = t0 + timeout_s
    status = await _get(client, "/v2/status")
    enabled = set(status.get("namespaces") or [])
    absent = sorted(set(kbs) - enabled)
    if absent:
        raise V2IndexError(
            f"knowledge base(s) {', '.join(absent)} are not in the service's RAG_V2_NAMESPACE_IDS "
            f"({', '.join(sorted(enabled)) or 'empty'}): /query_v2 would answer 403"
        )
    extractor = status.get("extractor_version")
    pending = {kb: KbProgress(kb, frozenset(files), last_change=t0) for kb, files in kbs.items()}
    done: dict[str, KbProgress] = {}
    while pending:
        for kb, p in list(pending.items()):
            active = _active_run_id(status, kb)
            if p.run_id is None and active is not None:
                run = await _get(client, f"/v2/runs/{active}")
                if covered(run, p.files, extractor):
                    p.ready_run, p.chunks = active, run.get("chunks")
            if p.ready_run is None and p.run_id is None:
                await _start_or_adopt(client, p, say, extractor)
            if p.ready_run is None and p.run_id is not None:
                run = await _get(client, f"/v2/runs/{p.run_id}")
                _follow(p, run, clock(), stall_s, say)
                if covered(run, p.files):
                    p.ready_run, p.chunks = p.run_id, run.get("chunks")
            if p.ready_run is not None:
                p.seconds = clock() - t0
                say(f"V2 {kb}: run {p.ready_run} active with all {len(p.files)} files ({p.chunks} chunks)")
                done[kb] = pending.pop(kb)
        if not pending:
            break
        if clock() > deadline:
            waiting = "; ".join(p.last_line or f"V2 {p.kb}: no run yet" for p in pending.values())
            raise V2IndexError(f"the V2 index was not ready after {timeout_s:.0f} s: {waiting}")
        await sleep(poll_s)
        status = await _get(client, "/v2/status")
    tasks = await _wait_hnsw(
        client, min(hnsw_wait_s, max(deadline - clock(), 0.0)), poll_s, say, clock, sleep
    )
    return {
        "seconds": round(clock() - t0, 1),
        "knowledge_bases": {
            kb: {
                "run_id": p.ready_run,
                "files": len(p.files),
                "chunks": p.chunks,
                "backfilled": p.backfilled,
                "job_id": p.job_id,
                "seconds": round(p.seconds, 1),
            }
            for kb, p in sorted(done.items())
        },
        "hnsw_tasks": tasks,
    }


async def _start_or_adopt(
    client: httpx.AsyncClient, p: KbProgress, say: Callable[[str], None], extractor: str | None = None
) -> None:
    running = await _get(client, "/v2/runs", namespace=p.kb, status="running", limit=1000)
    for run in sorted(running, key=lambda r: -int(r["run_id"])):
        detail = await _get(client, f"/v2/runs/{run['run_id']}")
        stale = extractor is not None and (detail.get("run") or {}).get("extractor_version") != extractor
        if expects_all(detail, p.files) and not stale:
            p.run_id = int(run["run_id"])
            say(f"V2 {p.kb}: waiting for running run {p.run_id}")
            return
    reply = await client.post("/v2/backfill", json={"namespace": p.kb})
    _check(reply, "POST /v2/backfill")
    body = reply.json()
    p.run_id, p.job_id, p.backfilled = int(body["run"]["run_id"]), body.get("job_id"), True
    say(f"V2 {p.kb}: backfill queued (run {p.run_id}, job {p.job_id})")


def _follow(
    p: KbProgress, run: Mapping[str, Any], now: float, stall_s: float, say: Callable[[str], None]
) -> None:
    """Report progress; raise when the run failed, or failed files made no progress for `stall_s`."""
    info = run.get("run") or {}
    line = describe(p.kb, run)
    if line != p.last_line:
        say(line)
        p.last_line = line
    if info.get("status") in ("failed", "abandoned"):
        raise V2IndexError(
            f"V2 run {info.get('run_id')} of {p.kb} is {info.get('status')}: {info.get('error')} "
            f"{failed_files(run)} (GET /v2/runs/{info.get('run_id')})"
        )
    staged = int((run.get("counts") or {}).get("staged", 0))
    if staged != p.last_staged:
        p.last_staged, p.last_change = staged, now
    elif failed_files(run) and now - p.last_change > stall_s:
        raise V2IndexError(
            f"V2 run {info.get('run_id')} of {p.kb} made no progress for {stall_s:.0f} s with "
            f"{failed_files(run)} (GET /v2/runs/{info.get('run_id')}; retry with POST /admin/jobs/<id>/retry)"
        )


async def _wait_hnsw(
    client: httpx.AsyncClient,
    within_s: float,
    poll_s: float,
    say: Callable[[str], None],
    clock: Callable[[], float],
    sleep: Callable[[float], Any],
) -> dict[str, str]:
    """The V2 HNSW tasks' states once all are done, or as they are when `within_s` ran out."""
    start = clock()
    until = start + within_s
    while True:
        status = await _get(client, "/v2/status")
        tasks = {
            t["name"]: t["state"]
            for t in status.get("tasks") or []
            if str(t.get("name", "")).startswith(HNSW_PREFIX)
        }
        if tasks and all(state == "done" for state in tasks.values()):
            return tasks
        # no task at all (VECTOR_INDEX=none, or too many dimensions): exact scans, nothing to wait for
        if clock() >= until or (not tasks and clock() >= start + NO_TASK_WAIT_S):
            say(f"V2 HNSW index not built yet ({tasks or 'no task'}): measuring anyway")
            return tasks
        await sleep(poll_s)
