"""A supervised database: the embedded PostgreSQL killed with SIGKILL is restarted by the service,
every route answers 503 with a detail meanwhile (never 500), and both the embedded-mode service and
a service that reaches the same server as an external database (DATABASE_URL) recover without a
restart. A second service on the same DATA_DIR refuses to start."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.runtime.postgres import LOCK_NAME
from app.runtime.supervisor import DatabaseSupervisor
from tests.contract.helpers import query, upload
from tests.fixtures.patience import ceiling, out_of_time, until
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
async def embedded_pair(
    settings_factory: SettingsFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, Path]]:
    """A service on its own embedded PostgreSQL, and a second one using that server as external."""
    # not under pytest's 0700 tmp tree: as root, the server runs as another user that must reach it
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-supervised-"))
    data_dir.chmod(0o755)
    settings = settings_factory(
        database_url=None, embedded_postgres="true", data_dir=data_dir, db_check_interval_s=0.5
    )
    try:
        async with running_app(settings) as embedded:
            supervisor = resources(embedded).database
            assert supervisor is not None and supervisor.embedded is not None
            external = settings_factory(database_url=supervisor.dsn, db_check_interval_s=0.5)
            async with running_app(external) as other:
                yield embedded, other, data_dir
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[0])


async def _status_until(client: httpx.AsyncClient, want: int, timeout_s: float) -> float:
    """Poll /health until it answers `want`; seconds it took."""
    started = time.monotonic()

    async def answers() -> bool:
        return (await client.get("/health")).status_code == want

    await until(answers, what=f"/health to answer {want}", within_s=timeout_s)
    return time.monotonic() - started


async def test_killed_postgres_gives_fast_503s_then_recovers_without_a_restart(
    embedded_pair: tuple[httpx.AsyncClient, httpx.AsyncClient, Path],
) -> None:
    embedded, external, data_dir = embedded_pair
    user = new_id("user")
    files = {}
    for client in (embedded, external):
        fid = new_id()
        r = await upload(client, fid, "a.txt", b"Kingfishers dive for small fish.", auth(user))
        assert r.status_code == 200, r.text
        files[id(client)] = fid
    supervisor = resources(embedded).database
    assert supervisor is not None
    restarts_before = supervisor.status.restarts

    os.kill(_postmaster_pid(data_dir), signal.SIGKILL)
    saw_503 = {id(embedded): 0, id(external): 0}
    deadline = time.monotonic() + ceiling(60)
    recovered: dict[int, float] = {}
    killed_at = time.monotonic()
    while len(recovered) < 2 and time.monotonic() < deadline:
        for client in (embedded, external):
            if id(client) in recovered:
                continue
            started = time.monotonic()
            r = await query(client, "kingfishers", files[id(client)], auth(user))
            took = time.monotonic() - started
            assert r.status_code in (200, 503), (r.status_code, r.text)  # never a 500
            if r.status_code == 503:
                saw_503[id(client)] += 1
                assert "database" in r.json()["detail"].lower()
                assert r.headers["retry-after"]
                # fast: no waiting for a connection that cannot come (QUERY_TIMEOUT_MS, 10 s)
                assert took < min(ceiling(3.0), 9.0), out_of_time(
                    "a fast 503 while the database is down", took
                )
                up = await upload(client, new_id(), "b.txt", b"Herons wait.", auth(user))
                # still down: 503 like the query; the server may also be back by now (the restart
                # races this request), and then the upload is simply stored. The supervisor counts
                # a restart once the server's start returns, which the other service's upload
                # can beat: the count must follow, not precede
                assert up.status_code in (200, 503), up.text
                if up.status_code == 200:
                    await _restart_counted(supervisor, restarts_before, 10)
                if up.status_code == 503:
                    assert "database" in up.json()["detail"].lower()
            else:
                assert r.json()[0][0]["page_content"].startswith("Kingfishers")
                recovered[id(client)] = time.monotonic() - killed_at
        await asyncio.sleep(0.1)
    assert len(recovered) == 2, out_of_time(f"both services to recover (recovered: {recovered})", ceiling(60))
    assert saw_503[id(embedded)] > 0  # the outage was seen, and answered 503
    assert supervisor.status.restarts > restarts_before  # the service restarted its server itself
    for client in (embedded, external):
        await _status_until(client, 200, 10)
        r = await upload(client, new_id(), "c.txt", b"Cormorants dry their wings.", auth(user))
        assert r.status_code == 200, r.text


async def _restart_counted(supervisor: DatabaseSupervisor, before: int, timeout_s: float) -> None:
    """Wait until the supervisor has counted a restart since `before` (fails after `timeout_s`)."""

    async def counted() -> bool:
        return supervisor.status.restarts > before

    await until(counted, what="a restart counted after a write succeeded", within_s=timeout_s, every_s=0.05)


async def test_a_second_service_on_the_same_data_dir_refuses_to_start(
    embedded_pair: tuple[httpx.AsyncClient, httpx.AsyncClient, Path],
) -> None:
    _, _, data_dir = embedded_pair
    assert (data_dir / LOCK_NAME).exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DATABASE_", "DB_", "JWT_"))}
    env.update({"DATA_DIR": str(data_dir), "RAG_PORT": str(free_port())})
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(120),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    message = proc.stderr
    assert f"{data_dir} is in use by process {os.getpid()}" in message
    assert "DATA_DIR of its own" in message
