"""Streaming multipart parsing: file to disk, hashed, size-limited, fields kept."""

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.errors import InvalidInput, PayloadTooLarge
from app.ingest.upload import FORM_OVERHEAD_BYTES, check_content_length, receive_multipart


def encode(files: dict, data: dict) -> tuple[str, bytes]:
    """A real multipart body as httpx (like LibreChat's form-data) would send it."""
    request = httpx.Request("POST", "http://x/embed", files=files, data=data)
    body = request.read()
    return request.headers["content-type"], body


async def stream(body: bytes, size: int = 7) -> AsyncIterator[bytes]:
    # tiny pieces: boundaries and headers split across reads must still parse
    for i in range(0, len(body), size):
        yield body[i : i + size]


async def test_file_and_fields(tmp_path: Path) -> None:
    payload = b"hello world\n" * 1000
    ctype, body = encode(
        {"file": ("notes.txt", payload, "text/plain")},
        {"file_id": "f-1", "entity_id": "agent_1", "storage_metadata": '{"a": 1}'},
    )
    up = await receive_multipart(
        ctype, stream(body), file_field="file", dest_dir=tmp_path, max_upload_bytes=10**6
    )
    assert up.filename == "notes.txt"
    assert up.content_type == "text/plain"
    assert up.size == len(payload)
    assert up.sha256 == hashlib.sha256(payload).hexdigest()
    assert up.path.read_bytes() == payload
    assert up.fields == {"file_id": "f-1", "entity_id": "agent_1", "storage_metadata": '{"a": 1}'}
    up.cleanup()
    assert not up.path.exists()


async def test_utf8_filename(tmp_path: Path) -> None:
    ctype, body = encode({"file": ("Résumé – 2024.pdf", b"%PDF-1.4", "application/pdf")}, {"file_id": "x"})
    up = await receive_multipart(
        ctype, stream(body), file_field="file", dest_dir=tmp_path, max_upload_bytes=100
    )
    assert up.filename == "Résumé – 2024.pdf"


async def test_oversized_file_refused_mid_stream_and_removed(tmp_path: Path) -> None:
    ctype, body = encode({"file": ("big.bin", b"x" * 5000, "application/octet-stream")}, {"file_id": "x"})
    with pytest.raises(PayloadTooLarge):
        await receive_multipart(
            ctype, stream(body, 512), file_field="file", dest_dir=tmp_path, max_upload_bytes=4096
        )
    assert list(tmp_path.iterdir()) == []  # nothing partial left behind


async def test_missing_file_part(tmp_path: Path) -> None:
    ctype, body = encode({"other": ("a.txt", b"abc", "text/plain")}, {"file_id": "x"})
    with pytest.raises(InvalidInput) as exc:
        await receive_multipart(
            ctype, stream(body), file_field="file", dest_dir=tmp_path, max_upload_bytes=100
        )
    assert exc.value.errors[0]["loc"] == ["body", "file"]
    assert list(tmp_path.iterdir()) == []


async def test_not_multipart(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        await receive_multipart(
            "application/json", stream(b"{}"), file_field="file", dest_dir=tmp_path, max_upload_bytes=100
        )


async def test_truncated_body(tmp_path: Path) -> None:
    ctype, body = encode({"file": ("a.txt", b"abc" * 100, "text/plain")}, {"file_id": "x"})
    with pytest.raises(InvalidInput):
        await receive_multipart(
            ctype,
            stream(body[: len(body) // 2]),
            file_field="file",
            dest_dir=tmp_path,
            max_upload_bytes=10_000,
        )
    assert list(tmp_path.iterdir()) == []


def test_content_length_precheck() -> None:
    check_content_length(None, 10)
    check_content_length(str(10 + FORM_OVERHEAD_BYTES), 10)
    with pytest.raises(PayloadTooLarge):
        check_content_length(str(11 + FORM_OVERHEAD_BYTES), 10)
