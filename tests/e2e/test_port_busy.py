"""A busy port stops `scripts/serve` at once, naming the port, before the database is touched."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.fixtures.patience import ceiling
from tests.fixtures.serve import SERVE

pytestmark = [pytest.mark.e2e]


def test_a_busy_port_is_reported_before_the_database_starts() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-busy-"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAG_", "JWT_", "DB_", "POSTGRES_", "DATABASE_", "EMBEDDINGS_", "S3_", "PORT"))
    }
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            port = holder.getsockname()[1]
            env.update({"RAG_PORT": str(port), "DATA_DIR": str(data_dir)})
            done = subprocess.run(
                ["bash", str(SERVE)],
                env=env,
                capture_output=True,
                text=True,
                timeout=ceiling(120),
                check=False,
            )
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"ragoverlay: port {port} on 127.0.0.1 is already in use" in done.stderr
        assert "RAG_PORT" in done.stderr
        # nothing was initialised: no cluster, no credentials, no upload folder
        assert not (data_dir / "postgres").exists()
        assert not (data_dir / "postgres-credentials.json").exists()
        assert not (data_dir / "uploads").exists()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
