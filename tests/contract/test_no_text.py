"""Uploads with no extractable text answer 422 and store nothing; loader warnings reach the log."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from app.clients.blobs import LocalBlobStore
from app.errors import EMPTY_FILE_DETAIL, NoExtractableText
from tests.contract.helpers import query, upload
from tests.fixtures.documents import make_pdf
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app


def warnings_about(caplog: pytest.LogCaptureFixture, file_id: str) -> list[str]:
    """Warning lines of the ingest pipeline that name `file_id`."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "app.ingest.pipeline" and file_id in r.getMessage()
    ]


async def assert_nothing_stored(client: httpx.AsyncClient, file_id: str, user: str) -> None:
    assert (await client.get("/documents", params={"ids": [file_id]}, headers=auth(user))).status_code == 404
    assert file_id not in (await client.get("/ids", headers=auth(user))).json()
    assert (await client.get(f"/documents/{file_id}/context", headers=auth(user))).status_code == 404


@pytest.mark.parametrize("route", ["/embed", "/text"])
@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.txt", b""),
        ("blank.txt", b"  \n\n\t \r\n "),
        ("blank.md", b"\n\n"),
        # 0-byte binary formats: before, 415 "could not be read as a PDF" / "is damaged"
        ("empty.pdf", b""),
        ("empty.docx", b""),
        ("empty.xlsx", b""),
    ],
)
async def test_an_empty_file_is_refused_as_empty(
    client: httpx.AsyncClient, name: str, content: bytes, route: str
) -> None:
    """Not "a scanned PDF needs OCR": the file is empty, and /text says so as /embed does."""
    user, fid = new_id("user"), new_id()
    r = await upload(client, fid, name, content, auth(user), route=route)
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": EMPTY_FILE_DETAIL}
    assert "OCR" not in r.json()["detail"]
    await assert_nothing_stored(client, fid, user)


async def test_a_blank_pdf_is_refused_and_its_pages_logged(
    settings_factory: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # blank pages: no text layer and nothing drawn (a scan would show a picture, and be read by OCR)
    pdf = make_pdf(tmp_path / "blank.pdf", ["", ""]).read_bytes()
    async with running_app(settings_factory()) as c:
        store = resources(c).blobs
        assert isinstance(store, LocalBlobStore)
        user, fid = new_id("user"), new_id()
        with caplog.at_level(logging.WARNING):
            r = await upload(c, fid, "blank.pdf", pdf, auth(user), content_type="application/pdf")
        assert r.status_code == 422
        assert r.json() == {"detail": NoExtractableText.default_detail}
        await assert_nothing_stored(c, fid, user)
        assert not [p for p in store.root.rglob("*") if p.is_file()]  # no original kept either
    logged = warnings_about(caplog, fid)
    assert logged == [
        f"File {fid}: pages 1, 2 have no extractable text and no picture (blank)",
        f"File {fid}: no extractable text; nothing stored",
    ]


async def test_a_refused_upload_keeps_the_previous_version(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (
        await upload(client, fid, "notes.txt", b"Lighthouses guide ships.", auth(user))
    ).status_code == 200
    assert (await upload(client, fid, "notes.txt", b"", auth(user))).status_code == 422
    hits = (await query(client, "lighthouse", fid, auth(user))).json()
    assert [h[0]["page_content"] for h in hits] == ["Lighthouses guide ships."]


async def test_the_ocr_engine_is_named_at_start(
    settings_factory: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        async with running_app(settings_factory(pdf_extract_images=True)):
            pass
    at_start = [r.getMessage() for r in caplog.records if r.name == "app.main"]
    assert any(
        m.startswith("OCR: Tesseract reads deu+eng (models in ")
        and m.endswith(
            "scanned pages and pictures are read, and the pictures inside PDFs (PDF_EXTRACT_IMAGES)"
        )
        for m in at_start
    ), at_start
