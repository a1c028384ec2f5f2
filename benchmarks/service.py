"""The service under test as a subprocess: configurations, start-up, tokens, memory, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import jwt
import psutil

from app.clients.http import build_http_client

REPO_ROOT = Path(__file__).resolve().parent.parent
HUGE_ROWS = "1000000000"  # EXACT_SCAN_MAX_ROWS above any estimate: the exact scan always runs

# Settings the benchmark passes per configuration (the service ignores names it does not know).
CONFIGURATIONS: dict[str, tuple[dict[str, str], str]] = {
    "exact": (
        {"EXACT_SCAN_MAX_ROWS": HUGE_ROWS, "VECTOR_INDEX": "none"},
        "exact scan forced (EXACT_SCAN_MAX_ROWS huge, VECTOR_INDEX=none)",
    ),
    "auto": ({}, "service defaults: exact below EXACT_SCAN_MAX_ROWS, HNSW above"),
    "index": (
        {"EXACT_SCAN_MAX_ROWS": "0"},
        "EXACT_SCAN_MAX_ROWS=0: the index path wherever the service allows it",
    ),
}
_LIVE: set[Killable] = set()  # for the last-resort cleanup in `terminate_all`


class Killable(Protocol):
    """A process the benchmark started and must not leave behind (a service, rag_api)."""

    def kill_now(self) -> None:
        """Synchronous last resort: terminate it now."""


def track(process: Killable) -> None:
    """Stop `process` in `terminate_all` if nothing else has (interrupts, errors)."""
    _LIVE.add(process)


def untrack(process: Killable) -> None:
    """`process` is stopped: `terminate_all` may forget it."""
    _LIVE.discard(process)


@dataclass(frozen=True)
class Configuration:
    """One way of running the service: a name and the environment that selects it."""

    name: str
    env: dict[str, str]
    description: str


def configurations(names: list[str], extra_env: dict[str, str]) -> list[Configuration]:
    """The requested configurations, each with the user's extra settings applied on top."""
    out = []
    for name in names:
        if name not in CONFIGURATIONS:
            raise ValueError(f"unknown configuration {name!r} (choose from {', '.join(CONFIGURATIONS)})")
        env, description = CONFIGURATIONS[name]
        out.append(Configuration(name, {**env, **extra_env}, description))
    return out


def make_token(secret: str, user_id: str, ttl: int = 6 * 3600) -> str:
    """An HS256 token like LibreChat's: `{id, iat, exp}`."""
    now = int(time.time())
    return jwt.encode({"id": user_id, "iat": now, "exp": now + ttl}, secret, algorithm="HS256")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_environment(settings: dict[str, str], repo_root: Path = REPO_ROOT) -> dict[str, str]:
    """Our environment minus every variable the service reads, plus `settings`."""
    from app.config_env import without_service_variables  # the service's own list of variable names

    env = without_service_variables(os.environ)
    env["PYTHONPATH"] = str(repo_root)  # that checkout's `app`, whatever is installed
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


class MemorySampler(threading.Thread):
    """Samples a process's RSS every `interval` seconds and keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        """Sample until stopped or the process is gone."""
        while not self._stop_event.is_set():
            try:
                rss = self.process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return
            self.peak_rss = max(self.peak_rss, rss)
            self.samples += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        """End sampling."""
        self._stop_event.set()
        self.join(timeout=2)


@dataclass(eq=False)  # identity semantics: kept in a set of live processes
class ServiceProcess:
    """`python -m app` against the benchmark database, started and stopped by us."""

    dsn: str
    jwt_secret: str
    data_dir: Path
    log_path: Path
    settings: dict[str, str]
    port: int = field(default_factory=free_port)
    # the checkout whose `app` runs, and its interpreter (another git ref's, for `--ab`)
    repo_root: Path = REPO_ROOT
    python: str = sys.executable
    process: subprocess.Popen[bytes] | None = None
    sampler: MemorySampler | None = None
    started_at: float = 0.0

    @property
    def base_url(self) -> str:
        """Where the service listens."""
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The complete environment of the subprocess."""
        return service_environment(
            {
                "DATABASE_URL": self.dsn,
                "JWT_SECRET": self.jwt_secret,
                "RAG_HOST": "127.0.0.1",
                "RAG_PORT": str(self.port),
                "DATA_DIR": str(self.data_dir),
                "EMBEDDINGS_PROVIDER": "local",
                **self.settings,
            },
            self.repo_root,
        )

    async def start(self, within_s: float) -> float:
        """Start the process and wait for `GET /health` -> UP; returns seconds to healthy."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            # Popen returns at once; a synchronous handle lets `terminate_all` clean up even after
            # the event loop is gone (Ctrl-C)
            self.process = subprocess.Popen(  # noqa: ASYNC220
                [self.python, "-m", "app"],
                cwd=str(self.data_dir),  # not the checkout: its .env must not configure the run
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us; we stop the service in order
            )
        finally:
            log.close()
        _LIVE.add(self)
        self.started_at = time.perf_counter()
        self.sampler = MemorySampler(self.process.pid)
        self.sampler.start()
        deadline = self.started_at + within_s
        async with build_http_client(timeout_s=2.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"the service exited with {self.process.returncode}; log tail:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    reply = await client.get(f"{self.base_url}/health")
                    if reply.status_code == 200 and reply.json().get("status") == "UP":
                        return time.perf_counter() - self.started_at
                if time.perf_counter() > deadline:
                    raise RuntimeError(
                        f"the service was not healthy after {within_s:.0f} s:\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.2)

    def vm_hwm_bytes(self) -> int | None:
        """Peak resident set size the kernel recorded for the process (VmHWM)."""
        if self.process is None:
            return None
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    async def stop(self, within_s: float = 30.0) -> dict[str, Any]:
        """SIGTERM, wait, SIGKILL if needed; returns memory figures and the exit code."""
        facts: dict[str, Any] = {"vm_hwm_bytes": self.vm_hwm_bytes()}
        if self.sampler is not None:
            self.sampler.stop()
            facts["peak_rss_sampled_bytes"] = self.sampler.peak_rss
            facts["rss_samples"] = self.sampler.samples
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, within_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)
        facts["exit_code"] = proc.returncode if proc is not None else None
        _LIVE.discard(self)
        return facts

    def kill_now(self) -> None:
        """Synchronous last resort (interrupt paths): terminate, then kill."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the service log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def terminate_all() -> None:
    """Stop every service still running (called from the outermost `finally`)."""
    for service in list(_LIVE):
        service.kill_now()
        _LIVE.discard(service)
