"""Upload routes: `/embed`, `/embed-upload`, `/text`, `/local/embed` (CONTRACT.md section 4)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.documents import make_pdf
from tests.fixtures.service import SettingsFactory, auth, new_id, running_app

PAGE_TEXTS = [
    "Chapter one introduces the migratory routes of arctic terns across the Atlantic.",
    "Chapter two covers the nesting habits of puffins on the cliffs of Iceland.",
    "Chapter three explains how the lighthouse keeper logged every passing ship in 1902.",
    "Chapter four describes the winter storms that closed the harbour for six weeks.",
    "Chapter five lists the supplies delivered by the mail boat each month.",
]


async def test_embed_success_shape(client: httpx.AsyncClient) -> None:
    fid = new_id()
    r = await upload(
        client,
        fid,
        "notes.md",
        b"# Notes\n\nSome text about kayaks.",
        auth(new_id("user")),
        content_type="text/markdown",
    )
    assert r.status_code == 200
    assert r.json() == {
        "status": True,
        "message": "File processed successfully.",
        "file_id": fid,
        "filename": "notes.md",
        "known_type": True,
    }


async def test_embed_with_storage_metadata_and_entity(client: httpx.AsyncClient) -> None:
    user, agent, fid = new_id("user"), agent_id(), new_id()
    meta = '{"storage_type": "s3", "storage_key": "uploads/u/x.txt", "region": "eu-west-1", "bucket": "lc"}'
    r = await upload(
        client,
        fid,
        "kb.txt",
        b"Knowledge base text about otters.",
        auth(user),
        entity_id=agent,
        storage_metadata=meta,
    )
    assert r.status_code == 200 and r.json()["status"] is True
    pairs = (await query(client, "otters", fid, auth(user), entity_id=agent)).json()
    assert pairs and pairs[0][0]["metadata"]["user_id"] == agent


async def test_embed_bad_storage_metadata_is_422(client: httpx.AsyncClient) -> None:
    r = await upload(client, new_id(), "a.txt", b"text", auth(new_id("user")), storage_metadata="{not json")
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "storage_metadata"]


async def test_embed_missing_fields_are_422(client: httpx.AsyncClient) -> None:
    h = auth(new_id("user"))
    r = await client.post(
        "/embed", data={"file_id": "x"}, files={"other": ("a.txt", b"a", "text/plain")}, headers=h
    )
    assert r.status_code == 422
    assert r.json()["message"] == "Request validation failed"
    assert r.json()["detail"][0]["loc"] == ["body", "file"]
    r = await client.post("/embed", files={"file": ("a.txt", b"a", "text/plain")}, headers=h)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "file_id"]
    r = await client.post("/embed", json={"file_id": "x"}, headers=h)
    assert r.status_code == 422


async def test_embed_upload_uses_uploaded_file_field(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    r = await upload(
        client,
        fid,
        "walrus.txt",
        b"Walruses use their tusks to haul out onto ice.",
        auth(user),
        route="/embed-upload",
        field="uploaded_file",
    )
    assert r.status_code == 200 and r.json()["file_id"] == fid
    assert (await query(client, "walrus tusks", fid, auth(user))).json()


async def test_pdf_pages_are_zero_based(client: httpx.AsyncClient, tmp_path: Path) -> None:
    user, fid = new_id("user"), new_id()
    pdf = make_pdf(tmp_path / "log.pdf", PAGE_TEXTS)
    r = await upload(client, fid, "log.pdf", pdf.read_bytes(), auth(user), content_type="application/pdf")
    assert r.status_code == 200, r.text
    pairs = (await query(client, "lighthouse keeper logged passing ships", fid, auth(user), k=1)).json()
    assert pairs[0][0]["metadata"]["page"] == 2  # the third page, 0-based like rag_api
    assert "lighthouse keeper" in pairs[0][0]["page_content"]


async def test_unsupported_binary_is_415_and_stores_nothing(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    blob = bytes(range(256)) * 64
    r = await upload(client, fid, "data.bin", blob, auth(user), content_type="application/octet-stream")
    assert r.status_code == 415
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    assert fid not in (await client.get("/ids", headers=auth(user))).json()


async def test_oversized_upload_is_413_before_parsing(settings_factory: SettingsFactory) -> None:
    async with running_app(settings_factory(max_upload_bytes=2048)) as small:
        user, fid = new_id("user"), new_id()
        r = await upload(small, fid, "big.txt", b"a" * 4096, auth(user))
        assert r.status_code == 413
        assert "MAX_UPLOAD_BYTES" in r.json()["detail"]
        # declared length far over the limit: refused from the header alone
        r = await small.post(
            "/embed",
            content=b"x",
            headers={
                **auth(user),
                "Content-Length": str(50 * 2**20),
                "Content-Type": "multipart/form-data; boundary=b",
            },
        )
        assert r.status_code == 413
        assert fid not in (await small.get("/ids", headers=auth(user))).json()


async def test_text_returns_text_and_stores_nothing(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    r = await upload(client, fid, "memo.txt", "Café opening hours: 8–16.".encode(), auth(user), route="/text")
    assert r.status_code == 200
    assert r.json() == {
        "text": "Café opening hours: 8–16.",
        "file_id": fid,
        "filename": "memo.txt",
        "known_type": True,
    }
    assert (await query(client, "opening hours", fid, auth(user))).json() == []


async def test_local_embed(settings_factory: SettingsFactory) -> None:
    settings = settings_factory()
    settings.upload_dir.mkdir(parents=True, exist_ok=True)
    (settings.upload_dir / "inside.txt").write_text("Local file about hedgehogs hibernating.")
    outside = settings.data_dir / "outside.txt"
    outside.write_text("must not be read")
    async with running_app(settings) as c:
        user = new_id("user")
        body = {
            "filepath": "inside.txt",
            "filename": "inside.txt",
            "file_content_type": "text/plain",
            "file_id": new_id(),
        }
        r = await c.post("/local/embed", json=body, headers=auth(user))
        assert r.status_code == 200 and r.json()["status"] is True
        r = await c.post("/local/embed", json={**body, "filepath": "../outside.txt"}, headers=auth(user))
        assert r.status_code == 400
        r = await c.post("/local/embed", json={**body, "filepath": str(outside)}, headers=auth(user))
        assert r.status_code == 400
        r = await c.post("/local/embed", json={**body, "filepath": "missing.txt"}, headers=auth(user))
        assert r.status_code == 404
