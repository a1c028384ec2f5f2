"""Blobs as objects in one S3 bucket under a prefix, through boto3 in a dedicated thread pool."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from app.clients.blobs.base import BlobNotFound, validate_key
from app.errors import BlobStoreError

logger = logging.getLogger(__name__)

T = TypeVar("T")

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

    async def _run(self, action: str, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn)
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
        return await self._run("lookup", lambda: self._head(object_key))

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
