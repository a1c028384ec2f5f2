"""Fault runs of the job queue: two replicas on one database, and kill -9 during a large indexing job.

    python -m benchmarks.jobs_faults                      # both runs, embedded PostgreSQL in a temp folder
    python -m benchmarks.jobs_faults --dsn postgresql://… # against a database you own (it gets tables)
    python -m benchmarks.jobs_faults --jobs 2000 --chunks 3000 --json jobs-faults.json

replicas: N probe jobs on one queue, two worker processes (`worker` below) with INDEXER_CONCURRENCY
each; every run writes a ledger row. Passes when every job ran exactly once and is done.

kill: `python -m app` with a short INDEXER_STALE_TIMEOUT; a file's first version is uploaded, then
a large second version is accepted as a job (`?async=true`). While the job embeds, the service is
killed with SIGKILL; a second service starts on the same database and data folder. Throughout, a
client asks for the file: every answer must be the first version, whole (no partial version), until
the job, reclaimed as an attempt and run again, stores the second version whole.

Each run prints what it did and saw; bounded by --timeout seconds each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import jwt

from app.clients.http import build_http_client
from app.jobs.policy import RetryPolicy
from app.jobs.registry import JobRegistry, Progress
from app.jobs.worker import JobWorker
from app.store import jobs as jobstore
from app.store.db import bootstrap

if TYPE_CHECKING:
    from benchmarks.service import ServiceProcess

REPO_ROOT = Path(__file__).resolve().parent.parent
PROBE_KIND = "fault-probe"
LEDGER_DDL = """
    CREATE TABLE IF NOT EXISTS ragoverlay_fault_ledger (
        queue text NOT NULL, n bigint NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT now()
    )
"""
# the runs' own services trust tokens signed with this; nothing outside the run uses it
SECRET = uuid.uuid4().hex * 2


def log(message: str) -> None:
    """One line of what the run does or sees."""
    print(f"[jobs-faults {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- replicas -------------------------------------------------------------------------------------
@dataclass
class ReplicasResult:
    """Two workers, one queue: did every job run exactly once?"""

    jobs: int
    workers: int
    concurrency: int
    runs: int = 0
    ran_twice: int = 0
    never_ran: int = 0
    not_done: int = 0
    per_worker: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every job ran exactly once and is done."""
        return self.runs == self.jobs and not (self.ran_twice or self.never_ran or self.not_done)


async def worker_main(dsn: str, queue: str, concurrency: int, max_s: float) -> None:
    """One replica: run probe jobs of `queue` until none waits or runs (or `max_s` passed)."""
    registry = JobRegistry()
    worker = JobWorker(
        dsn=dsn,
        queue=queue,
        registry=registry,
        policy=RetryPolicy(3, 100, 1000),
        concurrency=concurrency,
        job_timeout_s=60,
        stale_timeout_s=120,
        poll_s=0.05,
    )
    conn = await asyncpg.connect(dsn)
    ledger = await asyncpg.create_pool(dsn, min_size=1, max_size=concurrency)
    assert ledger is not None

    async def recorded(payload: dict[str, Any], progress: Progress) -> None:
        await ledger.execute(
            "INSERT INTO ragoverlay_fault_ledger (queue, n, worker) VALUES ($1, $2, $3)",
            queue,
            payload["n"],
            worker.name,
        )
        await asyncio.sleep(float(payload["ms"]) / 1000)

    registry.register(PROBE_KIND, recorded)
    await worker.start()
    deadline = time.monotonic() + max_s
    try:
        idle_since: float | None = None
        while time.monotonic() < deadline:
            left = await conn.fetchval(
                "SELECT count(*) FROM ragoverlay_jobs WHERE queue = $1 AND status IN ('queued', 'running')",
                queue,
            )
            if left == 0:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 0.5:
                    break
            else:
                idle_since = None
            await asyncio.sleep(0.1)
    finally:
        await worker.stop(grace_s=5)
        await ledger.close()
        await conn.close()
    print(json.dumps({"worker": worker.name, "claimed": worker.claimed}), flush=True)


async def run_replicas(dsn: str, *, jobs: int, concurrency: int, timeout_s: float) -> ReplicasResult:
    """N probe jobs, two worker processes; the ledger says who ran what, and how often."""
    queue = f"faults-{uuid.uuid4().hex[:8]}"
    await bootstrap(dsn, "jobs-faults")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(LEDGER_DDL)
        for n in range(jobs):
            await jobstore.enqueue(
                conn, queue=queue, kind=PROBE_KIND, payload={"n": n, "ms": 5 + n % 20}, max_attempts=4
            )
        log(f"replicas: {jobs} jobs queued on {queue}; starting 2 worker processes x {concurrency}")
        started = time.monotonic()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.jobs_faults",
                "worker",
                "--dsn",
                dsn,
                "--queue",
                queue,
                "--concurrency",
                str(concurrency),
                "--timeout",
                str(timeout_s),
                cwd=str(REPO_ROOT),
                env=env,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(2)
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), timeout_s + 30)
        seconds = time.monotonic() - started
        rows = await conn.fetch("SELECT n, worker FROM ragoverlay_fault_ledger WHERE queue = $1", queue)
        statuses = Counter(
            r["status"]
            for r in await conn.fetch("SELECT status FROM ragoverlay_jobs WHERE queue = $1", queue)
        )
    finally:
        await conn.close()
    per_job = Counter(int(r["n"]) for r in rows)
    result = ReplicasResult(jobs=jobs, workers=2, concurrency=concurrency, seconds=round(seconds, 2))
    result.runs = sum(per_job.values())
    result.ran_twice = sum(1 for c in per_job.values() if c > 1)
    result.never_ran = jobs - len(per_job)
    result.not_done = jobs - statuses.get("done", 0)
    result.per_worker = dict(Counter(str(r["worker"]) for r in rows))
    for proc, (out, _) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"a worker process exited with {proc.returncode}")
        log(f"replicas: worker said {out.decode().strip().splitlines()[-1] if out else '(nothing)'}")
    log(
        f"replicas: {result.runs} runs of {jobs} jobs in {result.seconds} s; ran twice {result.ran_twice}, "
        f"never {result.never_ran}, not done {result.not_done}; "
        f"per worker {sorted(result.per_worker.values())}"
    )
    return result


# --- kill -9 during a large indexing job ------------------------------------------------------------
@dataclass
class KillResult:
    """What the client saw around a SIGKILL in the middle of an indexing job."""

    chunks_v1: int = 0
    chunks_v2: int = 0
    probes: int = 0
    probes_refused: int = 0  # while no service listened (connection refused)
    v1_whole: int = 0  # answers holding the first version, whole
    v2_whole: int = 0  # answers holding the second version, whole (once the job has committed it)
    partial: int = 0  # answers mixing versions or missing chunks: must never happen
    back_to_v1: int = 0  # the first version answered after the second had: must never happen
    partial_samples: list[str] = field(default_factory=list)
    errors: int = 0  # answers other than 200
    killed_at_progress: str = ""
    job_attempts: int = 0
    job_status: str = ""
    restart_s: float = 0.0  # kill -> the second service answers
    reclaim_s: float = 0.0  # kill -> the job is taken back
    resume_s: float = 0.0  # kill -> the job is done again
    v2_whole_after: bool = False

    @property
    def ok(self) -> bool:
        """No partial or early version seen, and the job resumed and stored the new version whole."""
        return (
            self.partial == 0
            and self.back_to_v1 == 0
            and self.errors == 0
            and self.v1_whole > 0
            and self.job_status == "done"
            and self.job_attempts == 2
            and self.v2_whole_after
        )


def _auth(user: str) -> dict[str, str]:
    now = int(time.time())
    token = jwt.encode({"id": user, "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


def _version(texts: list[str], count_of: dict[str, int]) -> str:
    """'v1' or 'v2' when `texts` are all of one version (and, with a count, all of it), else 'partial'."""
    for prefix, count in count_of.items():
        if texts and all(t.startswith(prefix + " ") for t in texts) and (count < 0 or len(texts) == count):
            return prefix
    return "partial"


def _document(version: str, paragraphs: int) -> str:
    # distinct paragraphs (no reuse of vectors between versions), each about one chunk long
    return "\n\n".join(
        f"{version} section {i}: the ALPHA procedure step {i} says " + f"item-{version}-{i} " * 90
        for i in range(paragraphs)
    )


@contextlib.asynccontextmanager
async def _service(
    dsn: str, data_dir: Path, log_path: Path, settings: dict[str, str], *, start_within_s: float
) -> AsyncIterator[Any]:
    from benchmarks.service import ServiceProcess

    service = ServiceProcess(dsn, SECRET, data_dir, log_path, settings)
    await service.start(within_s=start_within_s)
    try:
        yield service
    finally:
        if service.process is not None and service.process.poll() is None:
            await service.stop()


async def run_kill(dsn: str, *, chunks: int, stale_s: int, workdir: Path, timeout_s: float) -> KillResult:
    """Upload v1, accept v2 as a job, SIGKILL the service mid-job, start another, watch the file."""
    result = KillResult()
    data_dir = workdir / "data"
    settings = {
        "COLLECTION_NAME": f"faults_{uuid.uuid4().hex[:8]}",
        "INDEXER_STALE_TIMEOUT": str(stale_s),
        # above the stale timeout would be the advice; here the run must be short (a warning is logged)
        "INDEXER_JOB_TIMEOUT_MS": "300000",
        "INDEXER_CONCURRENCY": "2",
    }
    user, file_id = "fault-user", "manual"
    headers = _auth(user)
    prober = _Prober(file_id, headers, result, chunks)
    async with build_http_client(timeout_s=30) as client:
        async with _service(
            dsn, data_dir, workdir / "service-1.log", settings, start_within_s=timeout_s
        ) as first:
            prober.url = first.base_url
            r = await client.post(
                f"{first.base_url}/embed",
                data={"file_id": file_id},
                files={"file": ("manual.txt", _document("v1", 3).encode(), "text/plain")},
                headers=headers,
            )
            r.raise_for_status()
            result.chunks_v1 = len(
                (
                    await client.get(f"{first.base_url}/documents", params={"ids": file_id}, headers=headers)
                ).json()
            )
            log(f"kill: v1 stored ({result.chunks_v1} chunks); uploading v2 ({chunks} paragraphs) as a job")
            probing = asyncio.create_task(prober.run(client))
            job_id, killed = await _kill_while_embedding(
                client, first, file_id, headers, chunks, timeout_s, result
            )
            prober.url = None
            log(f"kill: SIGKILL sent while the job was {result.killed_at_progress}")
        async with _service(
            dsn, data_dir, workdir / "service-2.log", settings, start_within_s=timeout_s
        ) as second:
            result.restart_s = round(time.monotonic() - killed, 2)
            prober.url = second.base_url
            await _until_the_job_ends(dsn, job_id, killed, timeout_s, result)
            prober.stop.set()
            await probing
            docs = (
                await client.get(f"{second.base_url}/documents", params={"ids": file_id}, headers=headers)
            ).json()
            result.chunks_v2 = len(docs)
            result.v2_whole_after = len(docs) == chunks and all(
                d["page_content"].startswith("v2 ") for d in docs
            )
    log(
        f"kill: {result.probes} probes answered ({result.probes_refused} refused while down), "
        f"{result.v1_whole} v1 whole, {result.v2_whole} v2 whole, {result.partial} partial, "
        f"{result.errors} errors; second service up {result.restart_s} s "
        f"after the kill, job reclaimed at {result.reclaim_s} s, {result.job_status} at {result.resume_s} s "
        f"after {result.job_attempts} attempts; v2 whole afterwards: {result.v2_whole_after} "
        f"({result.chunks_v2} chunks)"
    )
    return result


@dataclass
class _Prober:
    """Reads the file through /documents and /query while a service listens at `url`, until `stop`.

    Each answer on its own must hold one version, whole (the two requests may straddle the job's
    commit, so they may differ from each other); what it saw goes into `result`.
    """

    file_id: str
    headers: dict[str, str]
    result: KillResult
    chunks_v2: int
    url: str | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, client: httpx.AsyncClient) -> None:
        """Probe every 0.1 s until stopped; a refused connection (no service) is counted apart."""
        result = self.result
        while not self.stop.is_set():
            url = self.url
            if url:
                try:
                    docs = await client.get(
                        f"{url}/documents", params={"ids": self.file_id}, headers=self.headers
                    )
                    hits = await client.post(
                        f"{url}/query",
                        json={"query": "ALPHA procedure", "file_id": self.file_id, "k": 3},
                        headers=self.headers,
                    )
                except httpx.HTTPError:
                    result.probes_refused += 1
                else:
                    result.probes += 1
                    if docs.status_code != 200 or hits.status_code != 200:
                        result.errors += 1
                    else:
                        self.judge(
                            [d["page_content"] for d in docs.json()],
                            [h[0]["page_content"] for h in hits.json()],
                        )
            await asyncio.sleep(0.1)

    def judge(self, texts: list[str], found: list[str]) -> None:
        """Count one pair of answers: partial, the new version, the old one after the new, or the old one."""
        result = self.result
        seen = {
            _version(texts, {"v1": result.chunks_v1, "v2": self.chunks_v2}),
            _version(found, {"v1": -1, "v2": -1}),
        }
        if "partial" in seen:
            result.partial += 1
            if len(result.partial_samples) < 5:
                result.partial_samples.append(
                    f"documents {len(texts)}: {sorted({t[:2] for t in texts})}, "
                    f"search {sorted(f[:2] for f in found)}"
                )
        elif "v2" in seen:
            result.v2_whole += 1
        elif result.v2_whole:
            result.back_to_v1 += 1
        else:
            result.v1_whole += 1


async def _kill_while_embedding(
    client: httpx.AsyncClient,
    service: ServiceProcess,
    file_id: str,
    headers: dict[str, str],
    chunks: int,
    timeout_s: float,
    result: KillResult,
) -> tuple[int, float]:
    """Upload v2 as a job and SIGKILL the service inside its embedding; the job's id, the kill's time."""
    r = await client.post(
        f"{service.base_url}/embed",
        params={"async": "true"},
        data={"file_id": file_id},
        files={"file": ("manual.txt", _document("v2", chunks).encode(), "text/plain")},
        headers=headers,
    )
    assert r.status_code == 202, r.text
    job_url = f"{service.base_url}{r.json()['status_url']}"
    job_id = int(r.json()["job_id"])
    deadline = time.monotonic() + timeout_s
    while True:
        job = (await client.get(job_url, headers=headers)).json()
        if job["status"] == "running" and (job.get("progress") or {}).get("note") == "embedding":
            break
        if job["status"] in ("done", "failed") or time.monotonic() > deadline:
            raise RuntimeError(
                f"the job did not get to embedding before the kill (or not within the run's "
                f"time limit, --timeout {timeout_s:.0f} s): {job}"
            )
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # inside the embedding of the new version
    job = (await client.get(job_url, headers=headers)).json()
    result.killed_at_progress = f"{job['status']}: {(job.get('progress') or {}).get('note')}"
    assert service.process is not None
    os.killpg(service.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    service.process.wait()
    return job_id, killed


async def _until_the_job_ends(
    dsn: str, job_id: int, killed: float, timeout_s: float, result: KillResult
) -> None:
    """Watch the job's row: when it is taken back after the kill, and when it is done (or failed)."""
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            row = await conn.fetchrow(
                "SELECT status, attempts, worker FROM ragoverlay_jobs WHERE id = $1", job_id
            )
            assert row is not None
            if not result.reclaim_s and (row["status"] != "running" or row["attempts"] > 1):
                result.reclaim_s = round(time.monotonic() - killed, 2)
            if row["status"] in ("done", "failed"):
                result.resume_s = round(time.monotonic() - killed, 2)
                result.job_status, result.job_attempts = str(row["status"]), int(row["attempts"])
                break
            if time.monotonic() - killed > timeout_s:
                raise RuntimeError(
                    f"out of time: the job was not finished {timeout_s:.0f} s after the kill "
                    f"(the run's time limit, --timeout): {dict(row)}"
                )
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


# --- entry points ---------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _database(dsn: str | None, workdir: Path) -> AsyncIterator[str]:
    if dsn:
        yield dsn
        return
    from app.runtime.postgres import EmbeddedPostgres

    folder = workdir / "postgres"
    await asyncio.to_thread(workdir.chmod, 0o755)  # the server may run as another user (root)
    server = EmbeddedPostgres(folder)
    info = await asyncio.to_thread(server.start)
    try:
        yield info.dsn
    finally:
        await asyncio.to_thread(server.stop)


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Both runs, with their figures."""
    workdir = Path(tempfile.mkdtemp(prefix="ragoverlay-jobs-faults-"))
    async with _database(args.dsn, workdir) as dsn:
        replicas = await run_replicas(
            dsn, jobs=args.jobs, concurrency=args.concurrency, timeout_s=args.timeout
        )
        kill = await run_kill(
            dsn, chunks=args.chunks, stale_s=args.stale, workdir=workdir, timeout_s=args.timeout
        )
    report = {
        "replicas": {**asdict(replicas), "ok": replicas.ok},
        "kill": {**asdict(kill), "ok": kill.ok},
        "workdir": str(workdir),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.jobs_faults [worker ...]`."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.jobs_faults", description=__doc__.split("\n")[0]
    )
    parser.add_argument("mode", nargs="?", choices=["all", "worker"], default="all")
    parser.add_argument("--dsn", help="a database to use (default: an embedded PostgreSQL in a temp folder)")
    parser.add_argument("--queue", help="worker mode: the queue")
    parser.add_argument("--jobs", type=int, default=1000, help="probe jobs of the replicas run")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs at once per worker process")
    parser.add_argument("--chunks", type=int, default=1500, help="chunks of the large upload of the kill run")
    parser.add_argument(
        "--stale", type=int, default=3, help="INDEXER_STALE_TIMEOUT of the kill run's services"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds each run may take")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.mode == "worker":
        asyncio.run(worker_main(args.dsn, args.queue, args.concurrency, args.timeout))
        return 0
    report = asyncio.run(run_all(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    ok = report["replicas"]["ok"] and report["kill"]["ok"]
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
