"""`RAG_WORKERS=2 scripts/serve`: two processes behind one port, one embedded PostgreSQL, one lock.

Which worker answers a connection is the kernel's choice, so the tests find out instead of choosing:
`ragoverlay_process_http_requests_total{pid}` (every worker's counts, added up in the shared
metrics folder) says which pid answered the requests a keep-alive connection sent.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from app.runtime.lock import holder_pid
from app.runtime.postgres import LOCK_NAME
from tests.fixtures.patience import ceiling, wait_until
from tests.fixtures.serve import free_port, serving
from tests.integration.mcp_support import ACCEPT, PROTOCOL, initialize_body, messages

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

METRICS_TOKEN = "workers-test-" + "m" * 16
PROCESS_REQUESTS = re.compile(r'^ragoverlay_process_http_requests_total\{pid="(\d+)"\} ([0-9.e+]+)$', re.M)
PROBES = 5  # requests a connection sends to be recognised: more than the one scrape in between


@dataclass
class Served:
    base: str
    data_dir: Path
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-workers-"))
    data_dir.chmod(0o755)  # the embedded server may run as another user when tests run as root
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAG_", "JWT_", "DB_", "POSTGRES_", "DATABASE_", "EMBEDDINGS_", "S3_"))
    }
    env.update(
        {"RAG_PORT": str(port), "DATA_DIR": str(data_dir), "RAG_WORKERS": "2", "METRICS_TOKEN": METRICS_TOKEN}
    )
    try:
        with serving(env, data_dir / "serve.log", timeout_s=240) as process:
            yield Served(f"http://127.0.0.1:{port}", data_dir, process)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def workers_of(parent_pid: int) -> set[int]:
    """The live worker processes of the service (uvicorn spawns them: `spawn_main` in their command)."""
    try:
        children = psutil.Process(parent_pid).children()
    except psutil.NoSuchProcess:
        return set()
    live = set()
    for child in children:
        try:  # a worker just killed is a zombie until uvicorn reaps it: not live
            if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                live.add(child.pid)
        except psutil.Error:
            continue
    return live


def answered(base: str) -> dict[int, float]:
    """Requests answered so far, by worker pid, from /metrics (all workers' counts, whoever answers)."""
    r = httpx.get(
        f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=ceiling(10)
    )
    assert r.status_code == 200, r.text
    return {int(pid): float(n) for pid, n in PROCESS_REQUESTS.findall(r.text)}


def worker_of(client: httpx.Client, base: str) -> int:
    """The pid of the worker that answers `client`'s keep-alive connection."""
    before = answered(base)
    for _ in range(PROBES):
        assert client.get("/health").status_code == 200
    after = answered(base)
    grown = [pid for pid, n in after.items() if n - before.get(pid, 0.0) >= PROBES]
    assert len(grown) == 1, (before, after)
    return grown[0]


def one_connection(base: str) -> httpx.Client:
    """A client that keeps one connection open (so one worker answers it)."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60)
    return httpx.Client(base_url=base, limits=limits, timeout=ceiling(120))


def clients_on_two_workers(base: str) -> tuple[httpx.Client, httpx.Client, int, int]:
    """Two one-connection clients answered by different workers."""
    first = one_connection(base)
    pid_a = worker_of(first, base)
    opened: list[httpx.Client] = []

    def another() -> tuple[httpx.Client, int] | None:
        client = one_connection(base)
        opened.append(client)
        pid = worker_of(client, base)
        return (client, pid) if pid != pid_a else None

    second, pid_b = wait_until(another, what="a connection answered by the other worker", within_s=30)
    for client in opened:
        if client is not second:
            client.close()
    return first, second, pid_a, pid_b


def upload(client: httpx.Client, file_id: str, text: str) -> None:
    r = client.post(
        "/embed", data={"file_id": file_id}, files={"file": (f"{file_id}.txt", text.encode(), "text/plain")}
    )
    assert r.status_code == 200 and r.json()["status"] is True, r.text


def search(client: httpx.Client, query: str, file_id: str) -> list[str]:
    r = client.post("/query_multiple", json={"query": query, "file_ids": [file_id], "k": 5})
    if r.status_code == 404:  # the overlay's "no results"
        return []
    assert r.status_code == 200, r.text
    return [doc["page_content"] for doc, _ in r.json()]


def test_two_workers_share_the_port_and_the_parent_holds_the_lock(served: Served) -> None:
    workers = wait_until(lambda: workers_of(served.process.pid), what="the workers", within_s=30)
    assert len(workers) == 2
    # the parent owns DATA_DIR (and so the embedded PostgreSQL); no worker took the lock
    assert holder_pid(served.data_dir, LOCK_NAME) == served.process.pid

    def burst() -> set[int]:
        # fresh connections, many at once: the kernel hands them to whichever worker accepts first
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda _: httpx.get(f"{served.base}/health", timeout=ceiling(10)).status_code, range(64)
                )
            )
        busy = {pid for pid, n in answered(served.base).items() if n > 0}
        return busy if len(busy) == 2 else set()

    assert wait_until(burst, what="requests answered by both workers", within_s=60) == workers


def test_one_worker_sees_what_the_other_uploaded_replaced_and_deleted(served: Served) -> None:
    """The vector cache is per process: its revision check must catch a change made by the other one."""
    a, b, pid_a, pid_b = clients_on_two_workers(served.base)
    try:
        upload(b, "w-harbour", "The lighthouse keeper recorded a storm that lasted nine days.")
        assert any("nine days" in text for text in search(a, "How long was the storm?", "w-harbour"))
        # replaced through the other worker: A's cache holds the old revision
        upload(b, "w-harbour", "The new pier was built in 1972 from granite blocks.")
        found = search(a, "When was the pier built?", "w-harbour")
        assert any("1972" in text for text in found) and not any("nine days" in t for t in found)
        r = b.request("DELETE", "/documents", json=["w-harbour"])
        assert r.status_code == 200, r.text
        assert search(a, "When was the pier built?", "w-harbour") == []
        # the connections stayed with their workers throughout (else this test proved nothing)
        assert (worker_of(a, served.base), worker_of(b, served.base)) == (pid_a, pid_b)
    finally:
        a.close()
        b.close()


def test_upload_jobs_are_claimed_by_both_workers_and_each_runs_once(served: Served) -> None:
    """Claims are PostgreSQL's (FOR UPDATE SKIP LOCKED and a lock per job): two processes never share one."""
    workers = workers_of(served.process.pid)
    jobs: list[int] = []
    claimers: set[int] = set()

    def submit_and_count() -> bool:
        def one(n: int) -> int:
            text = f"Entry {n} of the harbour ledger: {n} boats came in before the storm."
            r = httpx.post(
                f"{served.base}/embed?async=true",
                data={"file_id": f"w-job-{len(jobs)}-{n}"},
                files={"file": (f"ledger-{n}.txt", text.encode(), "text/plain")},
                timeout=ceiling(60),
            )
            assert r.status_code == 202, r.text
            return int(r.json()["job_id"])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            batch = list(pool.map(one, range(8)))
        jobs.extend(batch)
        for job_id in batch:
            row = wait_until(
                lambda job_id=job_id: finished(served.base, job_id), what=f"job {job_id}", within_s=60
            )
            assert row["status"] == "done" and row["attempts"] == 1, row
            claimers.add(int(row["worker"].split(":")[-2]))  # host:pid:id
        return len(claimers) == 2

    wait_until(submit_and_count, what="jobs claimed by both workers", within_s=120)
    assert claimers == workers


def finished(base: str, job_id: int) -> dict[str, object] | None:
    """The admin's view of a job once it ended (unauthenticated: the local operator is the admin)."""
    r = httpx.get(f"{base}/admin/jobs/{job_id}", timeout=ceiling(10))
    assert r.status_code == 200, r.text
    row: dict[str, object] = r.json()
    return row if row["status"] in ("done", "failed") else None


def test_an_mcp_client_is_answered_by_either_worker_without_a_session(served: Served) -> None:
    """With RAG_WORKERS > 1, MCP_STATELESS "auto" keeps no sessions: what one worker was told in
    `initialize` is not needed by the other, which answers the client's next connection."""
    first, second, pid_a, pid_b = clients_on_two_workers(served.base)
    upload(first, "mcp-workers", "The night heron hunts at dusk along the river bank.")
    headers = {**ACCEPT, "mcp-protocol-version": PROTOCOL}
    try:
        opened = first.post("/mcp", json=initialize_body(), headers={**ACCEPT})
        assert opened.status_code == 200, opened.text
        assert "mcp-session-id" not in opened.headers  # nothing kept: no session to find again
        for client in (second, first, second):  # the other worker, then back
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {
                    "name": "rag_search",
                    "arguments": {"query": "When does the night heron hunt?", "file_ids": ["mcp-workers"]},
                },
            }
            r = client.post("/mcp", json=body, headers=headers)
            assert r.status_code == 200, r.text
            (answer,) = [m for m in messages(r) if m.get("id") == 7]
            assert "dusk" in json.dumps(answer["result"]), answer
    finally:
        first.close()
        second.close()
    assert pid_a != pid_b


def test_a_killed_worker_is_replaced_and_the_service_keeps_answering(served: Served) -> None:
    before = wait_until(lambda: workers_of(served.process.pid), what="the workers", within_s=30)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)

    def replaced() -> set[int] | None:
        now = workers_of(served.process.pid)
        return now if len(now) == 2 and victim not in now else None

    after = wait_until(replaced, what="a new worker in place of the killed one", within_s=60)
    assert victim not in after and len(after - before) == 1
    with one_connection(served.base) as client:
        upload(client, "w-after-kill", "Gulls nest on the northern cliff every spring.")
    # fresh connections reach either worker (the new one accepts only once its app has started)
    for _ in range(8):
        with one_connection(served.base) as client:
            assert any("Gulls" in t for t in search(client, "Where do gulls nest?", "w-after-kill"))


def test_the_parent_restarts_a_dead_embedded_postgresql_and_the_workers_recover(served: Served) -> None:
    """A worker replaced while the database is down may fail to start: it is started again, the
    service does not stop (uvicorn alone would stop every worker; the last test checks the exit code)."""
    pid_file = served.data_dir / "postgres" / "postmaster.pid"
    postmaster = int(pid_file.read_text().split()[0])
    os.kill(min(workers_of(served.process.pid)), signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)

    def restarted() -> bool:
        try:
            now = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        return now != postmaster and psutil.pid_exists(now)

    wait_until(restarted, what="the embedded PostgreSQL started again by the parent", within_s=60)

    def both_answer() -> bool:
        # fresh connections, so both workers are asked; each must have reset its pool
        with one_connection(served.base) as client:
            r = client.post("/query_multiple", json={"query": "gulls", "file_ids": ["w-after-kill"], "k": 1})
        return r.status_code == 200 and bool(r.json())

    for _ in range(8):
        wait_until(both_answer, what="a search answered after the database restart", within_s=60)
    wait_until(lambda: len(workers_of(served.process.pid)) == 2, what="two workers again", within_s=60)
    assert served.process.poll() is None


def test_sigterm_stops_the_workers_then_the_database_and_frees_the_folder(served: Served) -> None:
    workers = workers_of(served.process.pid)
    postmaster = int((served.data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    assert workers and psutil.pid_exists(postmaster)
    # the workers' shared metrics folder, made by the parent for them
    metrics_dir = Path(psutil.Process(min(workers)).environ()["PROMETHEUS_MULTIPROC_DIR"])
    assert metrics_dir.is_dir()
    os.kill(served.process.pid, signal.SIGTERM)
    assert served.process.wait(timeout=ceiling(60)) == 0
    wait_until(
        lambda: not any(psutil.pid_exists(pid) for pid in (*workers, postmaster)),
        what="the workers and the embedded PostgreSQL to exit",
        within_s=30,
    )
    assert holder_pid(served.data_dir, LOCK_NAME) is None
    assert not (served.data_dir / "postgres" / "postmaster.pid").exists()
    assert not metrics_dir.exists()
