"""The blob store that keeps uploaded originals: a local folder by default, S3 when S3_BUCKET is set.

BlobStore (protocol, base.py)   content-addressed keys, key validation, BlobNotFound
├── LocalBlobStore (local.py)   files under BLOB_DIR, written atomically
└── S3BlobStore (s3.py)         objects under S3_PREFIX, boto3 in a thread pool

Every call is async; the blocking work (file I/O, boto3) runs in threads.
"""

from __future__ import annotations

from app.clients.blobs.base import MAX_KEY_LENGTH, BlobNotFound, BlobStore, blob_key, validate_key
from app.clients.blobs.local import LocalBlobStore
from app.clients.blobs.s3 import S3BlobStore
from app.config_sections import BlobSettings

__all__ = [
    "MAX_KEY_LENGTH",
    "BlobNotFound",
    "BlobStore",
    "LocalBlobStore",
    "S3BlobStore",
    "blob_key",
    "build_blob_store",
    "validate_key",
]


def build_blob_store(settings: BlobSettings) -> BlobStore:
    """S3 when S3_BUCKET is set, else the local folder (BLOB_DIR, or DATA_DIR/blobs)."""
    if settings.bucket:
        # Settings already refused a key id without its secret (and the reverse)
        return S3BlobStore(
            bucket=settings.bucket,
            prefix=settings.prefix,
            endpoint_url=settings.endpoint_url,
            region=settings.region,
            access_key_id=settings.access_key_id,
            secret_access_key=settings.secret_access_key,
            session_token=settings.session_token,
            force_path_style=settings.force_path_style,
        )
    return LocalBlobStore(settings.folder)
