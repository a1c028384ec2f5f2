"""`scripts/v2-backfill` beside a running `scripts/serve` on embedded defaults: it uses that server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.patience import ceiling, wait_until
from tests.fixtures.serve import REPO, free_port, serving

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
AGENT = "agent_beside"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, dict[str, str], Path]]:
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-beside-"))
    data_dir.chmod(0o755)  # the embedded server may run as another user when tests run as root
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAG_", "JWT_", "DB_", "POSTGRES_", "DATABASE_", "EMBEDDINGS_", "S3_"))
    }
    env.update({"RAG_PORT": str(free_port()), "DATA_DIR": str(data_dir), "RAG_V2_NAMESPACE_IDS": AGENT})
    try:
        with serving(env, data_dir / "serve.log", timeout_s=240):
            yield f"http://127.0.0.1:{env['RAG_PORT']}", env, data_dir
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _backfill(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "v2-backfill"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(300),
    )


def test_backfill_and_status_run_beside_the_service(served: tuple[str, dict[str, str], Path]) -> None:
    base, env, data_dir = served
    address = json.loads((data_dir / "embedded-postgres.address.json").read_text())
    assert address["host"] == "127.0.0.1" and address["port"] > 0
    r = httpx.post(
        f"{base}/embed",
        data={"file_id": "beside-1", "entity_id": AGENT},
        files={"file": ("notes.md", b"# Notes\n\nThe lighthouse keeper logged a storm of nine days.\n")},
        timeout=ceiling(120),
    )
    assert r.status_code == 200, r.text

    done = _backfill(env, AGENT, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "active" and summary["staged"] == summary["expected"] == 1
    assert "connecting to it on port" in done.stderr  # the service's server, not a second one

    status = _backfill(env, "--status", str(summary["run_id"]))
    assert status.returncode == 0, status.stderr[-3000:]
    assert json.loads(status.stdout)["status"] == "active"
    assert _backfill(env, "--status", "987654").returncode == 2  # an unknown run: documented code 2

    # the service kept its database: it still answers from the run the command activated
    def answer() -> httpx.Response | None:
        r = httpx.post(
            f"{base}/query_v2",
            json={"query": "How long was the storm?", "file_ids": ["beside-1"], "entity_id": AGENT},
            timeout=ceiling(60),
        )
        return r if r.status_code == 200 else None

    r = wait_until(answer, what="/query_v2 to answer from the activated run", within_s=60, every_s=1)
    assert r.json()["results"] and "nine days" in r.json()["results"][0]["content"]
    assert httpx.get(f"{base}/health", timeout=ceiling(5)).json() == {"status": "UP"}
