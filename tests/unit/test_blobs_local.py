"""The local-folder blob store: keys, atomic writes, permissions, symlinks (what the shared contract
suite in tests/integration/test_blobs_contract.py does not cover)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

import app.clients.blobs.local as local_blobs
from app.clients.blobs import (
    LocalBlobStore,
    S3BlobStore,
    blob_key,
    build_blob_store,
    validate_key,
)
from app.config import Settings
from app.config_sections import BlobSettings
from app.errors import BlobStoreError


def source_file(folder: Path, content: bytes, name: str = "upload.bin") -> tuple[Path, str]:
    path = folder / name
    path.write_bytes(content)
    return path, blob_key(hashlib.sha256(content).hexdigest())


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def test_blob_key_shape() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert blob_key(digest) == f"sha256/{digest[:2]}/{digest[2:4]}/{digest}"
    assert blob_key(digest.upper()) == blob_key(digest)


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, "a" * 63, "a" * 65, "../" + "a" * 61])
def test_blob_key_needs_a_sha256(bad: str) -> None:
    with pytest.raises(ValueError):
        blob_key(bad)


async def test_permissions(store: LocalBlobStore, tmp_path: Path) -> None:
    src, key = source_file(tmp_path, b"private")
    await store.put_file(key, src, content_type="application/octet-stream")
    path = store.root / key
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    for folder in (path.parent, path.parent.parent, store.root):
        # 0o750 at most (the umask may only take more away); never world-readable
        assert stat.S_IMODE(folder.stat().st_mode) & ~0o750 == 0


async def test_a_failed_write_leaves_nothing_behind(
    store: LocalBlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, key = source_file(tmp_path, b"x" * 100_000)

    def broken_copy(fsrc: object, fdst: object, length: int = 0) -> None:
        fdst.write(b"partial")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_blobs.shutil, "copyfileobj", broken_copy)
    with pytest.raises(BlobStoreError) as caught:
        await store.put_file(key, src, content_type="text/plain")
    assert caught.value.detail == "The local file storage is full"
    assert not await store.exists(key)
    leftovers = [p for p in store.root.rglob("*") if p.is_file()]
    assert leftovers == []  # no partial blob, no temp file


@pytest.mark.parametrize(
    "key",
    [
        "../escape",
        "/etc/passwd",
        "sha256/../../x",
        "a//b",
        ".hidden",
        "a/.tmp-x.part",
        "a\\b",
        "",
        "a/",
        "a/./b",
        "x" * 600,
    ],
)
def test_unsafe_keys_are_rejected(key: str) -> None:
    # the contract suite (tests/integration/test_blobs_contract.py) checks every store method too
    with pytest.raises(ValueError):
        validate_key(key)


async def test_a_symlink_cannot_lead_out_of_the_folder(store: LocalBlobStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store.root.mkdir(parents=True)
    os.symlink(outside, store.root / "link")
    src, _ = source_file(tmp_path, b"x")
    with pytest.raises(ValueError):
        await store.put_file("link/file", src, content_type="text/plain")
    assert list(outside.iterdir()) == []


async def test_check_creates_the_folder(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "a" / "b")
    await store.check()
    assert (tmp_path / "a" / "b").is_dir()


async def test_check_fails_when_the_folder_cannot_exist(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(BlobStoreError) as caught:
        await LocalBlobStore(blocker).check()
    assert str(blocker) not in caught.value.detail


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_aws_env")
def test_build_blob_store(tmp_path: Path) -> None:
    local_settings = Settings(_env_file=None, blob_dir=tmp_path / "b")  # type: ignore[call-arg]
    local = build_blob_store(BlobSettings.from_settings(local_settings))
    assert isinstance(local, LocalBlobStore) and local.root == (tmp_path / "b").resolve()
    s3_settings = Settings(_env_file=None, s3_bucket="bucket", s3_prefix="/p")  # type: ignore[call-arg]
    s3 = build_blob_store(BlobSettings.from_settings(s3_settings))
    assert isinstance(s3, S3BlobStore) and s3.kind == "s3"
    assert s3.object_key(blob_key("c" * 64)).startswith("p/sha256/cc/cc/")
