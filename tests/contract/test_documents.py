"""`/documents`, `DELETE /documents`, `/documents/{id}/context`, `/ids`, `/health`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from app.clients.blobs import blob_key
from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.documents import make_pdf
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app

LONG = "\n\n".join(f"Paragraph {i}: " + ("word " * 120) + f"marker{i}." for i in range(8))


async def test_health(client: httpx.AsyncClient) -> None:
    r = await client.get("/health")  # no token needed
    assert r.status_code == 200
    assert r.json() == {"status": "UP"}


async def test_get_documents_in_chunk_order(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (await upload(client, fid, "long.txt", LONG.encode(), auth(user))).status_code == 200
    r = await client.get("/documents", params={"ids": [fid]}, headers=auth(user))
    assert r.status_code == 200
    docs = r.json()
    assert len(docs) > 2
    assert all(set(d) == {"page_content", "metadata"} for d in docs)
    positions = [LONG.index(d["page_content"][:60]) for d in docs]
    assert positions == sorted(positions)
    r = await client.get("/documents", params={"ids": [fid, new_id()]}, headers=auth(user))
    assert r.status_code == 404
    assert r.json() == {"detail": "One or more IDs not found"}


async def test_delete_twice_then_404(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (await upload(client, fid, "a.txt", b"Delete me please.", auth(user))).status_code == 200
    r = await client.request("DELETE", "/documents", json=[fid], headers=auth(user))
    assert r.status_code == 200
    assert r.json() == {"message": "Documents for 1 file deleted successfully"}
    r = await client.request("DELETE", "/documents", json=[fid], headers=auth(user))
    assert r.status_code == 404
    assert r.json() == {"detail": "One or more IDs not found"}
    assert (await query(client, "delete", fid, auth(user))).json() == []


async def test_delete_many_and_partial(client: httpx.AsyncClient) -> None:
    user = new_id("user")
    a, b = new_id(), new_id()
    for fid in (a, b):
        assert (await upload(client, fid, "x.txt", b"Some content here.", auth(user))).status_code == 200
    r = await client.request("DELETE", "/documents", json=[a, b], headers=auth(user))
    assert r.json() == {"message": "Documents for 2 files deleted successfully"}
    c = new_id()
    assert (await upload(client, c, "x.txt", b"More content.", auth(user))).status_code == 200
    r = await client.request("DELETE", "/documents", json=[c, new_id()], headers=auth(user))
    assert r.status_code == 404  # ... after deleting the one that was found
    assert c not in (await client.get("/ids", headers=auth(user))).json()


async def test_delete_body_must_be_an_array(client: httpx.AsyncClient) -> None:
    r = await client.request("DELETE", "/documents", json={"file_ids": ["x"]}, headers=auth(new_id("user")))
    assert r.status_code == 422


async def test_delete_by_uploader_without_entity_id(client: httpx.AsyncClient) -> None:
    """LibreChat deletes knowledge-base files with the uploader's token and no entity_id."""
    uploader, other, agent, fid = new_id("user"), new_id("user"), agent_id(), new_id()
    assert (
        await upload(client, fid, "kb.txt", b"Agent knowledge.", auth(uploader), entity_id=agent)
    ).status_code == 200
    r = await client.request("DELETE", "/documents", json=[fid], headers=auth(other))
    assert r.status_code == 404  # another user: as if the file did not exist
    r = await client.request("DELETE", "/documents", json=[fid], headers=auth(uploader))
    assert r.status_code == 200
    assert (await query(client, "knowledge", fid, auth(uploader), entity_id=agent)).json() == []


async def test_delete_scope_caller_restores_upstream(settings_factory: SettingsFactory) -> None:
    async with running_app(settings_factory(delete_scope="caller")) as c:
        owner, stranger, fid = new_id("user"), new_id("user"), new_id()
        content = b"Anything the owner uploaded."
        assert (await upload(c, fid, "a.txt", content, auth(owner))).status_code == 200
        blobs = resources(c).blobs
        key = blob_key(hashlib.sha256(content).hexdigest())
        assert await blobs.exists(key)
        r = await c.request("DELETE", "/documents", json=[fid], headers=auth(stranger))
        assert r.status_code == 200
        assert r.json() == {"message": "Documents for 1 file deleted successfully"}
        # gone for its owner too: chunks, catalogue row and the stored original
        assert (await c.get(f"/documents/{fid}/context", headers=auth(owner))).status_code == 404
        assert (await c.get("/documents", params={"ids": [fid]}, headers=auth(owner))).status_code == 404
        assert fid not in (await c.get("/ids", headers=auth(owner))).json()
        assert (await query(c, "anything", fid, auth(owner))).json() == []
        assert not await blobs.exists(key)


async def test_context_is_a_json_string_with_pages(client: httpx.AsyncClient, tmp_path: Path) -> None:
    user, fid = new_id("user"), new_id()
    pdf = make_pdf(
        tmp_path / "guide.pdf", ["First page text about sailing.", "Second page text about knots."]
    )
    assert (
        await upload(client, fid, "guide.pdf", pdf.read_bytes(), auth(user), content_type="application/pdf")
    ).status_code == 200
    r = await client.get(f"/documents/{fid}/context", headers=auth(user))
    assert r.status_code == 200
    text = r.json()
    assert isinstance(text, str)
    assert text.split("\n")[0] == "guide.pdf"
    assert "# PAGE 1" in text and "# PAGE 2" in text
    assert text.index("sailing") < text.index("# PAGE 2") < text.index("knots")
    assert (await client.get(f"/documents/{new_id()}/context", headers=auth(user))).status_code == 404


async def test_context_removes_chunk_overlaps(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (await upload(client, fid, "long.txt", LONG.encode(), auth(user))).status_code == 200
    text = (await client.get(f"/documents/{fid}/context", headers=auth(user))).json()
    for i in range(8):
        assert text.count(f"marker{i}.") == 1


async def test_ids_only_in_scope(client: httpx.AsyncClient) -> None:
    me, you = new_id("user"), new_id("user")
    mine, yours = new_id(), new_id()
    assert (await upload(client, mine, "a.txt", b"mine", auth(me))).status_code == 200
    assert (await upload(client, yours, "b.txt", b"yours", auth(you))).status_code == 200
    ids = (await client.get("/ids", headers=auth(me))).json()
    assert mine in ids and yours not in ids  # Decision: upstream lists every id in the collection


async def test_health_down_when_database_unreachable(settings_factory: SettingsFactory) -> None:
    # Decision: upstream answers 200 even without a database
    async with running_app(settings_factory()) as c:
        await resources(c).pool.close()
        r = await c.get("/health")
        assert r.status_code == 503
        assert r.json() == {"status": "DOWN"}
