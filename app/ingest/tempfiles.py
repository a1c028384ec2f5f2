"""Temporary files of this process: uploads on their way in, parses on their way through.

They go to a folder of this process under `DATA_DIR/tmp` (`proc-<pid>-<random>`), which the process
holds a lock on for its life. A process killed mid-upload leaves its folder behind with the lock
released by the kernel; the next start-up removes every such folder (`sweep_stale_uploads`), and
never one whose owner still runs (two services may share a DATA_DIR with an external database).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
import time
from pathlib import Path

from app.runtime.lock import FolderLock, holder_pid

logger = logging.getLogger(__name__)

PROCESS_DIR_PREFIX = "proc-"
PROCESS_LOCK_NAME = ".owner.lock"
# files an older version wrote straight into DATA_DIR/tmp: removed once this old, whoever wrote them
LEGACY_TEMP_MAX_AGE_S = 3600.0

_process_dirs: dict[Path, tuple[Path, FolderLock]] = {}
_process_dirs_guard = threading.Lock()


def process_temp_dir(base: Path) -> Path:
    """This process's own folder under `base` (created and locked on first use)."""
    base = base.resolve()
    with _process_dirs_guard:
        known = _process_dirs.get(base)
        if known is not None and known[0].is_dir():
            return known[0]
        folder = base / f"{PROCESS_DIR_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock.acquire(folder, PROCESS_LOCK_NAME, purpose="a ragoverlay service's uploads")
        if known is not None:
            known[1].release()
        _process_dirs[base] = (folder, lock)
        return folder


def sweep_stale_uploads(base: Path) -> int:
    """Remove the temporary upload files of processes that no longer run; returns how many files.

    A folder counts as stale when nobody holds its lock (its process died, however). Called at
    start-up, before this process writes anything there.
    """
    if not base.is_dir():
        return 0
    removed = 0
    now = time.time()
    for entry in base.iterdir():
        try:
            if entry.is_dir() and entry.name.startswith(PROCESS_DIR_PREFIX):
                if holder_pid(entry, PROCESS_LOCK_NAME) is not None:
                    continue  # a live process's uploads in progress
                removed += sum(1 for f in entry.iterdir() if f.name != PROCESS_LOCK_NAME)
                shutil.rmtree(entry)
            elif entry.is_file() and entry.name.startswith("upload-"):
                if now - entry.stat().st_mtime > LEGACY_TEMP_MAX_AGE_S:
                    entry.unlink()
                    removed += 1
        except OSError as exc:  # another starter removed it first, or it is not ours to remove
            logger.warning("Could not remove stale upload files %s (%s)", entry, type(exc).__name__)
    if removed:
        logger.warning(
            "Removed %d temporary upload file(s) left by a process that stopped mid-upload", removed
        )
    return removed
