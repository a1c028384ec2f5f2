"""Who owns a folder: an exclusive `flock` held for the life of the process that owns it.

The kernel drops a flock when its holder dies, however it dies (kill -9 included), so a stale lock
file never blocks a restart; a second process that asks for the same folder is refused with the
holder's pid. Within one process the lock is shared (a count), because flock locks belong to open
files: a second `open` + `flock` by the same process would block on itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path
from typing import ClassVar

from app.errors import ConfigError


class FolderInUse(ConfigError):
    """Another live process holds the folder's lock."""

    def __init__(self, message: str, *, holder_pid: int | None) -> None:
        self.holder_pid = holder_pid
        super().__init__(message)


class FolderLock:
    """An exclusive, process-wide lock on `<folder>/<name>`; `acquire` it, `release` it once per acquire."""

    _held: ClassVar[dict[Path, FolderLock]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._count = 1

    @classmethod
    def acquire(cls, folder: Path, name: str, *, purpose: str) -> FolderLock:
        """Hold `folder/name` for this process, or raise FolderInUse naming the holder's pid."""
        folder.mkdir(parents=True, exist_ok=True)
        path = (folder / name).resolve()
        with cls._guard:
            held = cls._held.get(path)
            if held is not None:
                held._count += 1
                return held
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                who = f"process {holder}" if holder else "another process"
                raise FolderInUse(
                    f"{folder} is in use by {who} ({purpose}); stop that process first, or give this "
                    "one a DATA_DIR of its own",
                    holder_pid=holder,
                ) from None
            except BaseException:
                os.close(fd)
                raise
            # the pid is for the message above only: the flock is what decides
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            lock = cls(path, fd)
            cls._held[path] = lock
            return lock

    def release(self) -> None:
        """Give up one hold; the last one unlocks the file."""
        with self._guard:
            self._count -= 1
            if self._count > 0 or self._fd < 0:
                return
            self._held.pop(self.path, None)
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def holder_pid(folder: Path, name: str) -> int | None:
    """The pid written by the lock's current holder, or None when nobody holds it."""
    path = folder / name
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
