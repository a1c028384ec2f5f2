"""`entity_id` is honoured only as a LibreChat Agent id (ENTITY_ID_PATTERN), on every route that takes it.

The hole this closes: a valid token that named another user's id as `entity_id` read that user's
attachments, listed their file ids and deleted their files. For each route: another user's id, the
caller's own user id, malformed values and a valid Agent id; reads, uploads and the delete.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.service import auth, new_id, running_app

VICTIM_TEXT = "The victim's private diary says the treasure is buried under the old oak tree."
AGENT_TEXT = "The agent handbook says refunds are granted within thirty days of purchase."
MALFORMED = ["agent_has space", "agent_", "../agent_x", "agent_x;--", "AGENT_upper", "x" * 300]


@dataclass(frozen=True)
class World:
    """Files of a victim (own file, and an Agent's knowledge-base file the victim uploaded)."""

    victim: str
    attacker: str
    agent: str
    victim_file: str
    agent_file: str
    attacker_file: str


@pytest.fixture(scope="module")
async def world(client: httpx.AsyncClient) -> World:
    w = World(
        victim=new_id("victim"),
        attacker=new_id("attacker"),
        agent=agent_id(),
        victim_file=new_id("vfile"),
        agent_file=new_id("kbfile"),
        attacker_file=new_id("afile"),
    )
    r = await upload(client, w.victim_file, "diary.txt", VICTIM_TEXT.encode(), auth(w.victim))
    assert r.status_code == 200, r.text
    r = await upload(client, w.agent_file, "kb.txt", AGENT_TEXT.encode(), auth(w.victim), entity_id=w.agent)
    assert r.status_code == 200, r.text
    r = await upload(client, w.attacker_file, "mine.txt", b"My own notes on gardening.", auth(w.attacker))
    assert r.status_code == 200, r.text
    return w


# Each read route: call it for `file_id` with `entity_id`, and tell whether the file was found.
Reader = Callable[[httpx.AsyncClient, dict[str, str], str, str | None], Awaitable[httpx.Response]]


def _params(entity: str | None) -> dict[str, str]:
    return {} if entity is None else {"entity_id": entity}


async def read_query(c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None) -> httpx.Response:
    return await query(c, "treasure refunds notes", fid, h, k=3, entity_id=entity)


async def read_query_multiple(
    c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None
) -> httpx.Response:
    body: dict[str, Any] = {"query": "treasure refunds notes", "file_ids": [fid], "k": 3}
    if entity is not None:
        body["entity_id"] = entity
    return await c.post("/query_multiple", json=body, headers=h)


async def read_ids(c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None) -> httpx.Response:
    return await c.get("/ids", params=_params(entity), headers=h)


async def read_documents(
    c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None
) -> httpx.Response:
    return await c.get("/documents", params={"ids": [fid], **_params(entity)}, headers=h)


async def read_context(
    c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None
) -> httpx.Response:
    return await c.get(f"/documents/{fid}/context", params=_params(entity), headers=h)


READERS: dict[str, Reader] = {
    "POST /query": read_query,
    "POST /query_multiple": read_query_multiple,
    "GET /ids": read_ids,
    "GET /documents": read_documents,
    "GET /documents/{id}/context": read_context,
}


def found(route: str, r: httpx.Response, fid: str) -> bool:
    """Whether the answer of a read route shows file `fid` (each route says 'not found' its own way)."""
    if route == "POST /query":
        assert r.status_code == 200, r.text
        return any(p[0]["metadata"]["file_id"] == fid for p in r.json())
    if route == "GET /ids":
        assert r.status_code == 200, r.text
        return fid in r.json()
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


def assert_refused(r: httpx.Response) -> None:
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert "ENTITY_ID_PATTERN" in detail
    assert "LibreChat sends only Agent ids" in detail
    assert "treasure" not in r.text and "refunds" not in r.text


@pytest.mark.parametrize("route", READERS)
async def test_another_users_id_is_refused(client: httpx.AsyncClient, world: World, route: str) -> None:
    r = await READERS[route](client, auth(world.attacker), world.victim_file, world.victim)
    assert_refused(r)


@pytest.mark.parametrize("route", READERS)
async def test_the_callers_own_user_id_is_refused_too(
    client: httpx.AsyncClient, world: World, route: str
) -> None:
    # a user id is not an Agent id, whoever's it is: LibreChat never sends one
    r = await READERS[route](client, auth(world.attacker), world.attacker_file, world.attacker)
    assert_refused(r)


@pytest.mark.parametrize("route", READERS)
@pytest.mark.parametrize("entity", MALFORMED)
async def test_malformed_entity_ids_are_refused(
    client: httpx.AsyncClient, world: World, route: str, entity: str
) -> None:
    r = await READERS[route](client, auth(world.attacker), world.attacker_file, entity)
    assert_refused(r)


@pytest.mark.parametrize("route", READERS)
async def test_a_valid_agent_id_reads_the_agents_files_and_nothing_else(
    client: httpx.AsyncClient, world: World, route: str
) -> None:
    read = READERS[route]
    h = auth(world.attacker)  # any LibreChat user the Agent is shared with
    assert found(route, await read(client, h, world.agent_file, world.agent), world.agent_file)
    # the Agent id does not open the uploader's own files
    assert not found(route, await read(client, h, world.victim_file, world.agent), world.victim_file)
    # nor does an Agent that owns nothing
    assert not found(route, await read(client, h, world.agent_file, agent_id()), world.agent_file)


@pytest.mark.parametrize("route", READERS)
@pytest.mark.parametrize("entity", ["", "   "])
async def test_blank_entity_id_means_the_callers_own_scope(
    client: httpx.AsyncClient, world: World, route: str, entity: str
) -> None:
    read = READERS[route]
    h = auth(world.attacker)
    assert found(route, await read(client, h, world.attacker_file, entity), world.attacker_file)
    assert not found(route, await read(client, h, world.agent_file, entity), world.agent_file)


@pytest.mark.parametrize("route", ["GET /ids", "GET /documents", "GET /documents/{id}/context"])
async def test_entity_id_given_twice_is_refused(client: httpx.AsyncClient, world: World, route: str) -> None:
    # a proxy may check the first while a framework reads the last: refuse rather than pick
    fid = world.agent_file
    url = {"GET /ids": "/ids?", "GET /documents": f"/documents?ids={fid}&"}.get(
        route, f"/documents/{fid}/context?"
    )
    r = await client.get(
        f"{url}entity_id={world.agent}&entity_id={world.victim}", headers=auth(world.attacker)
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "entity_id"]


# --- delete ------------------------------------------------------------------------------------


async def delete(c: httpx.AsyncClient, h: dict[str, str], fid: str, entity: str | None) -> httpx.Response:
    return await c.request("DELETE", "/documents", json=[fid], params=_params(entity), headers=h)


async def still_there(c: httpx.AsyncClient, w: World, fid: str) -> bool:
    r = await read_query_multiple(c, auth(w.victim), fid, w.agent)
    return r.status_code == 200


@pytest.mark.parametrize("which", ["another user's id", "own user id", *MALFORMED])
async def test_delete_with_a_non_agent_entity_is_refused_and_deletes_nothing(
    client: httpx.AsyncClient, world: World, which: str
) -> None:
    entity = {"another user's id": world.victim, "own user id": world.attacker}.get(which, which)
    r = await delete(client, auth(world.attacker), world.victim_file, entity)
    assert_refused(r)
    assert await still_there(client, world, world.victim_file)


async def test_delete_with_an_agent_id_never_widens_the_scope(
    client: httpx.AsyncClient, world: World
) -> None:
    # the Agent id is well-formed, but a delete is owner-or-uploader only: someone else gets 404
    r = await delete(client, auth(world.attacker), world.agent_file, world.agent)
    assert r.status_code == 404
    assert r.json() == {"detail": "One or more IDs not found"}
    assert await still_there(client, world, world.agent_file)


async def test_the_uploader_deletes_an_agents_file_with_or_without_entity_id(
    client: httpx.AsyncClient,
) -> None:
    uploader, agent = new_id("user"), agent_id()
    first, second = new_id("kb"), new_id("kb")
    for fid in (first, second):
        r = await upload(client, fid, "kb.txt", AGENT_TEXT.encode(), auth(uploader), entity_id=agent)
        assert r.status_code == 200
    assert (await delete(client, auth(uploader), first, agent)).status_code == 200
    assert (await delete(client, auth(uploader), second, None)).status_code == 200
    r = await client.get("/ids", params={"entity_id": agent}, headers=auth(uploader))
    assert first not in r.json() and second not in r.json()


# --- uploads (multipart /embed, /embed-upload; query parameter /local/embed) --------------------


async def embed_via(
    c: httpx.AsyncClient, route: str, h: dict[str, str], fid: str, entity: str | None
) -> httpx.Response:
    if route == "/local/embed":
        upload_dir: Path = c.app.state.settings.upload_dir  # type: ignore[attr-defined]
        upload_dir.mkdir(parents=True, exist_ok=True)
        (upload_dir / f"{fid}.txt").write_text(AGENT_TEXT)
        body = {"filepath": f"{fid}.txt", "filename": "kb.txt", "file_id": fid}
        return await c.post("/local/embed", json=body, params=_params(entity), headers=h)
    field = "uploaded_file" if route == "/embed-upload" else "file"
    return await upload(c, fid, "kb.txt", AGENT_TEXT.encode(), h, entity_id=entity, route=route, field=field)


UPLOAD_ROUTES = ["/embed", "/embed-upload", "/local/embed"]


@pytest.mark.parametrize("route", UPLOAD_ROUTES)
async def test_uploads_into_a_user_namespace_are_refused(
    client: httpx.AsyncClient, world: World, route: str
) -> None:
    for entity in (world.victim, world.attacker, "agent_bad value"):
        fid = new_id("planted")
        r = await embed_via(client, route, auth(world.attacker), fid, entity)
        assert_refused(r)
        # nothing was stored, in anyone's namespace
        assert fid not in (await client.get("/ids", headers=auth(world.victim))).json()
        assert fid not in (await client.get("/ids", headers=auth(world.attacker))).json()


@pytest.mark.parametrize("route", UPLOAD_ROUTES)
async def test_uploads_with_an_agent_id_are_owned_by_the_agent(client: httpx.AsyncClient, route: str) -> None:
    user, agent, fid = new_id("user"), agent_id(), new_id()
    r = await embed_via(client, route, auth(user), fid, agent)
    assert r.status_code == 200, r.text
    pairs = (await query(client, "refunds", fid, auth(new_id("user")), entity_id=agent)).json()
    assert pairs and pairs[0][0]["metadata"]["user_id"] == agent
    # and an empty entity_id means the caller's own namespace
    own = new_id()
    assert (await embed_via(client, route, auth(user), own, "")).status_code == 200
    pairs = (await query(client, "refunds", own, auth(user))).json()
    assert pairs and pairs[0][0]["metadata"]["user_id"] == user


async def test_dot_star_restores_upstream_trust(settings_factory) -> None:  # type: ignore[no-untyped-def]
    """What docs/decisions.md warns about: with ENTITY_ID_PATTERN=.* a user id can be named again."""
    async with running_app(settings_factory(entity_id_pattern=".*")) as c:
        victim, attacker, fid = new_id("victim"), new_id("attacker"), new_id()
        assert (await upload(c, fid, "diary.txt", VICTIM_TEXT.encode(), auth(victim))).status_code == 200
        r = await query(c, "treasure", fid, auth(attacker), entity_id=victim)
        assert r.status_code == 200 and "treasure" in r.json()[0][0]["page_content"]
        assert fid in (await c.get("/ids", params={"entity_id": victim}, headers=auth(attacker))).json()
