"""One contract for every blob store: the same tests against the local folder and a real S3 server.

What a caller of `BlobStore` may rely on, whatever the backend: round trips, content addressing
(a second put of a key is skipped), missing keys, unsafe keys refused before any I/O, and `check`.
What only one backend has (file modes and atomic temp files; multipart, credentials, addressing
style) is tested in tests/unit/test_blobs_local.py and tests/integration/test_blobs_s3.py.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.clients.blobs import (
    MAX_KEY_LENGTH,
    BlobNotFound,
    BlobStore,
    LocalBlobStore,
    S3BlobStore,
    blob_key,
    build_blob_store,
)
from app.config import load_settings
from app.config_sections import BlobSettings
from tests.fixtures.s3_server import S3Server


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    """Each backend as the service builds it from its settings (`build_blob_store`)."""
    if request.param == "local":
        settings = load_settings(_env_file=None, blob_dir=tmp_path / "blobs")
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        settings = load_settings(
            _env_file=None,
            s3_bucket=server.bucket,
            s3_prefix=f"contract/{uuid.uuid4().hex}/",
            s3_endpoint_url=server.endpoint_url,
            s3_region=server.region,
            s3_access_key_id=server.access_key,
            s3_secret_access_key=server.secret_key,
            s3_force_path_style=True,
        )
    blob_store = build_blob_store(BlobSettings.from_settings(settings))
    assert isinstance(blob_store, LocalBlobStore if request.param == "local" else S3BlobStore)
    assert blob_store.kind == request.param
    try:
        yield blob_store
    finally:
        await blob_store.aclose()


def source_file(folder: Path, content: bytes, name: str = "upload.bin") -> tuple[Path, str]:
    path = folder / name
    path.write_bytes(content)
    return path, blob_key(hashlib.sha256(content).hexdigest())


async def test_is_a_blob_store(store: BlobStore) -> None:
    assert isinstance(store, BlobStore)
    await store.check()  # reachable and writable (the local folder is created on demand)


async def test_round_trip(store: BlobStore, tmp_path: Path) -> None:
    content = b"hello blob store\x00\xff"
    src, key = source_file(tmp_path, content)
    assert not await store.exists(key)
    await store.put_file(key, src, content_type="application/octet-stream")
    assert await store.exists(key)
    assert await store.get_bytes(key) == content
    dest = tmp_path / "out" / "nested" / "copy.bin"  # missing parents are created
    await store.download(key, dest)
    assert dest.read_bytes() == content
    await store.delete(key)
    assert not await store.exists(key)
    with pytest.raises(BlobNotFound):
        await store.get_bytes(key)


async def test_a_second_put_of_a_key_is_skipped(store: BlobStore, tmp_path: Path) -> None:
    src, key = source_file(tmp_path, b"original")
    await store.put_file(key, src, content_type="text/plain")
    # content-addressed: an existing key already holds its bytes, so other bytes never replace them
    other = tmp_path / "other.bin"
    other.write_bytes(b"different")
    await store.put_file(key, other, content_type="text/plain")
    assert await store.get_bytes(key) == b"original"


async def test_empty_and_larger_files(store: BlobStore, tmp_path: Path) -> None:
    for content in (b"", bytes(range(256)) * 8192):  # 0 bytes and 2 MiB
        src, key = source_file(tmp_path, content, name=f"f{len(content)}")
        await store.put_file(key, src, content_type="application/octet-stream")
        assert await store.get_bytes(key) == content


async def test_missing_keys(store: BlobStore, tmp_path: Path) -> None:
    key = blob_key("e" * 64)
    assert not await store.exists(key)
    await store.delete(key)  # deleting what is not there is fine
    with pytest.raises(BlobNotFound) as caught:
        await store.get_bytes(key)
    assert caught.value.retryable is False and caught.value.status_code == 502
    with pytest.raises(BlobNotFound):
        await store.download(key, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


async def test_a_missing_source_is_the_callers_bug(store: BlobStore, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await store.put_file(blob_key("a" * 64), tmp_path / "nope", content_type="text/plain")


@pytest.mark.parametrize(
    "key",
    [
        "../escape",
        "/etc/passwd",
        "sha256/../../x",
        "a//b",
        ".hidden",
        "a\\b",
        "",
        "a/",
        "x" * (MAX_KEY_LENGTH + 1),
    ],
)
async def test_unsafe_keys_are_refused(store: BlobStore, tmp_path: Path, key: str) -> None:
    src, _ = source_file(tmp_path, b"x")
    with pytest.raises(ValueError):
        await store.put_file(key, src, content_type="text/plain")
    with pytest.raises(ValueError):
        await store.get_bytes(key)
    with pytest.raises(ValueError):
        await store.exists(key)
    with pytest.raises(ValueError):
        await store.download(key, tmp_path / "dest")
    with pytest.raises(ValueError):
        await store.delete(key)
