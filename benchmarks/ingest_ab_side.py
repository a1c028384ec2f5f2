"""One side of `scripts/bench ingest-ab`: a checkout's service on its own embedded PostgreSQL; its uploads.

    tree = ref_checkout(commit)             # ~/.cache/ragoverlay/bench-ingest-ab/ref-<commit>, with .venv
    side = Side("A", name, tree, python, root)
    await side.start()                      # PostgreSQL, then the service (V2 for EVIDENCE_USER only)
    upload = await side.upload(pdf, "v1")   # CPU seconds of the service's process tree, wall, ready
    await side.stop()

V1 alone is an upload of V1_USER, whose namespace evidence search does not serve; V1 + evidence is
one of EVIDENCE_USER, listed in RAG_V2_NAMESPACE_IDS. "Ready" is when `/query_v2` for that file
answers whole (200, not degraded, no missing file): at once for this checkout's upload that staged its
evidence in its own transaction, after the evidence job for the previous release. CPU is read before
the upload and after the service is quiet again (the job that follows an upload is counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.runtime.postgres import EmbeddedPostgres
from benchmarks import ingest_measure as m
from benchmarks.service import REPO_ROOT, ServiceProcess, make_token

REF_CACHE = Path.home() / ".cache" / "ragoverlay" / "bench-ingest-ab"
V1_USER = "bench-v1"
EVIDENCE_USER = "bench-evidence"
QUERIES = {"en": "How do I install a package?", "de": "Wie installiere ich ein Paket?"}
SMALL_TEXT = b"Small upload while a big one embeds: the K 28 heater weighs 12 kg and draws 2.8 kW. "
SMALL_TEXT = (SMALL_TEXT * 3)[:170]
MARKER = ".ragoverlay-bench-ref"


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, check=True, capture_output=True).stdout


def ref_checkout(commit: str, cache: Path = REF_CACHE) -> Path:
    """`commit`'s files (a `git archive` export) with their own .venv, kept under `cache` for the next run.

    A folder already there keeps its .venv (the export is made beside it and the .venv moved in), so
    only a changed lock reinstalls (the ref's own `scripts/lib/venv.sh` decides).
    """
    folder = cache / f"ref-{commit[:12]}"
    marker = folder / MARKER
    if not (marker.is_file() and marker.read_text().strip() == commit):
        fresh = Path(tempfile.mkdtemp(prefix=f"ref-{commit[:12]}.", dir=cache))
        with tempfile.TemporaryFile() as archive:
            archive.write(_git("archive", "--format=tar", commit))
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(fresh, filter="data")
        if (folder / ".venv").is_dir():
            (folder / ".venv").rename(fresh / ".venv")
        shutil.rmtree(folder, ignore_errors=True)
        fresh.rename(folder)
        folder.chmod(0o755)
    subprocess.run(["bash", "-c", ". scripts/lib/venv.sh; ensure_venv"], cwd=folder, check=True, timeout=1800)
    marker.write_text(commit + "\n")
    return folder


@dataclass
class UploadResult:
    """One upload's figures on one side."""

    side: str
    name: str  # the file's name in the set (`ch03.en`, `manual-300p.de`)
    file_id: str
    mode: str  # "v1": V1 alone; "evidence": V1 + evidence
    pages: int
    status: int
    wall_s: float  # POST /embed until its answer
    ready_after_s: float | None  # from the answer until /query_v2 answers whole (evidence only)
    cpu_s: float  # the service's process tree, until quiet again
    db_cpu_s: float  # the side's PostgreSQL server (its process tree)
    evidence: dict[str, Any] | None = None  # the answer's `evidence` field (this checkout)
    v1_hits: int | None = None  # /query's results for the file
    v2_hits: int | None = None  # /query_v2's results when ready
    error: str | None = None
    # the machine's 1-minute load average before the upload and when it was measured (CPU seconds
    # grow on a busy machine: read a ratio beside its load)
    load: list[float] | None = None


@dataclass
class Side:
    """A checkout's service on its own embedded PostgreSQL."""

    label: str
    name: str
    tree: Path
    python: str
    root: Path  # this side's data folder
    server: EmbeddedPostgres | None = None
    service: ServiceProcess | None = None
    client: httpx.AsyncClient | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    sampler: m.RssSampler | None = None
    start_s: float = 0.0

    async def start(self, within_s: float = 300.0) -> None:
        """PostgreSQL, then the service; a client with each user's token."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the embedded server runs as another user
        self.server = EmbeddedPostgres(self.root / "postgres")
        info = await asyncio.to_thread(self.server.start)
        secret = secrets.token_urlsafe(32)
        self.service = ServiceProcess(
            dsn=info.dsn,
            jwt_secret=secret,
            data_dir=self.root / "service-data",
            log_path=self.root / "service.log",
            settings={"EMBEDDED_POSTGRES": "false", "RAG_V2_NAMESPACE_IDS": EVIDENCE_USER},
            repo_root=self.tree,
            python=self.python,
        )
        self.start_s = await self.service.start(within_s)
        self.tokens = {u: make_token(secret, u) for u in (V1_USER, EVIDENCE_USER)}
        self.client = httpx.AsyncClient(base_url=self.service.base_url, timeout=7200.0)

    @property
    def pid(self) -> int:
        """The service's process id."""
        assert self.service is not None and self.service.process is not None
        return self.service.process.pid

    def db_pid(self) -> int | None:
        """The PostgreSQL server's postmaster, from its pid file."""
        if self.server is None:
            return None
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.server.pgdata / "postmaster.pid").read_text().split()[0])
        return None

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the service's process tree and of the PostgreSQL server's."""
        db = self.db_pid()
        return m.tree_cpu_seconds(self.pid), m.tree_cpu_seconds(db) if db else 0.0

    async def post(self, path: Path, file_id: str, user: str) -> httpx.Response:
        """`POST /embed` of `path` as LibreChat sends it."""
        assert self.client is not None
        content_type = "application/pdf" if path.suffix == ".pdf" else "text/plain"
        with path.open("rb") as handle:
            return await self.client.post(
                "/embed",
                headers={"Authorization": f"Bearer {self.tokens[user]}"},
                data={"file_id": file_id},
                files={"file": (path.name, handle, content_type)},
            )

    async def v2(self, file_id: str, lang: str) -> tuple[bool, int, str]:
        """Whether `/query_v2` for `file_id` answers whole (200, not degraded, nothing missing); hits."""
        assert self.client is not None
        reply = await self.client.post(
            "/query_v2",
            headers={"Authorization": f"Bearer {self.tokens[EVIDENCE_USER]}"},
            json={"query": QUERIES.get(lang, QUERIES["en"]), "file_ids": [file_id], "k": 3},
        )
        if reply.status_code != 200:
            return False, 0, f"{reply.status_code}"
        body = reply.json()
        whole = not body.get("degraded") and not body.get("missing_files")
        return whole, len(body.get("results") or []), "degraded" if body.get("degraded") else ""

    async def v1_hits(self, file_id: str, user: str, lang: str) -> int:
        """How many chunks `/query` finds in `file_id` (0: not searchable)."""
        assert self.client is not None
        reply = await self.client.post(
            "/query",
            headers={"Authorization": f"Bearer {self.tokens[user]}"},
            json={"query": QUERIES.get(lang, QUERIES["en"]), "file_id": file_id, "k": 3},
        )
        return len(reply.json()) if reply.status_code == 200 else 0

    async def wait_ready(self, file_id: str, lang: str, limit_s: float, poll_s: float = 0.5) -> float | None:
        """Seconds until `/query_v2` answers whole for `file_id`; None when `limit_s` passed first."""
        started = time.perf_counter()
        while time.perf_counter() - started < limit_s:
            whole, _, _ = await self.v2(file_id, lang)
            if whole:
                return time.perf_counter() - started
            await asyncio.sleep(poll_s)
        return None

    async def quiet(self, limit_s: float = 60.0, below: float = 0.1) -> None:
        """Wait until the service's tree uses under `below` CPU-seconds a second (its jobs are done)."""
        started = time.perf_counter()
        last = m.tree_cpu_seconds(self.pid)
        while time.perf_counter() - started < limit_s:
            await asyncio.sleep(1.0)
            now = m.tree_cpu_seconds(self.pid)
            if now - last < below:
                return
            last = now

    async def upload(self, path: Path, name: str, mode: str, pages: int, lang: str) -> UploadResult:
        """One measured upload of `name`: V1 alone (`v1`) or V1 + evidence (`evidence`), until ready and
        quiet."""
        user = EVIDENCE_USER if mode == "evidence" else V1_USER
        file_id = f"{mode}-{name}"
        cpu0, db0 = self.cpu()
        load0 = os.getloadavg()[0]
        started = time.perf_counter()
        reply = await self.post(path, file_id, user)
        wall = time.perf_counter() - started
        out = UploadResult(
            self.label, name, file_id, mode, pages, reply.status_code, round(wall, 3), None, 0, 0
        )
        if reply.status_code != 200:
            out.error = reply.text[:300]
        else:
            out.evidence = reply.json().get("evidence")
            if mode == "evidence":
                ready = await self.wait_ready(file_id, lang, limit_s=max(900.0, 4 * wall))
                out.ready_after_s = None if ready is None else round(ready, 3)
        await self.quiet()
        cpu1, db1 = self.cpu()
        out.cpu_s, out.db_cpu_s = round(cpu1 - cpu0, 3), round(db1 - db0, 3)
        out.load = [round(load0, 2), round(os.getloadavg()[0], 2)]
        if reply.status_code == 200:
            out.v1_hits = await self.v1_hits(file_id, user, lang)
            if mode == "evidence":
                out.v2_hits = (await self.v2(file_id, lang))[1]
        return out

    async def warm_up(self, path: Path, limit_s: float = 600.0) -> dict[str, Any]:
        """`path` uploaded for each user (loads the model; the evidence user's starts its run) and the
        wait until `/query_v2` answers whole for it."""
        facts: dict[str, Any] = {}
        for user in (V1_USER, EVIDENCE_USER):
            reply = await self.post(path, f"warm-up-{user}", user)
            facts[user] = {"status": reply.status_code, "evidence": _field(reply, "evidence")}
        facts["ready_s"] = await self.wait_ready(f"warm-up-{EVIDENCE_USER}", "en", limit_s, poll_s=1.0)
        await self.quiet()
        return facts

    async def small_while_big(
        self, big: Path, small: Path, lang: str, gap_s: float = 1.0, limit: int = 200
    ) -> dict[str, Any]:
        """`small` uploaded again and again, one after another, while `big` uploads to the evidence user;
        then the wait until evidence search answers from `big` and the service is quiet, so that a
        second job after the upload (the previous release's) does not run into the other side's turn."""
        big_id = f"latency-big-{big.stem}"
        big_task = asyncio.create_task(self.post(big, big_id, EVIDENCE_USER))
        started = time.perf_counter()
        latencies: list[float] = []
        statuses: dict[str, int] = {}
        await asyncio.sleep(gap_s)
        while not big_task.done() and len(latencies) < limit:
            t0 = time.perf_counter()
            reply = await self.post(small, f"small-{self.label}-{len(latencies):03d}", EVIDENCE_USER)
            latencies.append(round(time.perf_counter() - t0, 4))
            statuses[str(reply.status_code)] = statuses.get(str(reply.status_code), 0) + 1
            await asyncio.sleep(gap_s)
        big_reply = await big_task
        big_wall = time.perf_counter() - started
        ready = None
        if big_reply.status_code == 200:
            ready = await self.wait_ready(big_id, lang, limit_s=max(900.0, 4 * big_wall))
        await self.quiet()
        return {
            "big": big.name,
            "big_status": big_reply.status_code,
            "big_wall_s": round(big_wall, 3),
            "big_ready_after_s": None if ready is None else round(ready, 3),
            "small_bytes": len(SMALL_TEXT),
            "latencies_s": latencies,
            "statuses": statuses,
        }

    def start_sampling(self) -> None:
        """Sample the service tree's RSS from now on (peak RSS)."""
        self.sampler = m.RssSampler(self.pid, 0.2)
        self.sampler.start()

    async def stop(self) -> dict[str, Any]:
        """The client, the service, then PostgreSQL; memory figures and the exit code."""
        facts: dict[str, Any] = {"start_s": round(self.start_s, 2)}
        if self.sampler is not None:
            self.sampler.stop()
            own, tree = self.sampler.peaks()
            facts.update(peak_rss_mb=round(own / 1e6, 1), peak_tree_rss_mb=round(tree / 1e6, 1))
        if self.client is not None:
            await self.client.aclose()
        if self.service is not None:
            facts.update(await self.service.stop())
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        return facts


def small_files(folder: Path) -> tuple[Path, Path]:
    """The warm-up's text and the 170-byte upload, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    warm, small = folder / "warm-up.txt", folder / "small-170.txt"
    warm.write_bytes(SMALL_TEXT * 20)
    small.write_bytes(SMALL_TEXT)
    return warm, small


def _field(reply: httpx.Response, name: str) -> Any:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(reply.text).get(name)
    return None
