"""What every blob store shares: the protocol, content-addressed keys and key validation.

Keys are content-addressed (`blob_key(sha256)` = "sha256/ab/cd/<64 hex>"), so a key that exists
already holds the right bytes and a second upload is skipped. Errors are `BlobStoreError`s with fixed
details: never an AWS message, a path outside our folder or a credential.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from app.errors import BlobStoreError

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Segments start with an alphanumeric, so "..", "." and hidden temp files can never be keys.
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_KEY_LENGTH = 512


class BlobNotFound(BlobStoreError):
    """The key is not in the store."""

    default_detail = "The stored original file was not found"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, retryable=False)


@runtime_checkable
class BlobStore(Protocol):
    """Where originals live; keys come from `blob_key`."""

    kind: str

    async def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        """Store the file at `path` under `key` (skipped when the key exists)."""
        ...

    async def get_bytes(self, key: str) -> bytes:
        """The blob's bytes; BlobNotFound when missing."""
        ...

    async def download(self, key: str, dest: Path) -> None:
        """Write the blob to `dest` (atomically); BlobNotFound when missing."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the blob; a missing key is fine."""
        ...

    async def exists(self, key: str) -> bool:
        """True when the key is stored."""
        ...

    async def check(self) -> None:
        """Raise BlobStoreError when the store is unreachable, missing or not writable."""
        ...

    async def aclose(self) -> None:
        """Release clients and threads."""
        ...


def blob_key(sha256_hex: str) -> str:
    """The content-addressed key of a file: "sha256/ab/cd/<64 lowercase hex>"."""
    digest = sha256_hex.strip().lower() if isinstance(sha256_hex, str) else ""
    if not _SHA256_HEX.fullmatch(digest):
        raise ValueError("blob_key needs a sha256 digest of 64 hex characters")
    return f"sha256/{digest[:2]}/{digest[2:4]}/{digest}"


def validate_key(key: str) -> str:
    """Return `key` if it is a safe relative key (no traversal, no absolute path), else ValueError."""
    if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH or not _KEY.fullmatch(key):
        raise ValueError("Invalid blob key")
    return key
