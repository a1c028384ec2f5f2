"""Temporary upload files of a process killed mid-upload are removed when the service starts; those
of a process that still runs (another service on the same DATA_DIR) are left alone."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from tests.fixtures.patience import ceiling
from tests.fixtures.service import SettingsFactory, running_app

REPO = Path(__file__).resolve().parents[2]
# a process that starts writing an upload the way the service does, then waits to be killed
WRITER = """
import sys, time
from pathlib import Path
from app.ingest.tempfiles import process_temp_dir
folder = process_temp_dir(Path(sys.argv[1]))
(folder / "upload-partial").write_bytes(b"x" * 4096)
print(folder, flush=True)
time.sleep(600)
"""


async def _start_writer(base: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block; reading does, in a thread
        [sys.executable, "-c", WRITER, str(base)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), ceiling(60))
    return proc, Path(line.strip())


async def test_start_up_removes_the_uploads_of_a_killed_process_only(
    settings_factory: SettingsFactory,
) -> None:
    settings = settings_factory()
    base = settings.data_dir.resolve() / "tmp"
    killed, stale = await _start_writer(base)
    alive, live = await _start_writer(base)
    legacy_recent = base / "upload-recent"  # an older version's file, young: could still be in use
    legacy_recent.write_bytes(b"y")
    try:
        killed.send_signal(signal.SIGKILL)
        await asyncio.to_thread(killed.wait, 30)
        assert (stale / "upload-partial").exists()
        async with running_app(settings):
            assert not stale.exists(), "the killed process's upload files are still there"
            assert (live / "upload-partial").exists(), "a running process's upload was removed"
            assert legacy_recent.exists()
    finally:
        for proc in (killed, alive):
            if proc.poll() is None:
                proc.kill()
            await asyncio.to_thread(proc.wait, 30)
            if proc.stdout is not None:
                proc.stdout.close()
