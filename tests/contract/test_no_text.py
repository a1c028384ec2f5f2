"""Uploads with no extractable text answer 422 and store nothing; loader warnings reach the log."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from app.clients.blobs import LocalBlobStore
from app.errors import EMPTY_FILE_DETAIL
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
    [("empty.txt", b""), ("blank.txt", b"  \n\n\t \r\n "), ("blank.md", b"\n\n")],
)
async def test_an_empty_text_file_is_refused_as_empty(
    client: httpx.AsyncClient, name: str, content: bytes, route: str
) -> None:
    """Not "a scanned PDF needs OCR": the file is empty, and /text says so as /embed does."""
    user, fid = new_id("user"), new_id()
    r = await upload(client, fid, name, content, auth(user), route=route)
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": EMPTY_FILE_DETAIL}
    assert "OCR" not in r.json()["detail"]
    await assert_nothing_stored(client, fid, user)


async def test_a_scanned_pdf_is_refused_and_its_pages_logged(
    settings_factory: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # blank pages: a PDF without a text layer, which is what a scan without OCR looks like
    pdf = make_pdf(tmp_path / "scan.pdf", ["", ""]).read_bytes()
    async with running_app(settings_factory()) as c:
        store = resources(c).blobs
        assert isinstance(store, LocalBlobStore)
        user, fid = new_id("user"), new_id()
        with caplog.at_level(logging.WARNING):
            r = await upload(c, fid, "scan.pdf", pdf, auth(user), content_type="application/pdf")
        assert r.status_code == 422
        assert "scanned PDF" in r.json()["detail"]
        await assert_nothing_stored(c, fid, user)
        assert not [p for p in store.root.rglob("*") if p.is_file()]  # no original kept either
    logged = warnings_about(caplog, fid)
    assert len(logged) == 2
    assert logged[0].startswith(f"File {fid}: pages 1") and "no extractable text" in logged[0]
    assert logged[1] == f"File {fid}: no extractable text; nothing stored"


async def test_a_refused_upload_keeps_the_previous_version(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (
        await upload(client, fid, "notes.txt", b"Lighthouses guide ships.", auth(user))
    ).status_code == 200
    assert (await upload(client, fid, "notes.txt", b"", auth(user))).status_code == 422
    hits = (await query(client, "lighthouse", fid, auth(user))).json()
    assert [h[0]["page_content"] for h in hits] == ["Lighthouses guide ships."]


async def test_pdf_extract_images_warns_at_start_and_per_pdf(
    settings_factory: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdf = make_pdf(tmp_path / "text.pdf", ["A page with a text layer about tides."]).read_bytes()
    with caplog.at_level(logging.WARNING):
        async with running_app(settings_factory(pdf_extract_images=True)) as c:
            user, fid = new_id("user"), new_id()
            r = await upload(c, fid, "text.pdf", pdf, auth(user), content_type="application/pdf")
            assert r.status_code == 200
    at_start = [r.getMessage() for r in caplog.records if r.name == "app.main"]
    assert any(
        m.startswith("PDF_EXTRACT_IMAGES is set, but reading text from images (OCR)") for m in at_start
    )
    [per_file] = warnings_about(caplog, fid)
    assert per_file.startswith(f"File {fid}: PDF_EXTRACT_IMAGES is set")
