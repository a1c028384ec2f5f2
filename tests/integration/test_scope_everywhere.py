"""Nothing foreign comes back or is deleted: on every route of the app and on every SQL search path.

"Foreign" is every row the caller may not touch: another user's file, another owner's copy of a
file id the caller holds too, an Agent's file someone else uploaded (the caller names no
`entity_id`), a row without an owner (unless LEGACY_UNOWNED_READABLE), a row of another collection.
Each is the nearest possible match (its text or vector is the query itself) or the only one, so a
path that ranked first and filtered afterwards would leak it or come back short.

The route test walks `app.routes`: a route added without a probe here fails it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import numpy as np
import pytest
from pgvector.asyncpg import register_vector
from starlette.routing import BaseRoute, Route

from app.config import Settings
from app.config_sections import SearchSettings
from app.search.planner import VectorSearchDecision, candidate_count
from app.search.service import SearchService
from app.store import chunks as store
from app.store.db import StoreInfo, bootstrap
from app.store.ids import uuid7_batch
from app.store.namespace_index import NamespaceSize, build_namespace_index, namespace_walk_name
from app.store.scope import Scope, ScopeError
from app.store.vector_index import IndexSpec, build_index
from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.service import Database, auth, new_id, running_app
from tests.integration.mcp_support import RawSession

SECRET = "The launch code for project Nightingale is 7-4-1-9."
MINE = [
    "Gardening tips: water tomatoes in the morning and mulch the beds.",
    "Bread baking needs flour, water, salt and patient kneading.",
    "Cycling to work saves money and keeps you fit.",
]


# --- the routes ------------------------------------------------------------------------------


@dataclass
class World:
    """One probe's data: the caller's files and every kind of foreign file, each holding SECRET."""

    client: httpx.AsyncClient
    settings: Settings
    caller: str
    victim: str
    colleague: str
    agent: str
    mine: list[str]  # the caller's own files
    other: str  # the victim's file
    shared: str  # held by the victim (SECRET) and by the caller (MINE[0])
    agent_file: str  # in the Agent's namespace, uploaded by the colleague
    unowned: str  # rag_api row without a user_id

    @property
    def foreign(self) -> list[str]:
        """File ids the caller may not see at all."""
        out = [self.other, self.agent_file]
        if not self.settings.legacy_unowned_readable:
            out.append(self.unowned)
        return out

    def h(self, user: str | None = None) -> dict[str, str]:
        return auth(user or self.caller)


async def make_world(client: httpx.AsyncClient, settings: Settings) -> World:
    w = World(
        client,
        settings,
        new_id("caller"),
        new_id("victim"),
        new_id("colleague"),
        agent_id(),
        [new_id("mine") for _ in MINE],
        new_id("other"),
        new_id("shared"),
        new_id("agentfile"),
        new_id("unowned"),
    )
    for fid, text in zip(w.mine, MINE, strict=True):
        assert (await upload(client, fid, "mine.txt", text.encode(), w.h())).status_code == 200
    assert (await upload(client, w.other, "s.txt", SECRET.encode(), w.h(w.victim))).status_code == 200
    assert (await upload(client, w.shared, "s.txt", SECRET.encode(), w.h(w.victim))).status_code == 200
    assert (await upload(client, w.shared, "m.txt", MINE[0].encode(), w.h())).status_code == 200
    r = await upload(client, w.agent_file, "s.txt", SECRET.encode(), w.h(w.colleague), entity_id=w.agent)
    assert r.status_code == 200
    await insert_unowned(client, w.unowned, SECRET)
    return w


async def insert_unowned(client: httpx.AsyncClient, file_id: str, text: str) -> None:
    """A row as very old rag_api wrote it: no user_id in its metadata."""
    resources = client.app.state.services  # type: ignore[attr-defined]
    vector = await resources.embedder.embed_query(text)
    meta = json.dumps({"file_id": file_id, "digest": "d", "source": "/app/uploads/old.txt"})
    async with resources.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO langchain_pg_embedding "
            "(uuid, collection_id, embedding, document, cmetadata, custom_id) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            uuid.uuid4(),
            resources.info.collection_id,
            vector,
            text,
            meta,
            file_id,
        )


def assert_clean(w: World, pairs: list[list[object]]) -> None:
    """Search results hold only rows the caller may read."""
    allowed_owners = {w.caller} | ({None} if w.settings.legacy_unowned_readable else set())
    for doc, _distance in pairs:
        assert isinstance(doc, dict)
        meta = doc["metadata"]
        assert meta.get("user_id") in allowed_owners, meta
        if meta.get("user_id") is not None:
            assert "Nightingale" not in doc["page_content"]


async def victim_still_has(w: World, file_id: str, user: str, entity_id: str | None = None) -> None:
    r = await query(w.client, SECRET, file_id, w.h(user), k=3, entity_id=entity_id)
    assert r.status_code == 200 and len(r.json()) == 1 and "Nightingale" in r.json()[0][0]["page_content"]


async def unowned_still_there(w: World) -> None:
    resources = w.client.app.state.services  # type: ignore[attr-defined]
    async with resources.pool.acquire() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM langchain_pg_embedding "
            "WHERE custom_id = $1 AND cmetadata ->> 'user_id' IS NULL",
            w.unowned,
        )
    assert n == 1


async def probe_query(w: World) -> None:
    for target in [*w.foreign, w.shared]:
        r = await query(w.client, SECRET, target, w.h(), k=10)
        assert r.status_code == 200
        assert_clean(w, r.json())
        if target == w.shared:
            assert [p[0]["metadata"]["user_id"] for p in r.json()] == [w.caller]
        else:
            assert r.json() == []


async def probe_query_multiple(w: World) -> None:
    ids = [*w.foreign, w.shared, *w.mine]
    r = await w.client.post("/query_multiple", json={"query": SECRET, "file_ids": ids, "k": 3}, headers=w.h())
    assert r.status_code == 200 and len(r.json()) == 3  # k rows although the nearest are foreign
    assert_clean(w, r.json())
    for target in w.foreign:  # the only match: nothing at all
        body = {"query": SECRET, "file_ids": [target], "k": 3}
        r = await w.client.post("/query_multiple", json=body, headers=w.h())
        assert r.status_code == 404


async def probe_get_documents(w: World) -> None:
    for target in w.foreign:
        r = await w.client.get("/documents", params={"ids": [target]}, headers=w.h())
        assert r.status_code == 404
        r = await w.client.get("/documents", params={"ids": [target, w.mine[0]]}, headers=w.h())
        assert r.status_code == 404
    r = await w.client.get("/documents", params={"ids": [w.shared]}, headers=w.h())
    assert r.status_code == 200
    assert [d["page_content"] for d in r.json()] == [MINE[0]]


async def probe_context(w: World) -> None:
    for target in w.foreign:
        r = await w.client.get(f"/documents/{target}/context", headers=w.h())
        assert r.status_code == 404
    r = await w.client.get(f"/documents/{w.shared}/context", headers=w.h())
    assert r.status_code == 200 and "Nightingale" not in r.json() and MINE[0] in r.json()


async def probe_ids(w: World) -> None:
    r = await w.client.get("/ids", headers=w.h())
    assert r.status_code == 200
    ids = set(r.json())
    assert {w.shared, *w.mine} <= ids
    assert not set(w.foreign) & ids
    assert (w.unowned in ids) == w.settings.legacy_unowned_readable


async def probe_delete(w: World) -> None:
    for target in w.foreign:
        r = await w.client.request("DELETE", "/documents", json=[target], headers=w.h())
        assert r.status_code == 404
    await victim_still_has(w, w.other, w.victim)
    await victim_still_has(w, w.agent_file, w.colleague, entity_id=w.agent)
    await unowned_still_there(w)
    # the same file id in two namespaces: only the caller's copy goes
    r = await w.client.request("DELETE", "/documents", json=[w.shared], headers=w.h())
    assert r.status_code == 200
    await victim_still_has(w, w.shared, w.victim)
    r = await w.client.get("/documents", params={"ids": [w.shared]}, headers=w.h())
    assert r.status_code == 404  # gone for the caller, not only answered 200


async def probe_upload(w: World, route: str, field: str) -> None:
    # uploading under a foreign file id creates the caller's own copy and leaves theirs alone
    for target in w.foreign:
        r = await upload(w.client, target, "m.txt", MINE[1].encode(), w.h(), route=route, field=field)
        assert r.status_code == 200
        r = await query(w.client, SECRET, target, w.h(), k=10)
        assert_clean(w, r.json())
        assert [p[0]["page_content"] for p in r.json()] == [MINE[1]]
    await victim_still_has(w, w.other, w.victim)
    await victim_still_has(w, w.agent_file, w.colleague, entity_id=w.agent)
    await unowned_still_there(w)


async def probe_embed(w: World) -> None:
    await probe_upload(w, "/embed", "file")


async def probe_embed_upload(w: World) -> None:
    await probe_upload(w, "/embed-upload", "uploaded_file")


async def probe_local_embed(w: World) -> None:
    w.settings.upload_dir.mkdir(parents=True, exist_ok=True)
    (w.settings.upload_dir / "mine.txt").write_text(MINE[2])
    for target in w.foreign:
        body = {
            "filepath": "mine.txt",
            "filename": "mine.txt",
            "file_content_type": "text/plain",
            "file_id": target,
        }
        r = await w.client.post("/local/embed", json=body, headers=w.h())
        assert r.status_code == 200
        r = await query(w.client, SECRET, target, w.h(), k=10)
        assert [p[0]["page_content"] for p in r.json()] == [MINE[2]]
    await victim_still_has(w, w.other, w.victim)
    await victim_still_has(w, w.agent_file, w.colleague, entity_id=w.agent)


async def probe_text(w: World) -> None:
    # text extraction stores nothing, under whatever file id
    r = await upload(w.client, w.other, "m.txt", MINE[1].encode(), w.h(), route="/text")
    assert r.status_code == 200 and r.json()["text"] == MINE[1]
    await victim_still_has(w, w.other, w.victim)
    assert w.other not in (await w.client.get("/ids", headers=w.h())).json()


def admin_only(
    method: str, path: str, body: object = None, **form: str
) -> Callable[[World], Awaitable[None]]:
    """A V2 admin route: a caller who is not an admin is refused (403) before any row is read or written."""

    async def probe(w: World) -> None:
        if form:
            r = await w.client.post(path, data=form, files={"file": ("a.md", SECRET.encode())}, headers=w.h())
        else:
            r = await w.client.request(method, path, json=body, headers=w.h())
        assert r.status_code == 403, r.text
        assert "Nightingale" not in r.text
        await victim_still_has(w, w.other, w.victim)

    return probe


Probe = Callable[[World], Awaitable[None]]


def console_closed(method: str, path: str) -> Probe:
    """A console page or action: a non-admin's bearer token is no way in, nor the same token as the
    console's cookie (403); nothing of anyone's files in the answer."""

    async def probe(w: World) -> None:
        w.client.cookies.clear()
        data = {"csrf": "x"} if method == "POST" else None
        r = await w.client.request(method, path, headers=w.h(), data=data, follow_redirects=False)
        assert r.status_code in (303, 401, 403), r.text
        assert "Nightingale" not in r.text
        w.client.cookies.set(
            "ragoverlay_console", w.h()["Authorization"].removeprefix("Bearer "), path="/console"
        )
        try:
            r = await w.client.request(method, path, data=data, follow_redirects=False)
        finally:
            w.client.cookies.clear()
        assert r.status_code == 403, r.text
        assert "Nightingale" not in r.text
        await victim_still_has(w, w.other, w.victim)

    return probe


async def probe_console_login(w: World) -> None:
    # a non-admin's token opens nothing, sets no cookie, and the form reads no rows
    w.client.cookies.clear()
    r = await w.client.post("/console/login", data={"token": w.h()["Authorization"].removeprefix("Bearer ")})
    assert r.status_code == 403 and "set-cookie" not in r.headers and "Nightingale" not in r.text
    assert "ragoverlay_console" not in w.client.cookies


async def probe_job(w: World) -> None:
    # a job (an upload accepted with 202) is read by the caller who asked for it, and nobody else
    r = await w.client.post(
        "/embed",
        params={"async": "true"},
        data={"file_id": w.other},
        files={"file": ("s.txt", SECRET.encode(), "text/plain")},
        headers=w.h(w.victim),
    )
    assert r.status_code == 202
    url = r.json()["status_url"]
    r = await w.client.get(url, headers=w.h())
    assert r.status_code == 404 and "Nightingale" not in r.text
    assert (await w.client.get(url, headers=w.h(w.victim))).status_code == 200


async def probe_query_v2(w: World) -> None:
    # this app has V2 off: it fails closed for everyone, before reading a row. The V2 channels'
    # isolation with V2 on (foreign ids in a request, other owners, the allow-list in every
    # statistic) is tested in tests/contract/test_query_v2.py and tests/integration/test_v2_channels.py
    for ids, entity in [(w.foreign, None), ([w.agent_file], w.agent), ([w.shared, *w.mine], None)]:
        body = {"query": SECRET, "file_ids": ids, **({"entity_id": entity} if entity else {})}
        r = await w.client.post("/query_v2", json=body, headers=w.h())
        assert r.status_code == 503 and "Nightingale" not in r.text


# --- the MCP tools (/mcp): every tool is walked as every route is ---------------------------------

MCP_TOOL_PROBES: dict[str, Callable[[World, RawSession], Awaitable[int]]] = {}


def mcp_tool(
    name: str,
) -> Callable[[Callable[[World, RawSession], Awaitable[int]]], Callable[[World, RawSession], Awaitable[int]]]:
    """Register the probe of one tool; it returns how many calls with foreign input it made."""

    def register(
        fn: Callable[[World, RawSession], Awaitable[int]],
    ) -> Callable[[World, RawSession], Awaitable[int]]:
        MCP_TOOL_PROBES[name] = fn
        return fn

    return register


def readable(w: World) -> set[str]:
    """File ids whose rows the caller may get back from a tool."""
    return {*w.mine, w.shared} | ({w.unowned} if w.settings.legacy_unowned_readable else set())


def tool_result(answer: dict[str, object]) -> dict[str, object]:
    result = answer.get("result")
    assert isinstance(result, dict), answer
    return result


def clean_hits(w: World, answer: dict[str, object]) -> None:
    result = tool_result(answer)
    assert result.get("isError") is not True, answer
    data = result["structuredContent"]
    assert isinstance(data, dict)
    for hit in data["results"]:
        assert hit["file_id"] in readable(w), hit
        if hit["file_id"] != w.unowned:
            assert "Nightingale" not in hit["snippet"]


@mcp_tool("rag_search")
async def probe_tool_search(w: World, s: RawSession) -> int:
    calls = 0
    for ids in ([*w.foreign, w.shared], [w.other], [w.agent_file], None):
        for mode in ("v1", None):
            arguments: dict[str, object] = {"query": SECRET, "k": 10}
            if ids is not None:
                arguments["file_ids"] = ids
            if mode is not None:
                arguments["mode"] = mode
            clean_hits(w, await s.call("rag_search", arguments))
            calls += 1
    return calls


@mcp_tool("rag_read")
async def probe_tool_read(w: World, s: RawSession) -> int:
    for target in w.foreign:
        result = tool_result(await s.call("rag_read", {"file_id": target}))
        assert result.get("isError") is True and "Nightingale" not in json.dumps(result)
    shared = tool_result(await s.call("rag_read", {"file_id": w.shared}))
    assert "Nightingale" not in json.dumps(shared) and MINE[0] in json.dumps(shared)
    return len(w.foreign) + 1


@mcp_tool("rag_list")
async def probe_tool_list(w: World, s: RawSession) -> int:
    result = tool_result(await s.call("rag_list", {"limit": 500}))
    listed = {f["file_id"] for f in result["structuredContent"]["files"]}  # type: ignore[index]
    assert listed <= readable(w) and {*w.mine, w.shared} <= listed
    return 1


@mcp_tool("rag_status")
async def probe_tool_status(w: World, s: RawSession) -> int:
    result = tool_result(await s.call("rag_status", {}))
    assert result["structuredContent"]["namespaces"] == [w.caller]  # type: ignore[index]
    assert w.victim not in json.dumps(result)
    return 1


@mcp_tool("rag_jobs")
async def probe_tool_jobs(w: World, s: RawSession) -> int:
    r = await w.client.post(
        "/embed",
        params={"async": "true"},
        data={"file_id": new_id("later")},
        files={"file": ("s.txt", SECRET.encode(), "text/plain")},
        headers=w.h(w.victim),
    )
    assert r.status_code == 202
    theirs = r.json()["job_id"]
    result = tool_result(await s.call("rag_jobs", {"limit": 200}))
    assert theirs not in {j["id"] for j in result["structuredContent"]["jobs"]}  # type: ignore[index]
    assert "Nightingale" not in json.dumps(result)
    return 1


@mcp_tool("rag_reindex")
async def probe_tool_reindex(w: World, s: RawSession) -> int:
    result = tool_result(await s.call("rag_reindex", {"namespace": w.victim, "force": True}))
    assert result.get("isError") is True and "admin" in json.dumps(result)
    return 1


MCP_PROBE_CALLS: list[int] = []


async def probe_mcp(w: World) -> None:
    session = RawSession(w.client, w.h())
    assert (await session.open()).status_code == 200
    listed = tool_result(await session.request("tools/list"))
    names = {t["name"] for t in listed["tools"]}  # type: ignore[attr-defined]
    assert names == set(MCP_TOOL_PROBES), "an MCP tool without a scope probe (or a stale probe)"
    calls = 0
    for name, tool_probe in MCP_TOOL_PROBES.items():
        try:
            calls += await tool_probe(w, session)
        except AssertionError as exc:
            raise AssertionError(f"tool {name}: {exc}") from exc
    MCP_PROBE_CALLS.append(calls)
    await session.close()
    await victim_still_has(w, w.other, w.victim)


async def probe_mcp_foreign_session(w: World) -> None:
    # another caller's session id answers as if it did not exist, for every method
    theirs = RawSession(w.client, w.h(w.victim))
    assert (await theirs.open()).status_code == 200
    for method in ("GET", "DELETE", "POST"):
        r = await w.client.request(
            method,
            "/mcp",
            content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            if method == "POST"
            else None,
            headers={
                **w.h(),
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "mcp-session-id": theirs.session_id or "",
                "mcp-protocol-version": "2025-11-25",
            },
        )
        assert r.status_code == 404, (method, r.text)
    assert "result" in await theirs.request("tools/list")  # the caller's DELETE ended nothing
    await theirs.close()


PROBES: dict[tuple[str, str], Probe] = {
    ("POST", "/mcp"): probe_mcp,
    ("GET", "/mcp"): probe_mcp_foreign_session,
    ("DELETE", "/mcp"): probe_mcp_foreign_session,
    ("POST", "/query_v2"): probe_query_v2,
    ("GET", "/jobs/{job_id}"): probe_job,
    ("GET", "/admin/status"): admin_only("GET", "/admin/status"),
    ("GET", "/admin/jobs"): admin_only("GET", "/admin/jobs"),
    ("GET", "/admin/jobs/{job_id}"): admin_only("GET", "/admin/jobs/1"),
    ("POST", "/admin/jobs/{job_id}/retry"): admin_only("POST", "/admin/jobs/1/retry"),
    ("POST", "/admin/reindex"): admin_only("POST", "/admin/reindex?namespace=victim"),
    ("POST", "/query"): probe_query,
    ("POST", "/query_multiple"): probe_query_multiple,
    ("GET", "/documents"): probe_get_documents,
    ("DELETE", "/documents"): probe_delete,
    ("GET", "/documents/{file_id}/context"): probe_context,
    ("GET", "/ids"): probe_ids,
    ("POST", "/embed"): probe_embed,
    ("POST", "/embed-upload"): probe_embed_upload,
    ("POST", "/local/embed"): probe_local_embed,
    ("POST", "/text"): probe_text,
    # the V2 index's admin routes (an admin manages every namespace's runs; nobody else reaches them)
    # the operator console (admins only, its own cookie)
    ("GET", "/console"): console_closed("GET", "/console"),
    ("GET", "/console/kb/{namespace}"): console_closed("GET", "/console/kb/victim"),
    ("GET", "/console/jobs"): console_closed("GET", "/console/jobs"),
    ("GET", "/console/runs"): console_closed("GET", "/console/runs"),
    ("GET", "/console/api/runs"): console_closed("GET", "/console/api/runs"),
    ("GET", "/console/api/jobs"): console_closed("GET", "/console/api/jobs"),
    ("POST", "/console/jobs/{job_id}/retry"): console_closed("POST", "/console/jobs/1/retry"),
    ("GET", "/console/search"): console_closed("GET", "/console/search?namespace=victim&q=Nightingale"),
    ("GET", "/console/metrics"): console_closed("GET", "/console/metrics"),
    ("POST", "/console/login"): probe_console_login,
    ("GET", "/v2/status"): admin_only("GET", "/v2/status"),
    ("GET", "/v2/runs"): admin_only("GET", "/v2/runs"),
    ("GET", "/v2/runs/{run_id}"): admin_only("GET", "/v2/runs/1"),
    ("POST", "/v2/runs"): admin_only("POST", "/v2/runs", {"namespace": "victim", "file_ids": ["x"]}),
    ("POST", "/v2/runs/{run_id}/stage"): admin_only("POST", "/v2/runs/1/stage", {"file_id": "x"}),
    ("POST", "/v2/runs/{run_id}/activate"): admin_only("POST", "/v2/runs/1/activate"),
    ("POST", "/v2/runs/{run_id}/fail"): admin_only("POST", "/v2/runs/1/fail"),
    ("POST", "/v2/backfill"): admin_only("POST", "/v2/backfill", {"namespace": "victim"}),
    ("POST", "/v2/derivative"): admin_only(
        "POST", "/v2/derivative", run_id="1", file_id="x", sha256="0" * 64
    ),
}
# Routes that touch no caller data, and why.
NO_CALLER_DATA = {
    ("GET", "/health"): "answers UP or DOWN, reads no rows",
    ("POST", "/validate_v2"): "checks the answer it is sent against the evidence it is sent; reads no rows",
    ("GET", "/metrics"): "counters by route template for admins; never a row, an id or a query",
    ("GET", "/openapi.json"): "the schema",
    ("GET", "/docs"): "static page",
    ("GET", "/docs/oauth2-redirect"): "static page",
    ("GET", "/redoc"): "static page",
    ("GET", "/console/login"): "the console's login form",
    (
        "POST",
        "/console/logout",
    ): "forgets the console's cookie (with the session's CSRF token); reads no rows",
    ("GET", "/console/static/{name}"): "the console's stylesheet and script",
}


def app_routes(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    """(method, path) of every route, through included routers (FastAPI nests them since 0.12x)."""
    out: set[tuple[str, str]] = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            out |= app_routes(included.routes, prefix + getattr(context, "prefix", ""))
        elif isinstance(route, Route):
            out.update((m, prefix + route.path) for m in (route.methods or ()) if m != "HEAD")
        else:
            raise AssertionError(f"a route of an unknown kind: {route!r}")
    return out


@pytest.fixture(scope="module", params=[False, True], ids=["owners", "legacy-unowned-readable"])
async def scoped_app(
    request: pytest.FixtureRequest, settings_factory: Callable[..., Settings]
) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    settings = settings_factory(legacy_unowned_readable=request.param)
    async with running_app(settings) as client:
        yield client, settings


async def test_every_route_keeps_foreign_rows_out(scoped_app: tuple[httpx.AsyncClient, Settings]) -> None:
    client, settings = scoped_app
    routes = app_routes(client.app.routes)  # type: ignore[attr-defined]
    assert routes == set(PROBES) | set(NO_CALLER_DATA), "a route without a scope probe (or a stale probe)"
    for key, probe in PROBES.items():
        world = await make_world(client, settings)
        try:
            await probe(world)
        except AssertionError as exc:
            raise AssertionError(f"{key[0]} {key[1]}: {exc}") from exc
    # every tool was walked, each with foreign input more than once in all
    assert MCP_PROBE_CALLS and MCP_PROBE_CALLS[-1] >= 2 * len(MCP_TOOL_PROBES)
    print(f"MCP isolation probes: {MCP_PROBE_CALLS[-1]} tool calls over {len(MCP_TOOL_PROBES)} tools")


# --- the SQL search paths --------------------------------------------------------------------

DIMS = 24  # a dimension of its own: its HNSW index holds this module's rows only
SPEC = IndexSpec(DIMS)
CALLER, VICTIM, AGENT, COLLEAGUE = "caller", "victim", "agent_x", "colleague"


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class Corpus:
    info: StoreInfo
    other: StoreInfo  # another collection, same file ids and owners
    query: np.ndarray
    mine: list[str]  # 30 files of 10 rows, the caller's
    small: str  # the caller's file of 4 rows
    shared: str  # also held by the victim
    foreign: dict[str, str]  # kind -> file id


def rows(file_id: str, owner: str | None, vectors: np.ndarray, tag: str) -> list[store.NewChunk]:
    ids = uuid7_batch(len(vectors))
    meta = {"file_id": file_id, "digest": tag, "source": "s"}
    if owner is not None:
        meta["user_id"] = owner
    return [store.NewChunk(ids[i], vectors[i], f"{tag} {i}", dict(meta)) for i in range(len(vectors))]


async def put(
    conn: asyncpg.Connection,
    info: StoreInfo,
    fid: str,
    owner: str,
    vecs: np.ndarray,
    tag: str,
    uploader: str = "",
) -> None:
    record = store.FileRecord(fid, owner, uploader or owner, "f", None, 1, None, None, len(vecs), "m", DIMS)
    async with conn.transaction():
        await store.replace_file(conn, info, record, rows(fid, owner, vecs, tag))


@pytest.fixture(scope="module")
async def corpus(database: Database) -> AsyncIterator[Corpus]:
    rng = np.random.default_rng(11)
    info = await bootstrap(database.dsn, f"scope_{uuid.uuid4().hex[:8]}")
    other = await bootstrap(database.dsn, f"scope_other_{uuid.uuid4().hex[:8]}")
    query_vector = unit(rng.normal(size=DIMS))
    near = unit(query_vector + 0.0001 * rng.normal(size=(3, DIMS)))  # the nearest rows there are
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    mine = [f"mine-{i:02d}" for i in range(30)]
    foreign = {
        "victim": "victims-file",
        "agent-not-mine": "agents-file",
        "unowned": "old-file",
        "other-collection": mine[0],
    }
    try:
        for fid in mine:
            await put(conn, info, fid, CALLER, unit(rng.normal(size=(10, DIMS))), "MINE")
        await put(conn, info, "small", CALLER, unit(rng.normal(size=(4, DIMS))), "MINE")
        await put(conn, info, "shared", CALLER, unit(rng.normal(size=(5, DIMS))), "MINE")
        await put(conn, info, "shared", VICTIM, near, "FOREIGN")
        await put(conn, info, foreign["victim"], VICTIM, near, "FOREIGN")
        await put(conn, info, foreign["agent-not-mine"], AGENT, near, "FOREIGN", uploader=COLLEAGUE)
        # the caller's upload into the Agent's namespace: the uploader rule makes it visible
        await put(
            conn, info, "my-agent-upload", AGENT, unit(rng.normal(size=(3, DIMS))), "MINE", uploader=CALLER
        )
        await put(conn, other, mine[0], CALLER, near, "FOREIGN")
        async with conn.transaction():
            await conn.copy_records_to_table(
                "langchain_pg_embedding",
                columns=["uuid", "collection_id", "embedding", "document", "cmetadata", "custom_id"],
                records=[
                    (
                        c.id,
                        info.collection_id,
                        c.embedding,
                        c.text,
                        json.dumps(c.metadata),
                        foreign["unowned"],
                    )
                    for c in rows(foreign["unowned"], None, near, "UNOWNED")
                ],
            )
        await conn.execute("ANALYZE ragoverlay_vectors")
        assert await build_index(conn, SPEC, m=16, ef_construction=64, memory="64MB") == "valid"
    finally:
        await conn.close()
    yield Corpus(info, other, query_vector, mine, "small", "shared", foreign)


@dataclass(frozen=True)
class PathCase:
    name: str
    path: str
    use_copy: bool
    max_scan: int = 50_000


# exact on the copy, the HNSW walk, the exact fallback after a walk that met too few, no copy
PATH_CASES = [
    PathCase("exact-on-copy", "exact", True),
    PathCase("index-walk", "index", True),
    PathCase("exact-fallback", "index", True, max_scan=1),
    PathCase("no-copy", "exact", False),
]


def choose(case: PathCase, k: int) -> VectorSearchDecision:
    if case.path == "index":
        c = candidate_count(k)
        return VectorSearchDecision(
            "index", True, k, c, True, 0, SPEC.function_name, max(40, c), case.max_scan
        )
    return VectorSearchDecision(
        "exact", case.use_copy, k, candidate_count(k) if case.use_copy else k, True, 0
    )


def scopes(corpus: Corpus) -> Iterator[tuple[str, Scope, set[str | None]]]:
    """(name, scope, owners a visible row may have)."""
    base = Scope.of(corpus.info.collection_id, [CALLER], uploader=CALLER)
    yield "owner", base, {CALLER}
    yield "legacy", dataclasses.replace(base, legacy_unowned=True), {CALLER, None}


async def test_every_search_path_keeps_foreign_rows_out(database: Database, corpus: Corpus) -> None:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    seen_paths: set[str] = set()
    try:
        for case, (name, scope, owners) in itertools.product(PATH_CASES, scopes(corpus)):
            where = f"{case.name}/{name}"
            foreign = [f for kind, f in corpus.foreign.items() if not (kind == "unowned" and None in owners)]
            # the nearest rows are foreign; the caller still gets k of its own
            allow = [*foreign, corpus.shared, *corpus.mine]
            k = 10
            if case.name == "exact-fallback":
                # 12 visible rows < k (the other collection's file id is the caller's own file here)
                nearest = [f for f in foreign if f != corpus.mine[0]]
                allow, k = [*nearest, corpus.shared, corpus.small, "my-agent-upload"], 20
            result = await store.search(conn, scope.with_files(allow), choose(case, k).call(corpus.query))
            seen_paths.add(result.path)
            assert all(not h.text.startswith("FOREIGN") for h in result.hits), where
            assert all(h.metadata.get("user_id") in owners | {AGENT} for h in result.hits), where
            assert all(
                h.metadata.get("user_id") != AGENT or h.file_id == "my-agent-upload" for h in result.hits
            )
            want_path = {"exact-on-copy": "exact", "index-walk": "index", "no-copy": "exact"}
            if case.name == "exact-fallback":
                assert result.path == "exact-fallback", where
                assert len(result.hits) == 12, where  # every visible row, none of the nearer foreign ones
            else:
                assert result.path == want_path[case.name], where
                assert len(result.hits) == k, where
            # each foreign file the only match: nothing
            for fid in foreign:
                only = await store.search(conn, scope.with_files([fid]), choose(case, 5).call(corpus.query))
                if fid == corpus.mine[0]:  # the other collection's copy; the caller's own here
                    assert only.hits and all(not h.text.startswith("FOREIGN") for h in only.hits), where
                else:
                    assert only.hits == [], (where, fid)
            # the uploader rule: the caller's upload into the Agent's namespace is readable
            up = await store.search(
                conn, scope.with_files(["my-agent-upload"]), choose(case, 5).call(corpus.query)
            )
            assert {h.file_id for h in up.hits} == {"my-agent-upload"}, where
            if None in owners:
                old = await store.search(
                    conn, scope.with_files([corpus.foreign["unowned"]]), choose(case, 5).call(corpus.query)
                )
                assert len(old.hits) == 3 and all(h.text.startswith("UNOWNED") for h in old.hits), where
    finally:
        await conn.close()
    assert seen_paths == {"exact", "index", "exact-fallback"}


async def test_the_namespace_walk_keeps_foreign_rows_out(database: Database, corpus: Corpus) -> None:
    """The caller's namespace walked through its own index: the same probes as every path above."""
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        size = NamespaceSize(CALLER, DIMS, 319)
        assert (
            await build_namespace_index(
                conn, corpus.info.collection_id, size, m=16, ef_construction=64, memory="64MB"
            )
            == "valid"
        )
        c = candidate_count(10)

        def walk(k: int) -> VectorSearchDecision:
            return VectorSearchDecision(
                "index",
                True,
                k,
                candidate_count(k),
                True,
                0,
                namespace_walk_name(DIMS),
                max(40, c),
                50_000,
                namespace=CALLER,
            )

        scope = Scope.of(corpus.info.collection_id, [CALLER], uploader=CALLER)
        foreign = [f for kind, f in corpus.foreign.items() if kind != "unowned"]
        allow = [*foreign, corpus.shared, *corpus.mine, "my-agent-upload", corpus.foreign["unowned"]]
        result = await store.search(conn, scope.with_files(allow), walk(10).call(corpus.query))
        assert result.path == "namespace-index" and len(result.hits) == 10
        assert all(not h.text.startswith(("FOREIGN", "UNOWNED")) for h in result.hits)
        assert all(h.metadata.get("user_id") in {CALLER, AGENT} for h in result.hits)
        # the caller's upload into the Agent's namespace is outside the walked namespace: ranked beside it
        up = await store.search(
            conn, scope.with_files([*corpus.mine, "my-agent-upload"]), walk(400).call(corpus.query)
        )
        assert "my-agent-upload" in {h.file_id for h in up.hits}
        assert {h.metadata.get("user_id") for h in up.hits} == {CALLER, AGENT}
        for fid in foreign:
            only = await store.search(conn, scope.with_files([fid]), walk(5).call(corpus.query))
            assert all(not h.text.startswith("FOREIGN") for h in only.hits), fid
            if fid != corpus.mine[0]:
                assert only.hits == [], fid
        # another collection's scope never reaches this collection's namespace index
        other = Scope.of(corpus.other.collection_id, [CALLER], uploader=CALLER).with_files(corpus.mine)
        theirs = await store.search(conn, other, walk(5).call(corpus.query))
        assert all(h.text.startswith("FOREIGN") for h in theirs.hits)  # the other collection's own rows
    finally:
        await conn.close()


async def test_the_memory_scan_keeps_foreign_rows_out(
    database: Database, corpus: Corpus, settings_factory: Callable[..., Settings]
) -> None:
    """V1's exact scan on vectors held in the service: the same probes, the cache warmed by everyone."""
    pool = await asyncpg.create_pool(database.dsn, min_size=1, max_size=1, init=register_vector)
    searching = SearchSettings.from_settings(settings_factory())
    search = SearchService(searching, pool, corpus.info, embedder=None)  # type: ignore[arg-type]

    def memory(k: int) -> VectorSearchDecision:
        return VectorSearchDecision("exact", True, k, candidate_count(k), True, 0, in_memory=True)

    base = Scope.of(corpus.info.collection_id, [CALLER], uploader=CALLER)
    try:
        async with pool.acquire() as conn:
            # the foreign namespaces search first: their vectors are in memory from then on
            for owner in {
                AGENT,
                *(
                    o
                    for o in await conn.fetchval(
                        "SELECT array_agg(DISTINCT owner) FROM ragoverlay_vector_files"
                    )
                    if o != CALLER
                ),
            }:
                other = Scope.of(corpus.info.collection_id, [owner])
                everything = [*corpus.foreign.values(), corpus.shared, *corpus.mine, "my-agent-upload"]
                await search.search_in_memory(
                    conn, other.with_files(everything), memory(10), corpus.query, 10
                )
            foreign = [f for kind, f in corpus.foreign.items() if kind != "unowned"]
            allow = [*foreign, corpus.shared, *corpus.mine]
            result = await search.search_in_memory(conn, base.with_files(allow), memory(10), corpus.query, 10)
            assert result is not None and result.path == "memory" and len(result.hits) == 10
            assert all(not h.text.startswith("FOREIGN") for h in result.hits)
            assert all(h.metadata.get("user_id") in {CALLER, AGENT} for h in result.hits)
            assert all(
                h.metadata.get("user_id") != AGENT or h.file_id == "my-agent-upload" for h in result.hits
            )
            for fid in [*corpus.foreign.values()]:
                only = await search.search_in_memory(
                    conn, base.with_files([fid]), memory(5), corpus.query, 10
                )
                assert only is not None
                if fid == corpus.mine[0]:  # the other collection's copy; the caller's own here
                    assert only.hits and all(not h.text.startswith("FOREIGN") for h in only.hits)
                else:
                    assert only.hits == [], fid
            up = await search.search_in_memory(
                conn, base.with_files(["my-agent-upload"]), memory(5), corpus.query, 10
            )
            assert up is not None and {h.file_id for h in up.hits} == {"my-agent-upload"}
            # unowned rows are not tracked: a scope that may see them is refused, never half-answered
            legacy = dataclasses.replace(base.with_files(allow), legacy_unowned=True)
            with pytest.raises(asyncpg.RaiseError, match="owners only"):
                await search.search_in_memory(conn, legacy, memory(5), corpus.query, 10)
    finally:
        await pool.close()


async def test_reads_and_deletes_keep_foreign_rows(database: Database, corpus: Corpus) -> None:
    """The same foreign rows against documents, file ids and deletes (in a transaction rolled back)."""
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        for _name, scope, owners in scopes(corpus):
            foreign = [f for kind, f in corpus.foreign.items() if not (kind == "unowned" and None in owners)]
            foreign.remove(corpus.mine[0])  # the other collection's file id is also the caller's here
            docs = await store.documents(conn, scope.with_files([*foreign, corpus.shared]), limit=100)
            assert {d.file_id for d in docs} == {corpus.shared}
            assert all(d.metadata.get("user_id") == CALLER for d in docs)
            ids = await store.list_file_ids(conn, scope, limit=1000)
            assert not set(foreign) & set(ids)
            assert {"my-agent-upload", corpus.shared, *corpus.mine} <= set(ids)
            tx = conn.transaction()
            await tx.start()
            try:
                before = await conn.fetchval("SELECT count(*) FROM langchain_pg_embedding")
                result = await store.delete_files(conn, scope.with_files([*foreign, corpus.shared]))
                assert result.found == {corpus.shared}
                assert await conn.fetchval("SELECT count(*) FROM langchain_pg_embedding") == before - 5
                left = await conn.fetch(
                    "SELECT cmetadata ->> 'user_id' AS owner FROM langchain_pg_embedding "
                    "WHERE collection_id = $1 AND custom_id = 'shared'",
                    corpus.info.collection_id,
                )
                assert [r["owner"] for r in left] == [VICTIM] * 3
            finally:
                await tx.rollback()
        # reads refuse DELETE_SCOPE=caller's any-owner scope, in Python and in SQL
        anyone = Scope.of(corpus.info.collection_id, [CALLER], file_ids=[corpus.shared], any_owner=True)
        with pytest.raises(ScopeError):
            await store.documents(conn, anyone, limit=10)
        with pytest.raises(asyncpg.RaiseError, match="deletes only"):
            await conn.fetch(
                "SELECT * FROM ragoverlay_documents("
                "ragoverlay_caller_scope($1, $2, $3, p_any_owner => true), 10)",
                corpus.info.collection_id,
                [CALLER],
                [corpus.shared],
            )
    finally:
        await conn.close()


# --- the predicate itself --------------------------------------------------------------------


def model_visible(
    scope: Scope, collection: uuid.UUID, file_id: str, owner: str | None, uploader: str | None
) -> bool:
    """The rule as docs/operations.md states it, in Python: the oracle for the SQL predicate."""
    if collection != scope.collection_id:
        return False
    if scope.file_ids is not None and file_id not in scope.file_ids:
        return False
    if scope.any_owner or owner in scope.owners:
        return True
    if owner is None:
        return scope.legacy_unowned
    return scope.uploader is not None and uploader == scope.uploader


async def test_the_predicate_matches_the_rule(database: Database, corpus: Corpus) -> None:
    """Every combination of row and scope in a small universe, against the Python statement of the rule."""
    conn = await asyncpg.connect(database.dsn)
    try:
        # (file, owner) -> uploader, as catalogued in the corpus
        catalogue = {
            (r["file_id"], r["owner"]): r["uploader"]
            for r in await conn.fetch(
                "SELECT file_id, owner, uploader FROM ragoverlay_files WHERE collection_id = $1",
                corpus.info.collection_id,
            )
        }
        files = ["shared", "my-agent-upload", corpus.foreign["agent-not-mine"], "old-file", "nope"]
        owners: list[str | None] = [CALLER, VICTIM, AGENT, None, ""]
        collections = [corpus.info.collection_id, corpus.other.collection_id]
        scopes_ = [
            Scope.of(c, o, uploader=u, file_ids=f, legacy_unowned=legacy, any_owner=anyone)
            for c in collections[:1]
            for o in ([CALLER], [CALLER, AGENT], [VICTIM])
            for u in (None, CALLER, COLLEAGUE)
            for f in (None, [], ["shared"], ["shared", "my-agent-upload", "old-file", "nope"])
            for legacy in (False, True)
            for anyone in (False, True)
        ]
        checked = 0
        for scope in scopes_:
            cases = [(c, f, o) for c in collections for f in files for o in owners]
            got = await conn.fetch(
                "SELECT ragoverlay_in_scope(s, c.collection_id, c.file_id, c.owner) AS visible "
                "FROM ragoverlay_caller_scope($1, $2::text[], $3::text[], $4, $5, $6) AS s, "
                "unnest($7::uuid[], $8::text[], $9::text[]) "
                "WITH ORDINALITY AS c(collection_id, file_id, owner, n) "
                "ORDER BY c.n",
                *scope.sql_args(),
                [c for c, _, _ in cases],
                [f for _, f, _ in cases],
                [o for _, _, o in cases],
            )
            for (c, f, o), row in zip(cases, got, strict=True):
                uploader = catalogue.get((f, o)) if c == corpus.info.collection_id else None
                assert bool(row["visible"]) == model_visible(scope, c, f, o, uploader), (scope, c, f, o)
                checked += 1
        assert checked == len(scopes_) * 2 * 5 * 5
    finally:
        await conn.close()


async def test_the_predicate_is_inlined(database: Database, corpus: Corpus) -> None:
    """PostgreSQL inlines the check: no function call per row, its parts visible to the planner."""
    conn = await asyncpg.connect(database.dsn)
    try:
        plan = await conn.fetchval(
            "EXPLAIN (VERBOSE, FORMAT JSON) SELECT v.uuid FROM ragoverlay_vectors v, "
            "ragoverlay_caller_scope($1, $2::text[], $3::text[]) AS s "
            "WHERE ragoverlay_in_scope(s, v.collection_id, v.file_id, v.owner)",
            corpus.info.collection_id,
            [CALLER],
            ["shared"],
        )
        text = json.dumps(plan)
        assert "ragoverlay_in_scope" not in text
        assert "owners" in text and "fileset" in text
    finally:
        await conn.close()
