"""What only the S3 blob store has, against a real S3 server (SeaweedFS, the `s3_server` fixture):
prefix and content type, multipart, errors by cause, addressing style. The behaviour every store
shares is in tests/integration/test_blobs_contract.py."""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.clients.blobs import BlobNotFound, S3BlobStore, blob_key
from app.errors import BlobStoreError
from tests.fixtures.s3_server import S3Server

pytestmark = pytest.mark.s3


def make_store(server: S3Server, **overrides: Any) -> S3BlobStore:
    options: dict[str, Any] = {
        "bucket": server.bucket,
        "prefix": f"tests/{uuid.uuid4().hex}/",
        "endpoint_url": server.endpoint_url,
        "region": server.region,
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
        "force_path_style": True,
    }
    options.update(overrides)
    return S3BlobStore(**options)


@pytest.fixture
async def store(s3_server: S3Server) -> AsyncIterator[S3BlobStore]:
    blob_store = make_store(s3_server)
    yield blob_store
    await blob_store.aclose()


def source_file(folder: Path, content: bytes, name: str = "upload.bin") -> tuple[Path, str]:
    path = folder / name
    path.write_bytes(content)
    return path, blob_key(hashlib.sha256(content).hexdigest())


def count_calls(store: S3BlobStore, operation: str) -> list[str]:
    """A list that grows by one entry for each call of an S3 operation (e.g. "PutObject")."""
    calls: list[str] = []
    store.client().meta.events.register(
        f"before-call.s3.{operation}", lambda **kwargs: calls.append(operation)
    )
    return calls


async def test_stored_under_the_prefix_with_its_content_type(
    store: S3BlobStore, tmp_path: Path, s3_server: S3Server
) -> None:
    # round trips, missing keys and unsafe keys: tests/integration/test_blobs_contract.py
    src, key = source_file(tmp_path, b"hello s3")
    await store.put_file(key, src, content_type="text/plain")
    raw = s3_server.client()
    try:
        head = raw.head_object(Bucket=s3_server.bucket, Key=store.prefix + key)
        assert head["ContentType"] == "text/plain"
    finally:
        raw.close()
    await store.delete(key)
    assert not await store.exists(key)


async def test_put_skips_an_existing_key(store: S3BlobStore, tmp_path: Path) -> None:
    src, key = source_file(tmp_path, b"once")
    puts = count_calls(store, "PutObject")
    await store.put_file(key, src, content_type="text/plain")
    await store.put_file(key, src, content_type="text/plain")
    assert puts == ["PutObject"]


async def test_large_files_go_multipart(s3_server: S3Server, tmp_path: Path) -> None:
    store = make_store(s3_server, multipart_threshold=5 * 1024 * 1024)
    try:
        content = os.urandom(11 * 1024 * 1024)  # 5 + 5 + 1 MiB parts
        src, key = source_file(tmp_path, content)
        parts = count_calls(store, "UploadPart")
        await store.put_file(key, src, content_type="application/pdf")
        assert len(parts) == 3
        assert await store.get_bytes(key) == content
    finally:
        await store.aclose()


async def test_wrong_secret(s3_server: S3Server, tmp_path: Path) -> None:
    store = make_store(s3_server, secret_access_key="wrong-" + s3_server.secret_key)
    try:
        with pytest.raises(BlobStoreError) as caught:
            await store.check()
        assert caught.value.retryable is False
        assert "S3_SECRET_ACCESS_KEY" in caught.value.detail
        assert s3_server.secret_key not in caught.value.detail
        assert "Signature" not in caught.value.detail  # never the server's own message
        src, key = source_file(tmp_path, b"x")
        with pytest.raises(BlobStoreError):
            await store.put_file(key, src, content_type="text/plain")
        with pytest.raises(BlobStoreError) as caught:
            await store.get_bytes(key)
        assert not isinstance(caught.value, BlobNotFound)
    finally:
        await store.aclose()


async def test_missing_bucket(s3_server: S3Server, tmp_path: Path) -> None:
    store = make_store(s3_server, bucket="no-such-bucket-" + uuid.uuid4().hex[:8])
    try:
        with pytest.raises(BlobStoreError, match="S3_BUCKET") as caught:
            await store.check()
        assert caught.value.retryable is False
        src, key = source_file(tmp_path, b"x")
        with pytest.raises(BlobStoreError, match="S3_BUCKET"):
            await store.put_file(key, src, content_type="text/plain")
    finally:
        await store.aclose()


async def test_unreachable_endpoint() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = S3BlobStore(
        bucket="b",
        endpoint_url=f"http://127.0.0.1:{port}",
        region="us-east-1",
        access_key_id="a",
        secret_access_key="s",
        force_path_style=True,
        max_attempts=1,
        connect_timeout_s=1,
    )
    try:
        with pytest.raises(BlobStoreError, match="S3_ENDPOINT_URL") as caught:
            await store.check()
        assert caught.value.retryable is True
    finally:
        await store.aclose()


async def test_path_style_follows_the_setting(s3_server: S3Server) -> None:
    # "localhost" rather than an IP, so botocore would pick virtual-hosted style if left to itself
    port = urlsplit(s3_server.endpoint_url).port
    endpoint = f"http://localhost:{port}"
    path_style = make_store(s3_server, endpoint_url=endpoint, force_path_style=True)
    try:
        urls = record_urls(path_style)
        await path_style.check()
        assert urlsplit(urls[-1]).netloc == f"localhost:{port}"
        assert urlsplit(urls[-1]).path == f"/{s3_server.bucket}"
    finally:
        await path_style.aclose()

    virtual = make_store(s3_server, endpoint_url=endpoint, force_path_style=False)
    try:
        urls = record_urls(virtual, answer=True)  # answered locally: bucket.localhost is not resolved
        await virtual.check()
        assert urlsplit(urls[-1]).netloc == f"{s3_server.bucket}.localhost:{port}"
    finally:
        await virtual.aclose()


def record_urls(store: S3BlobStore, *, answer: bool = False) -> list[str]:
    """Record each request URL; with `answer`, reply 200 without sending anything."""
    from botocore.awsrequest import AWSResponse

    urls: list[str] = []

    class _Raw:
        def stream(self, **kwargs: Any) -> Any:
            return iter([b""])

    def before_send(request: Any, **kwargs: Any) -> AWSResponse | None:
        urls.append(request.url)
        return AWSResponse(request.url, 200, {}, _Raw()) if answer else None

    store.client().meta.events.register("before-send.s3", before_send)
    return urls
