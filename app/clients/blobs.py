"""The blob store that keeps uploaded originals: a local folder by default, S3 when S3_BUCKET is set.

Keys are content-addressed (`blob_key(sha256)` = "sha256/ab/cd/<64 hex>"), so a key that exists
already holds the right bytes and a second upload is skipped. Every call is async; the blocking work
(file I/O, boto3) runs in threads. Errors are `BlobStoreError`s with fixed details: never an AWS
message, a path outside our folder or a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from app.config import Settings
from app.errors import BlobStoreError, ConfigError

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Segments start with an alphanumeric, so "..", "." and hidden temp files can never be keys.
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_KEY_LENGTH = 512
FILE_MODE = 0o640
DIR_MODE = 0o750
COPY_BLOCK = 1 << 20


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


def build_blob_store(settings: Settings) -> BlobStore:
    """S3 when S3_BUCKET is set, else the local folder (BLOB_DIR, or DATA_DIR/blobs)."""
    if settings.s3_bucket:
        if bool(settings.s3_access_key_id) != bool(settings.s3_secret_access_key):
            raise ConfigError(
                "S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY must be set together (or neither, to use "
                "the default AWS credential chain)"
            )
        return S3BlobStore(
            bucket=settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
            # temporary (STS) credentials come with a token; the setting is not in Settings yet
            session_token=settings.s3_session_token,
            force_path_style=settings.s3_force_path_style,
        )
    return LocalBlobStore(settings.blob_folder)


# --- local folder ---------------------------------------------------------------------------------


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


# --- S3 -------------------------------------------------------------------------------------------

_AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "InvalidSecurity",
    }
)
_MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
_MISSING_KEY_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable", "InternalError"}
)


class S3BlobStore:
    """Blobs as objects in one bucket under a prefix, through boto3 in a dedicated thread pool."""

    kind = "s3"

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        force_path_style: bool = False,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
        max_attempts: int = 4,
        multipart_threshold: int = 16 * 1024 * 1024,
        threads: int = 8,
    ) -> None:
        self.bucket = bucket
        prefix = prefix.strip().lstrip("/")
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.endpoint_url = endpoint_url
        self.region = region
        self.force_path_style = force_path_style
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._session_token = session_token
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_attempts = max_attempts
        self._multipart_threshold = multipart_threshold
        self._threads = threads
        # boto3 calls block; a pool of our own keeps them from starving asyncio's default executor
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="blobs-s3")
        self._client_lock = threading.Lock()
        self._client: Any = None
        self._transfer_config: Any = None

    def object_key(self, key: str) -> str:
        """The S3 object key of a blob key (S3_PREFIX + key)."""
        return self.prefix + validate_key(key)

    def client(self) -> Any:
        """The boto3 S3 client, created on first use (building one reads botocore's model files)."""
        if self._client is not None:
            return self._client
        with self._client_lock:
            if self._client is None:
                import boto3
                from boto3.s3.transfer import TransferConfig
                from botocore.config import Config

                config = Config(
                    region_name=self.region,
                    signature_version="s3v4",
                    connect_timeout=self._connect_timeout_s,
                    read_timeout=self._read_timeout_s,
                    retries={"mode": "standard", "max_attempts": self._max_attempts},
                    max_pool_connections=self._threads * 2,
                    # S3_FORCE_PATH_STYLE decides, also for custom endpoints (where botocore's "auto"
                    # would silently pick path style), as LibreChat's own S3 client does
                    s3={"addressing_style": "path" if self.force_path_style else "virtual"},
                    # S3-compatible servers (MinIO, Ceph, SeaweedFS, R2 ...) vary in their support of
                    # the CRC checksums boto3 adds by default; send them only where AWS requires them
                    request_checksum_calculation="when_required" if self.endpoint_url else "when_supported",
                    response_checksum_validation="when_required" if self.endpoint_url else "when_supported",
                )
                # static keys when both are given, else boto3's default chain (env, profile, IAM role)
                static = bool(self._access_key_id and self._secret_access_key)
                session = boto3.session.Session(
                    aws_access_key_id=self._access_key_id if static else None,
                    aws_secret_access_key=self._secret_access_key if static else None,
                    aws_session_token=self._session_token if static else None,
                    region_name=self.region,
                )
                self._transfer_config = TransferConfig(
                    multipart_threshold=self._multipart_threshold,
                    multipart_chunksize=self._multipart_threshold,
                    max_concurrency=4,
                )
                self._client = session.client("s3", endpoint_url=self.endpoint_url, config=config)
        return self._client

    async def _run(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))
        except (BlobStoreError, FileNotFoundError):
            raise  # ours already, or the caller's source file is missing (a bug upstream of us)
        except Exception as exc:
            raise _map_s3_error(exc, action) from None

    async def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        """Upload `path` (multipart when large) unless the object already exists."""
        object_key = self.object_key(key)

        def put() -> None:
            if not Path(path).is_file():
                raise FileNotFoundError(errno.ENOENT, "source file missing")
            if self._head(object_key):
                return
            self.client().upload_file(
                str(path),
                self.bucket,
                object_key,
                ExtraArgs={"ContentType": content_type or "application/octet-stream"},
                Config=self._transfer_config,
            )

        await self._run("upload", put)

    async def get_bytes(self, key: str) -> bytes:
        """The object's bytes; BlobNotFound when missing."""
        object_key = self.object_key(key)

        def get() -> bytes:
            response = self.client().get_object(Bucket=self.bucket, Key=object_key)
            with response["Body"] as body:
                return bytes(body.read())

        return await self._run("download", get)

    async def download(self, key: str, dest: Path) -> None:
        """Download to `dest` (s3transfer writes a temp file and renames it); BlobNotFound when missing."""
        object_key = self.object_key(key)

        def fetch() -> None:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            self.client().download_file(self.bucket, object_key, str(dest), Config=self._transfer_config)

        await self._run("download", fetch)

    async def delete(self, key: str) -> None:
        """Delete the object; S3 treats a missing key as success."""
        object_key = self.object_key(key)
        await self._run("delete", lambda: self.client().delete_object(Bucket=self.bucket, Key=object_key))

    async def exists(self, key: str) -> bool:
        """True when the object exists."""
        object_key = self.object_key(key)
        return bool(await self._run("lookup", self._head, object_key))

    def _head(self, object_key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().head_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            code, status = _client_error_code(exc)
            # HEAD has no body: a missing key and a missing bucket both come back as a bare 404
            if status == 404 and code in _MISSING_KEY_CODES:
                return False
            raise
        return True

    async def check(self) -> None:
        """head_bucket: fails when the endpoint is unreachable, the bucket missing or access denied."""
        await self._run("check", lambda: self.client().head_bucket(Bucket=self.bucket))

    async def aclose(self) -> None:
        """Close the client's connections and stop the thread pool."""
        client, self._client = self._client, None
        if client is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, client.close)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _client_error_code(exc: Any) -> tuple[str, int]:
    response = getattr(exc, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    return code, status


def _map_s3_error(exc: BaseException, action: str) -> BlobStoreError:
    """A BlobStoreError with a fixed detail for a boto3/botocore failure (logged by code only)."""
    from botocore import exceptions as boto

    # boto3's transfer layer wraps ClientErrors (S3UploadFailedError): look through the chain
    cause: BaseException | None = exc
    seen = 0
    while cause is not None and not isinstance(cause, boto.ClientError) and seen < 5:
        cause = cause.__cause__ or cause.__context__
        seen += 1
    if isinstance(cause, boto.ClientError):
        code, status = _client_error_code(cause)
        logger.warning("S3 %s failed: %s (HTTP %s)", action, code or "?", status or "?")
        if code in _MISSING_BUCKET_CODES or (action == "check" and status == 404):
            return BlobStoreError("The S3 bucket does not exist; check S3_BUCKET", retryable=False)
        if action in ("download", "lookup") and (code in _MISSING_KEY_CODES or status == 404):
            return BlobNotFound()
        if status in (401, 403) or code in _AUTH_CODES:
            return BlobStoreError(
                "The S3 service refused our credentials or permissions; check S3_ACCESS_KEY_ID, "
                "S3_SECRET_ACCESS_KEY and the bucket policy",
                retryable=False,
            )
        if status >= 500 or status == 429 or code in _THROTTLE_CODES:
            return BlobStoreError(f"The S3 service is unavailable (HTTP {status or '?'})", retryable=True)
        return BlobStoreError(
            f"The S3 service rejected the {action} request (HTTP {status or '?'})", retryable=False
        )
    logger.warning("S3 %s failed: %s", action, type(exc).__name__)
    if isinstance(exc, (boto.NoCredentialsError, boto.PartialCredentialsError)):
        return BlobStoreError(
            "No usable S3 credentials; set S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY", retryable=False
        )
    if isinstance(exc, (boto.EndpointConnectionError, boto.ConnectionError, boto.ReadTimeoutError)):
        return BlobStoreError("Could not reach the S3 service; check S3_ENDPOINT_URL", retryable=True)
    return BlobStoreError(f"The S3 {action} failed", retryable=True)
