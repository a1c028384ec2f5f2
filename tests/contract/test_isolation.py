"""Namespaces are part of every SQL predicate: a foreign chunk never shows, on any route.

The foreign file is the *nearest* possible match (identical text to the query) so a search that
ranked first and filtered afterwards would leak it or return too few rows.
"""

from __future__ import annotations

import httpx

from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.service import auth, new_id

SECRET_TEXT = "The launch code for project Nightingale is 7-4-1-9."
ALLOWED = [
    "Gardening tips: water tomatoes in the morning and mulch the beds.",
    "Bread baking needs flour, water, salt and patient kneading.",
    "Cycling to work saves money and keeps you fit.",
]


async def test_foreign_nearest_chunk_never_appears(client: httpx.AsyncClient) -> None:
    victim, attacker, agent = new_id("victim"), new_id("attacker"), agent_id()
    foreign = new_id("foreign")
    shared_id = new_id("shared")  # the same file id exists in both namespaces
    assert (
        await upload(client, foreign, "secret.txt", SECRET_TEXT.encode(), auth(victim))
    ).status_code == 200
    assert (
        await upload(client, shared_id, "secret.txt", SECRET_TEXT.encode(), auth(victim), entity_id=agent)
    ).status_code == 200
    mine = []
    for text in ALLOWED:
        fid = new_id("mine")
        mine.append(fid)
        assert (await upload(client, fid, "mine.txt", text.encode(), auth(attacker))).status_code == 200
    assert (
        await upload(client, shared_id, "mine.txt", ALLOWED[0].encode(), auth(attacker))
    ).status_code == 200
    h = auth(attacker)

    # /query on the foreign file: nothing, not an error
    r = await query(client, SECRET_TEXT, foreign, h, k=10)
    assert r.status_code == 200 and r.json() == []
    # the same file id in two namespaces: only the caller's copy
    r = await query(client, SECRET_TEXT, shared_id, h, k=10)
    assert [p[0]["metadata"]["user_id"] for p in r.json()] == [attacker]

    # /query_multiple with the foreign ids mixed in: k allowed rows, none foreign
    r = await client.post(
        "/query_multiple",
        json={"query": SECRET_TEXT, "file_ids": [foreign, shared_id, *mine], "k": 4},
        headers=h,
    )
    assert r.status_code == 200
    pairs = r.json()
    assert len(pairs) == 4  # exactly k visible rows come back, even though the nearest is foreign
    assert all(p[0]["metadata"]["user_id"] == attacker for p in pairs)
    assert all("Nightingale" not in p[0]["page_content"] for p in pairs)

    # reads
    r = await client.get("/documents", params={"ids": [foreign]}, headers=h)
    assert r.status_code == 404
    r = await client.get(f"/documents/{foreign}/context", headers=h)
    assert r.status_code == 404
    ids = (await client.get("/ids", headers=h)).json()
    assert foreign not in ids and set(mine) <= set(ids)

    # a delete of someone else's file behaves like a missing file and deletes nothing
    r = await client.request("DELETE", "/documents", json=[foreign], headers=h)
    assert r.status_code == 404
    r = await query(client, SECRET_TEXT, foreign, auth(victim), k=1)
    assert len(r.json()) == 1

    # guessing the agent id as entity_id is the upstream model (LibreChat checks Agent access):
    # with it, the caller reads the Agent's namespace, never the victim's own files
    r = await query(client, SECRET_TEXT, foreign, h, k=3, entity_id=agent)
    assert r.json() == []


async def test_entity_and_user_scopes_combine(client: httpx.AsyncClient) -> None:
    user, colleague, agent = new_id("user"), new_id("colleague"), agent_id()
    kb, own, theirs = new_id("kb"), new_id("own"), new_id("kb")
    assert (
        await upload(client, kb, "kb.txt", ALLOWED[1].encode(), auth(user), entity_id=agent)
    ).status_code == 200
    assert (await upload(client, own, "own.txt", ALLOWED[2].encode(), auth(user))).status_code == 200
    assert (
        await upload(client, theirs, "kb2.txt", ALLOWED[1].encode(), auth(colleague), entity_id=agent)
    ).status_code == 200
    body = {"query": "bread", "file_ids": [kb, own, theirs], "k": 5}
    r = await client.post("/query_multiple", json={**body, "entity_id": agent}, headers=auth(user))
    assert {p[0]["metadata"]["file_id"] for p in r.json()} == {kb, own, theirs}
    # without the entity: the caller's own files, and the Agent's files it uploaded itself, no others
    r = await client.post("/query_multiple", json=body, headers=auth(user))
    assert {p[0]["metadata"]["file_id"] for p in r.json()} == {kb, own}
    r = await client.post("/query_multiple", json=body, headers=auth(colleague))
    assert {p[0]["metadata"]["file_id"] for p in r.json()} == {theirs}
    ids = (await client.get("/ids", params={"entity_id": agent}, headers=auth(user))).json()
    assert {kb, own, theirs} <= set(ids)
    ids = (await client.get("/ids", headers=auth(user))).json()
    assert {kb, own} <= set(ids) and theirs not in ids
