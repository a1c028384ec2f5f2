"""Several service processes behind one port (`RAG_WORKERS`): the parent owns, the workers serve.

With `RAG_WORKERS=1` (the default) `python -m app` is one process, as before. With N > 1 the parent
process (app/__main__.py) has already claimed the DATA_DIR lock and bound the port; here it then
- starts the embedded PostgreSQL (when used) and applies the migrations, once;
- starts N workers with uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`): each is a
  fresh (spawned) interpreter that builds the whole app (`app.main.worker_app`) against the running database
  as a client (`attach_database`: it never starts, restarts or stops the server and takes no lock)
  and accepts connections from the parent's socket; a worker that dies is started again;
- watches the embedded server and starts it again when it died (the workers' own supervisors only
  notice the outage and reset their pools afterwards);
- on SIGTERM or SIGINT stops the workers (each finishes its requests, up to 30 s), then the server.

What each worker holds for itself, and what they share (docs/operations.md, "Several processes"):
the job queue, the index builds and the maintenance passes are PostgreSQL's (claims and advisory
locks), so any worker runs them and none twice; the vector cache is per process and checks each
file's revision against the database on every search; a rate limit is per process, its budget
divided by N; `/metrics` adds up every worker's counters (prometheus-client's multiprocess mode,
in a folder the parent makes and removes).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from app.config import Settings, load_settings
from app.logs import configure_logging
from app.runtime.postgres import EmbeddedPostgres
from app.runtime.request_timeouts import stall_guarded_protocol
from app.store.db import bootstrap

logger = logging.getLogger(__name__)

# one worker's memory besides its vector cache: 365-401 MiB measured with the offline model loaded
# and a 200-file list cached (docs/operations.md), rounded up; `auto` starts no more than fit
WORKER_MEMORY_MB = 450
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus-client when a worker imports it
GRACEFUL_SHUTDOWN_S = 30
PR_SET_PDEATHSIG = 1  # prctl(2)
# the embedded PostgreSQL allows 100 connections: 6 workers of POOL_FLOOR, each with its job lease
# and probes, stay under it; more workers need RAG_WORKERS=N and a server that allows more
MAX_AUTO_WORKERS = 6
POOL_FLOOR = 10  # not measured: room for a burst of searches besides the jobs' connections
# how often the parent looks at the embedded server (a pid file and a TCP connect): one process's
# supervisor is woken by the first failed request instead, which the parent never sees
WATCH_INTERVAL_S = 1.0


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def memory_limit_mb() -> int | None:
    """The memory this process may use: its cgroup's limit, else the machine's; None when unknown."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            return int(limit) // (1024 * 1024)
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return None


def worker_count(setting: int | str, cache_mb: int = 0) -> int:
    """RAG_WORKERS as a number: `auto` is the usable cores, no more than the memory holds (1 to 6).

    Each worker is counted at WORKER_MEMORY_MB plus `cache_mb` (VECTOR_CACHE_MB: a full cache).
    """
    if setting != "auto":
        return int(setting)
    cores = usable_cores()
    memory = memory_limit_mb()
    # half the memory at most: the embedded PostgreSQL and the page cache want the rest
    fit = cores if memory is None else memory // 2 // (WORKER_MEMORY_MB + cache_mb)
    return max(1, min(cores, fit, MAX_AUTO_WORKERS))


def worker_settings(settings: Settings) -> Settings:
    """One worker's settings: DB_POOL_MAX_SIZE shared out among the workers, POOL_FLOOR at least each;
    MCP without sessions unless MCP_STATELESS says otherwise."""
    workers = worker_count(settings.workers)
    ceiling = settings.db_pool_max_size
    size = min(ceiling, max(POOL_FLOOR, math.ceil(ceiling / workers)))
    # a session lives in the worker that opened it, and the kernel hands each new connection to any
    # worker: a client's next connection would meet 404 for its session two times in three (N=3)
    stateless = settings.mcp_stateless if isinstance(settings.mcp_stateless, bool) else workers > 1
    return settings.model_copy(
        update={
            "db_pool_max_size": size,
            "db_pool_min_size": min(settings.db_pool_min_size, size),
            "mcp_stateless": stateless,
        }
    )


def __getattr__(name: str) -> Any:
    """`GuardedHttp`: the stall-guarded protocol class, built from the settings when uvicorn imports it.

    uvicorn hands its configuration to each spawned worker by pickling it, and a class made at
    run time does not pickle; an import string does, and it lands here in the worker.
    """
    if name == "GuardedHttp":
        return stall_guarded_protocol(load_settings().request_header_timeout_s)
    raise AttributeError(name)


def die_with_parent() -> None:
    """In a worker: the kernel sends SIGTERM when the parent dies, even by SIGKILL (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class _Workers(Multiprocess):
    """uvicorn's supervisor, but a worker that cannot start stops the service only at its start.

    uvicorn stops every worker when one exits before it served (exit code 3: the app, or the socket,
    would fail the same way again). True at the service's start; but once a worker has served, a
    replacement that fails (it started while the database was down, say) is started again instead.
    Dead workers' gauges leave the metrics folder.
    """

    startup_failed = False  # a worker could not start before any had served: the exit code says so
    served = False  # some worker has finished its start-up

    def keep_subprocess_alive(self) -> None:
        """Replace each dead (or hung) worker; see the class docstring for one that could not start."""
        if self.should_exit.is_set():
            return  # stopping: nothing to replace
        for idx, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                # one more ping per round, until a worker is up: from then on failures are restarted
                self.served = self.served or process.is_ready(timeout=self.config.timeout_worker_healthcheck)
                continue
            process.kill()  # hung, or already gone
            process.join()
            if process.exitcode == STARTUP_FAILURE and not self.served:
                logger.error("Worker %s could not start; stopping the service", process.pid)
                self.startup_failed = True
                self.should_exit.set()
                return
            _forget_dead_workers({process.pid})
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement


def _forget_dead_workers(pids: set[int | None]) -> None:
    from prometheus_client import multiprocess

    for pid in pids:
        if pid is not None:
            logger.warning("Worker %d stopped; a new one takes its place", pid)
            multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _DatabaseWatch:
    """The parent's watch on the embedded PostgreSQL: start it again when it died."""

    def __init__(self, server: EmbeddedPostgres, interval_s: float) -> None:
        self.server = server
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="embedded-postgres-watch", daemon=True)

    def start(self) -> None:
        """Watch in a thread of its own (the main thread runs the workers' supervisor)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching before the server is stopped, so nothing starts it again."""
        self.stopping.set()
        self._thread.join(timeout=self.interval_s + 65)

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                if self.server.restart():
                    logger.warning("Restarted the embedded PostgreSQL on port %s", self.server.port)
            except Exception as exc:  # its old processes may still hold shared memory: next round
                logger.warning("Could not restart the embedded PostgreSQL yet: %s", type(exc).__name__)


def _own_database(settings: Settings) -> EmbeddedPostgres | None:
    """Start the embedded server (when used) and apply the migrations once, before any worker."""
    server = None
    dsn = settings.external_dsn() if not settings.use_embedded_postgres else ""
    if settings.use_embedded_postgres:
        server = EmbeddedPostgres(settings.postgres_data_dir)
        dsn = server.start().dsn
    try:
        asyncio.run(bootstrap(dsn, settings.collection_name))
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return server


def _config(settings: Settings, workers: int) -> uvicorn.Config:
    return uvicorn.Config(
        "app.main:worker_app",
        factory=True,
        workers=workers,
        host=settings.bind_host,
        port=settings.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
        http="app.runtime.workers:GuardedHttp",
    )


def serve_workers(settings: Settings, listener: socket.socket, workers: int) -> int:
    """Own the database, run `workers` processes on `listener` until SIGTERM/SIGINT, then stop all."""
    configure_logging(debug=settings.debug, console_json=settings.console_json)
    server = _own_database(settings)
    metrics_dir = tempfile.mkdtemp(prefix="ragoverlay-metrics-")
    # inherited by every worker (spawned after this): the same count, one metrics folder
    os.environ.update({"RAG_WORKERS": str(workers), METRICS_DIR_ENV: metrics_dir})
    os.environ.pop("WEB_CONCURRENCY", None)  # RAG_WORKERS wins over it anyway; one name is clearer
    watch = _DatabaseWatch(server, WATCH_INTERVAL_S) if server is not None else None
    try:
        if watch is not None:
            watch.start()
        print(f"ragoverlay: {workers} worker processes on port {settings.port}", file=sys.stderr)
        supervisor = _Workers(_config(settings, workers), sockets=[listener])
        supervisor.run()
    finally:
        if watch is not None:
            watch.stop()
        if server is not None:
            server.stop()  # last: every worker has stopped using it
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return STARTUP_FAILURE if supervisor.startup_failed else 0
