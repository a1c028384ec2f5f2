"""Blobs as files under one folder, written atomically (temp file, fsync, rename)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

from app.clients.blobs.base import BlobNotFound, validate_key
from app.errors import BlobStoreError

logger = logging.getLogger(__name__)

FILE_MODE = 0o640
DIR_MODE = 0o750
COPY_BLOCK = 1 << 20


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename in it survives a crash (a no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _make_dirs(path: Path, root: Path) -> None:
    """Create `path` and its missing parents up to `root` with DIR_MODE (pathlib would use 0o777)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current == root:
            break
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a concurrent writer made it first
            folder.mkdir(mode=DIR_MODE)


def _atomic_copy(source: Path, dest: Path, *, mode: int) -> None:
    """Copy `source` to `dest` through a temp file in dest's folder: readers never see a partial file."""
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out, COPY_BLOCK)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(dest.parent)


class LocalBlobStore:
    """Blobs as files under one folder, written atomically (temp file, fsync, rename)."""

    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / validate_key(key)).resolve()
        # belt and braces: the key pattern already forbids "..", but a symlink inside root must not
        # lead writes elsewhere either
        if not path.is_relative_to(self.root):
            raise ValueError("Invalid blob key")
        return path

    async def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        """Copy `path` into the store (skipped when the key exists); content_type is not kept locally."""
        dest = self._path(key)
        await asyncio.to_thread(self._put, Path(path), dest)

    def _put(self, source: Path, dest: Path) -> None:
        if dest.is_file():
            return
        try:
            _make_dirs(dest.parent, self.root)
            _atomic_copy(source, dest, mode=FILE_MODE)
        except FileNotFoundError:
            if not source.exists():
                raise  # the caller's file is gone: a bug upstream of us, not a storage failure
            raise self._error("write", None) from None
        except OSError as exc:
            raise self._error("write", exc) from None

    async def get_bytes(self, key: str) -> bytes:
        """The blob's bytes; BlobNotFound when missing."""
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound() from None
        except OSError as exc:
            raise self._error("read", exc) from None

    async def download(self, key: str, dest: Path) -> None:
        """Copy the blob to `dest` atomically; BlobNotFound when missing."""
        path = self._path(key)
        dest = Path(dest)

        def copy() -> None:
            if not path.is_file():
                raise BlobNotFound()
            dest.parent.mkdir(parents=True, exist_ok=True)
            _atomic_copy(path, dest, mode=FILE_MODE)

        try:
            await asyncio.to_thread(copy)
        except BlobNotFound:
            raise
        except OSError as exc:
            raise self._error("read", exc) from None

    async def delete(self, key: str) -> None:
        """Remove the blob; a missing key is fine."""
        path = self._path(key)
        try:
            await asyncio.to_thread(path.unlink, missing_ok=True)
        except OSError as exc:
            raise self._error("delete", exc) from None

    async def exists(self, key: str) -> bool:
        """True when the key is stored."""
        return await asyncio.to_thread(self._path(key).is_file)

    async def check(self) -> None:
        """Create the folder if needed and make sure we can write into it."""

        def probe() -> None:
            _make_dirs(self.root, self.root)
            if not self.root.is_dir() or not os.access(self.root, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable")

        try:
            await asyncio.to_thread(probe)
        except OSError as exc:
            raise self._error("open", exc, retryable=False) from None

    async def aclose(self) -> None:
        """Nothing to release."""

    def _error(self, action: str, exc: OSError | None, *, retryable: bool = True) -> BlobStoreError:
        code = errno.errorcode.get(exc.errno, "?") if exc is not None and exc.errno else "?"
        logger.error("Local blob store could not %s (%s)", action, code)
        if exc is not None and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return BlobStoreError(
                "The local file storage is not accessible; check the permissions of BLOB_DIR (or DATA_DIR)",
                retryable=False,
            )
        if exc is not None and exc.errno == errno.ENOSPC:
            return BlobStoreError("The local file storage is full", retryable=True)
        return BlobStoreError(f"The local file storage could not {action} the file", retryable=retryable)
