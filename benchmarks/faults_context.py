"""What the fault scenarios share: how long and hard they run, the narrative, the working folder,
the scripted embedding server and the main service, and what they read from a service."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.faults_clients import JWT_SECRET, upload_op
from benchmarks.faults_upstreams import EmbeddingServer
from benchmarks.service import ServiceProcess

METRICS_TOKEN = "faults-metrics-" + secrets.token_hex(8)


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


async def seed_on(service: ServiceProcess, user: str, count: int) -> list[str]:
    op = upload_op(user, "seed", fresh=False)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=120) as http:
        for n in range(count):
            r = await op(http, n)
            if r.status_code != 200:
                raise RuntimeError(f"seeding failed: {r.status_code} {r.text[:200]}")
    return [f"seed-{n}" for n in range(count)]
