"""ALLOWLIST_VERIFY=mongo end to end: the app, a real PostgreSQL, and pymongo against a real MongoDB
wire-protocol server (nx-27017) holding LibreChat-shaped documents. No mock library.

Every file lives in our store exactly as LibreChat's uploads leave it (an Agent's knowledge base is
owned by the Agent id, uploaded by its author); the catalogue decides who may search it. Each denial
is checked against the same request with the re-check switched off, where the claimed `entity_id`
alone would have granted the read: a test that passes without the re-check proves nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from bson import ObjectId
from pymongo.database import Database as MongoDatabase

from app.access.allowlist import UNAVAILABLE_DETAIL, CatalogueAllowList, OpenAllowList
from app.config_sections import AllowlistSettings
from tests.contract.helpers import file_ids_of, upload
from tests.fixtures.mongo_server import mongo_server
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, auth, resources, running_app
from tests.operator.catalogue_seed import Catalogue, database, uri_for

EDIT_BITS = 3  # VIEW | EDIT


@pytest.fixture(scope="module")
def mongo_uri() -> Iterator[str]:
    """An nx-27017 server for this module."""
    with mongo_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def catalogue(mongo_uri: str) -> Iterator[Catalogue]:
    """LibreChat's catalogue, in a database of this module's own."""
    with database(mongo_uri, "allowlist_e2e") as db:
        yield Catalogue(db)


class Clock:
    """A monotonic clock the test moves by hand (the cache's TTL without sleeping)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """The app, the catalogue, and who is who."""

    client: httpx.AsyncClient
    cat: Catalogue
    clock: Clock
    users: dict[str, ObjectId] = field(default_factory=dict)
    agent: str = ""
    kb: list[str] = field(default_factory=list)
    own: dict[str, str] = field(default_factory=dict)  # user name -> a file that user owns

    def headers(self, who: str) -> dict[str, str]:
        return auth(str(self.users[who]))

    @property
    def allowlist(self) -> CatalogueAllowList:
        found = resources(self.client).access.allowlist
        assert isinstance(found, CatalogueAllowList)
        return found


async def _upload(world: World, who: str, file_id: str, text: str, entity_id: str | None = None) -> None:
    response = await upload(
        world.client, file_id, f"{file_id}.txt", text.encode(), world.headers(who), entity_id=entity_id
    )
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
async def world(
    settings_factory: SettingsFactory, mongo_uri: str, catalogue: Catalogue
) -> AsyncIterator[World]:
    """The app with the re-check on, an Agent's knowledge base, and users of every kind of access."""
    settings = settings_factory(
        allowlist_verify="mongo",
        librechat_mongo_uri=uri_for(mongo_uri, "allowlist_e2e"),
        allowlist_cache_ttl_s=30.0,
    )
    async with running_app(settings) as client:
        clock = Clock()
        w = World(client, catalogue, clock)
        w.allowlist.cache.clock = clock
        cat = catalogue
        names = ["author", "alice", "bob", "carol", "dave", "erin", "frank", "editor"]
        w.users = {name: cat.user("AUDITOR" if name == "carol" else "USER") for name in names}
        w.kb = [cat.file(w.users["author"], name=f"kb{i}.txt") for i in range(3)]
        w.agent = cat.agent(w.users["author"], w.kb)
        cat.share(w.agent, "group", cat.group("HR", [str(w.users["alice"])]))
        cat.share(w.agent, "role", "AUDITOR")
        cat.share(w.agent, "user", w.users["frank"], expiredAt=datetime.now(UTC) - timedelta(hours=1))
        cat.share(w.agent, "user", w.users["editor"], EDIT_BITS)
        cat.share(w.agent, "user", w.users["dave"])
        for i, file_id in enumerate(w.kb):
            await _upload(
                w, "author", file_id, f"Handbook chapter {i}: leave policy and travel rules.", w.agent
            )
        for name in ("alice", "bob"):
            w.own[name] = cat.file(w.users[name], name=f"{name}.txt")
            await _upload(w, name, w.own[name], f"{name}'s private notes about the garden.")
        yield w


async def _search(world: World, who: str, file_ids: list[str], entity_id: str | None = None) -> set[str]:
    body: dict[str, Any] = {"query": "leave policy", "file_ids": file_ids, "k": 10}
    if entity_id is not None:
        body["entity_id"] = entity_id
    response = await world.client.post("/query_multiple", json=body, headers=world.headers(who))
    if response.status_code == 404:
        return set()
    assert response.status_code == 200, response.text
    return file_ids_of(response.json())


@contextlib.asynccontextmanager
async def recheck_off(world: World) -> AsyncIterator[None]:
    """The same app with ALLOWLIST_VERIFY=off: what the claimed entity_id alone grants."""
    access = resources(world.client).access
    saved = access.allowlist
    access.allowlist = OpenAllowList()
    try:
        yield
    finally:
        access.allowlist = saved


async def test_owner_author_and_acl_principals_may_search(world: World) -> None:
    kb = set(world.kb)
    # the author (every attached file with an owner), a group member, a role, a user entry
    for who in ("author", "alice", "carol", "dave", "editor"):
        assert await _search(world, who, world.kb, world.agent) == kb, who
    # files the user owns are always allowed, with or without an Agent
    assert await _search(world, "alice", [world.own["alice"]]) == {world.own["alice"]}
    mixed = await _search(world, "alice", [*world.kb, world.own["alice"]], world.agent)
    assert mixed == kb | {world.own["alice"]}


async def test_no_access_and_expired_acl_deny_what_the_claim_alone_grants(world: World) -> None:
    for who in ("bob", "frank"):
        assert await _search(world, who, world.kb, world.agent) == set(), who
        async with recheck_off(world):
            assert await _search(world, who, world.kb, world.agent) == set(world.kb), who
    # bob's own file still comes back next to the Agent's files he may not see
    assert await _search(world, "bob", [*world.kb, world.own["bob"]], world.agent) == {world.own["bob"]}
    # /query (stock LibreChat's per-file search) answers [] like for a file that does not exist
    response = await world.client.post(
        "/query",
        json={"query": "leave", "file_id": world.kb[0], "entity_id": world.agent},
        headers=world.headers("bob"),
    )
    assert response.status_code == 200 and response.json() == []


async def test_public_share(world: World) -> None:
    cat = world.cat
    files = [cat.file(world.users["author"], name="public.txt")]
    agent = cat.agent(world.users["author"], files)
    await _upload(world, "author", files[0], "Public cafeteria menu: leave policy for lunch.", agent)
    assert await _search(world, "erin", files, agent) == set()  # not shared yet (and now cached)
    cat.share(agent, "public", None)
    world.clock.now += 31  # past the TTL
    assert await _search(world, "erin", files, agent) == set(files)


async def test_unknown_agent_denies_all_but_own_files(world: World) -> None:
    ghost = "agent_ghost_not_in_catalogue"
    file_id = world.cat.file(world.users["author"], name="ghost.txt")
    await _upload(world, "author", file_id, "A ghost knowledge base about leave policy.", ghost)
    assert await _search(world, "bob", [file_id], ghost) == set()
    async with recheck_off(world):
        assert await _search(world, "bob", [file_id], ghost) == {file_id}
    # its owner in the catalogue may still search it: files the user owns are always allowed
    assert await _search(world, "author", [file_id], ghost) == {file_id}
    # a file our store holds but the catalogue does not know is denied to everyone
    stray = "stray-file-not-in-catalogue"
    await _upload(world, "author", stray, "Stray notes on leave policy.", world.agent)
    assert await _search(world, "author", [stray], world.agent) == set()


async def test_documents_context_and_ids_follow_the_same_rule(world: World) -> None:
    kb0 = world.kb[0]
    params = {"entity_id": world.agent}
    for who, allowed in (("alice", True), ("bob", False)):
        docs = await world.client.get("/documents", params={"ids": kb0, **params}, headers=world.headers(who))
        context = await world.client.get(
            f"/documents/{kb0}/context", params=params, headers=world.headers(who)
        )
        ids = await world.client.get("/ids", params=params, headers=world.headers(who))
        assert ids.status_code == 200
        if allowed:
            assert docs.status_code == 200 and "Handbook chapter 0" in docs.json()[0]["page_content"]
            assert context.status_code == 200 and "Handbook chapter 0" in context.json()
            assert set(world.kb) <= set(ids.json())
        else:
            assert docs.status_code == 404 and context.status_code == 404, who
            assert not set(world.kb) & set(ids.json())
            assert world.own["bob"] in ids.json()  # his own files still list
    async with recheck_off(world):
        docs = await world.client.get(
            "/documents", params={"ids": kb0, **params}, headers=world.headers("bob")
        )
        assert docs.status_code == 200


async def test_agent_editor_may_delete_a_viewer_may_not(world: World) -> None:
    cat = world.cat
    files = [cat.file(world.users["author"], name=f"del{i}.txt") for i in range(2)]
    agent = cat.agent(world.users["author"], files)
    cat.share(agent, "user", world.users["editor"], EDIT_BITS)
    cat.share(agent, "user", world.users["dave"])  # VIEW only
    for file_id in files:
        await _upload(world, "author", file_id, "Quarterly leave statistics.", agent)

    async def delete(who: str, file_id: str) -> int:
        response = await world.client.request(
            "DELETE", "/documents", json=[file_id], headers=world.headers(who)
        )
        return response.status_code

    async with recheck_off(world):
        assert await delete("editor", files[0]) == 404  # neither owner nor uploader
    assert await delete("dave", files[0]) == 404
    assert await _search(world, "author", files, agent) == set(files)
    assert await delete("editor", files[0]) == 200
    assert await _search(world, "author", files, agent) == {files[1]}


async def test_results_are_cached_for_the_ttl(world: World) -> None:
    cat = world.cat
    user = cat.user()
    world.users["grace"] = user
    group = cat.group("Temps", [str(user)])
    cat.share(world.agent, "group", group)
    reads = world.allowlist.reads
    assert await _search(world, "grace", world.kb, world.agent) == set(world.kb)
    assert world.allowlist.reads > reads  # read from the catalogue
    reads = world.allowlist.reads
    cat.db["groups"].update_one({"_id": group}, {"$set": {"memberIds": []}})
    world.clock.now += 29  # within the TTL: the cached grant answers, MongoDB is not asked
    assert await _search(world, "grace", world.kb, world.agent) == set(world.kb)
    assert world.allowlist.reads == reads
    world.clock.now += 2  # past it: read again, and the removal counts
    assert await _search(world, "grace", world.kb, world.agent) == set()
    assert world.allowlist.reads > reads


# --- MongoDB unreachable ----------------------------------------------------------------------


def _dead_uri() -> str:
    return f"mongodb://127.0.0.1:{free_port()}/LibreChat"  # nothing listens there


async def test_mongo_down_fails_closed_with_503(settings_factory: SettingsFactory) -> None:
    settings = settings_factory(
        allowlist_verify="mongo", librechat_mongo_uri=_dead_uri(), librechat_mongo_timeout_ms=300
    )
    user = str(ObjectId())
    async with running_app(settings) as client:
        await upload(client, "mine", "mine.txt", b"My own notes about leave policy.", auth(user))
        started = time.monotonic()
        response = await client.post(
            "/query_multiple", json={"query": "leave", "file_ids": ["mine"]}, headers=auth(user)
        )
        assert response.status_code == 503
        assert response.json()["detail"] == UNAVAILABLE_DETAIL
        took = time.monotonic() - started  # bounded by LIBRECHAT_MONGO_TIMEOUT_MS, not hung
        assert took < ceiling(5), out_of_time("the 503 after LIBRECHAT_MONGO_TIMEOUT_MS (0.3 s)", took)
        for path in ("/documents/mine/context", "/documents?ids=mine"):
            assert (await client.get(path, headers=auth(user))).status_code == 503
        # the re-check only ever widens a delete: without MongoDB, owners still delete their files
        deleted = await client.request("DELETE", "/documents", json=["mine"], headers=auth(user))
        assert deleted.status_code == 200


async def test_mongo_down_fail_open_searches_unchecked_with_a_warning(
    settings_factory: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_factory(
        allowlist_verify="mongo",
        librechat_mongo_uri=_dead_uri(),
        librechat_mongo_timeout_ms=300,
        allowlist_fail_open=True,
    )
    user = str(ObjectId())
    async with running_app(settings) as client:
        await upload(client, "mine", "mine.txt", b"My own notes about leave policy.", auth(user))
        with caplog.at_level(logging.WARNING, logger="app.access.allowlist"):
            response = await client.post(
                "/query_multiple", json={"query": "leave", "file_ids": ["mine"]}, headers=auth(user)
            )
        assert response.status_code == 200 and file_ids_of(response.json()) == {"mine"}
        assert any("ALLOWLIST_FAIL_OPEN=true" in r.getMessage() for r in caplog.records)


async def test_catalogue_database_setting(mongo_uri: str, settings_factory: SettingsFactory) -> None:
    """LIBRECHAT_MONGO_DB overrides the URI's database; the URI's database is the default."""
    for name, expected in ((None, "Other"), ("Named", "Named")):
        settings = settings_factory(
            allowlist_verify="mongo", librechat_mongo_uri=uri_for(mongo_uri, "Other"), librechat_mongo_db=name
        )
        allowlist = CatalogueAllowList.from_settings(AllowlistSettings.from_settings(settings))
        try:
            db: MongoDatabase[dict[str, Any]] = allowlist._db
            assert db.name == expected
        finally:
            await allowlist.aclose()
