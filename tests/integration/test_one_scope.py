"""Every door that reads or deletes stored files gets its `Scope` from one place: `Access`.

The test walks every route of the app (`app.routes`) and every MCP tool (`tools/list`). Each is
either a door, called here over HTTP against the real database while `Access.read_scope` and
`Access.delete_scope` (app/access/scope.py) are wrapped, or named with the reason it reads no
caller's files. It fails when

- a route or tool is added without being classified here (so a new reading route is walked);
- a door answers without calling the one function of its kind;
- a door calls it but hands SQL a `Scope` built some other way: every scope whose fields reach a
  statement while the door is served must be one `Access` returned, or narrower (the same caller,
  owners and flags, and a subset of its files).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pytest

from app.access.namespaces import Caller
from app.access.principal import Principal
from app.access.scope import Access
from app.store.scope import Scope
from tests.contract.helpers import agent_id, upload
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app
from tests.integration.mcp_support import RawSession
from tests.integration.test_scope_everywhere import app_routes

T = TypeVar("T")
TEXT = "The heron nests in the reeds by the north pond every spring."


@dataclass
class Seen:
    """What one door did: the scopes `Access` built (with their kind) and those SQL received."""

    built: list[tuple[str, Scope]] = field(default_factory=list)
    used: list[Scope] = field(default_factory=list)

    def clear(self) -> None:
        self.built.clear()
        self.used.clear()


# Set while a door is served. Tasks the request starts (an MCP session, a vector-cache load)
# inherit it; the job worker, started with the app, does not, so its own reads are never counted.
SEEING: contextvars.ContextVar[Seen | None] = contextvars.ContextVar("seeing", default=None)


def covers(built: Scope, used: Scope) -> bool:
    """True when `used` reads nothing `built` does not: the same caller and flags, at most its files."""
    same = (
        used.collection_id == built.collection_id
        and used.owners == built.owners
        and used.uploader == built.uploader
        and used.legacy_unowned == built.legacy_unowned
        and used.any_owner == built.any_owner
    )
    if built.file_ids is None:
        return same
    return same and used.file_ids is not None and set(used.file_ids) <= set(built.file_ids)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """The one read and the one delete function wrapped, and the point where a scope enters SQL."""
    record = Seen()
    read_scope, delete_scope, sql_args = Access.read_scope, Access.delete_scope, Scope.sql_args

    async def reading(
        self: Access, who: Principal | Caller, entity_id: str | None, file_ids: Sequence[str] | None
    ) -> Scope:
        scope = await read_scope(self, who, entity_id, file_ids)
        record.built.append(("read", scope))
        return scope

    def deleting(
        self: Access, principal: Principal, file_ids: Sequence[str], *, editor_of: Sequence[str] = ()
    ) -> Scope:
        scope = delete_scope(self, principal, file_ids, editor_of=editor_of)
        record.built.append(("delete", scope))
        return scope

    def entering_sql(self: Scope) -> tuple[object, ...]:
        current = SEEING.get()
        if current is not None:
            current.used.append(self)
        return sql_args(self)

    monkeypatch.setattr(Access, "read_scope", reading)
    monkeypatch.setattr(Access, "delete_scope", deleting)
    monkeypatch.setattr(Scope, "sql_args", entering_sql)
    return record


async def served(seen: Seen, call: Callable[[], Awaitable[T]]) -> T:
    """`call`'s answer, with what it did recorded in `seen` (cleared first)."""
    seen.clear()
    token = SEEING.set(seen)
    try:
        return await call()
    finally:
        SEEING.reset(token)


def assert_one_way(door: str, kind: str, seen: Seen, *, reaches_sql: bool = True) -> None:
    """The door built its scopes through `Access` only, and SQL saw nothing else."""
    kinds = {k for k, _ in seen.built}
    assert kinds == {kind}, f"{door}: scopes built through Access: {sorted(kinds) or 'none'}; want {kind}"
    if reaches_sql:
        assert seen.used, f"{door}: no scope reached SQL (did the call read anything?)"
    for used in seen.used:
        assert any(covers(built, used) for _, built in seen.built), (
            f"{door}: SQL received a scope Access did not build: {used}"
        )


class EditorAllowList:
    """The catalogue re-check switched on, letting every file through; the caller edits `agent`.

    Switched on so that a delete also takes its second step (an Agent editor's namespaces).
    """

    enabled = True

    def __init__(self, agent: str) -> None:
        self.agent = agent

    async def searchable(
        self, principal: Principal, entity_id: str | None, file_ids: Sequence[str]
    ) -> list[str]:
        """Every id, in order."""
        return list(file_ids)

    async def agent_visible(self, principal: Principal, entity_id: str) -> bool:
        """Every Agent."""
        return True

    async def editable_agents(self, principal: Principal) -> list[str]:
        """The one Agent."""
        return [self.agent]

    async def aclose(self) -> None:
        """Nothing to release."""


@dataclass
class World:
    """The caller's files, an Agent's file a colleague uploaded, and the client."""

    client: httpx.AsyncClient
    caller: str
    agent: str
    mine: str
    agent_file: str  # in the Agent's namespace, uploaded by a colleague
    doomed: str  # the caller's, deleted by the delete door
    agent_doomed: str  # like agent_file, deleted by the delete door as the Agent's editor

    def h(self) -> dict[str, str]:
        return auth(self.caller)


@pytest.fixture(scope="module")
async def world(settings_factory: SettingsFactory) -> AsyncIterator[World]:
    caller = new_id("caller")
    # evidence search on for the caller's own namespace, so /query_v2 gets as far as its scope
    async with running_app(settings_factory(v2_namespace_ids=[caller])) as client:
        w = World(client, caller, agent_id(), *(new_id(p) for p in ("mine", "kb", "doomed", "kbdoomed")))
        for file_id in (w.mine, w.doomed):
            assert (await upload(client, file_id, "notes.txt", TEXT.encode(), w.h())).status_code == 200
        colleague = auth(new_id("colleague"))
        for file_id in (w.agent_file, w.agent_doomed):
            response = await upload(client, file_id, "kb.txt", TEXT.encode(), colleague, entity_id=w.agent)
            assert response.status_code == 200
        access = resources(client).access
        saved, access.allowlist = access.allowlist, EditorAllowList(w.agent)
        try:
            yield w
        finally:
            access.allowlist = saved


Door = Callable[[World], Awaitable[httpx.Response]]

# (method, path) -> (the kind of scope it must build, a valid request, the statuses it may answer)
DOORS: dict[tuple[str, str], tuple[str, Door, set[int]]] = {
    ("POST", "/query"): (
        "read",
        lambda w: w.client.post("/query", json={"query": TEXT, "file_id": w.mine}, headers=w.h()),
        {200},
    ),
    ("POST", "/query_multiple"): (
        "read",
        lambda w: w.client.post(
            "/query_multiple",
            json={"query": TEXT, "file_ids": [w.mine, w.agent_file], "entity_id": w.agent},
            headers=w.h(),
        ),
        {200},
    ),
    ("GET", "/documents"): (
        "read",
        lambda w: w.client.get("/documents", params={"ids": [w.mine]}, headers=w.h()),
        {200},
    ),
    ("GET", "/documents/{file_id}/context"): (
        "read",
        lambda w: w.client.get(f"/documents/{w.mine}/context", headers=w.h()),
        {200},
    ),
    ("GET", "/ids"): (
        "read",
        lambda w: w.client.get("/ids", params={"entity_id": w.agent}, headers=w.h()),
        {200},
    ),
    # 503 until the namespace's first index run is active: the scope is built before that answer
    ("POST", "/query_v2"): (
        "read",
        lambda w: w.client.post("/query_v2", json={"query": TEXT, "file_ids": [w.mine]}, headers=w.h()),
        {200, 503},
    ),
    # last: it deletes the caller's file and, as the Agent's editor, the colleague's
    ("DELETE", "/documents"): (
        "delete",
        lambda w: w.client.request("DELETE", "/documents", json=[w.doomed, w.agent_doomed], headers=w.h()),
        {200},
    ),
}
ADMINS_ONLY = "admins only (403 for anyone else): they manage every namespace, outside any caller's scope"
# Routes that read no caller's stored files, and why.
NOT_DOORS: dict[tuple[str, str], str] = {
    ("GET", "/health"): "answers UP or DOWN, reads no rows",
    ("GET", "/metrics"): "counters by route template; never a row, an id or a query",
    ("GET", "/openapi.json"): "the schema",
    ("GET", "/docs"): "static page",
    ("GET", "/docs/oauth2-redirect"): "static page",
    ("GET", "/redoc"): "static page",
    ("POST", "/validate_v2"): "checks the answer it is sent against the evidence it is sent",
    ("POST", "/embed"): "writes into the caller's namespace (write_owner); reads no stored file",
    ("POST", "/embed-upload"): "writes into the caller's namespace (write_owner); reads no stored file",
    ("POST", "/local/embed"): "writes into the caller's namespace (write_owner); reads no stored file",
    ("POST", "/text"): "answers the text of the file it is sent; stores and reads nothing",
    ("GET", "/jobs/{job_id}"): "a queued job, shown to the caller who asked for it; no stored file",
    ("POST", "/mcp"): "the MCP transport: its tools are walked below (MCP_DOORS, NOT_MCP_DOORS)",
    ("GET", "/mcp"): "an MCP session's event stream, bound to its caller",
    ("DELETE", "/mcp"): "ends an MCP session, bound to its caller",
    ("GET", "/admin/status"): ADMINS_ONLY,
    ("GET", "/admin/jobs"): ADMINS_ONLY,
    ("GET", "/admin/jobs/{job_id}"): ADMINS_ONLY,
    ("POST", "/admin/jobs/{job_id}/retry"): ADMINS_ONLY,
    ("POST", "/admin/reindex"): ADMINS_ONLY,
    ("GET", "/v2/status"): ADMINS_ONLY,
    ("GET", "/v2/runs"): ADMINS_ONLY,
    ("GET", "/v2/runs/{run_id}"): ADMINS_ONLY,
    ("POST", "/v2/runs"): ADMINS_ONLY,
    ("POST", "/v2/runs/{run_id}/stage"): ADMINS_ONLY,
    ("POST", "/v2/runs/{run_id}/activate"): ADMINS_ONLY,
    ("POST", "/v2/runs/{run_id}/fail"): ADMINS_ONLY,
    ("POST", "/v2/backfill"): ADMINS_ONLY,
    ("POST", "/v2/derivative"): ADMINS_ONLY,
    # the operator console: admins only, through its own cookie (app/console/session.py); its search
    # page asks as a chosen user through Access.read_scope, as that user's request would
    ("GET", "/console"): ADMINS_ONLY,
    ("GET", "/console/kb/{namespace}"): ADMINS_ONLY,
    ("GET", "/console/jobs"): ADMINS_ONLY,
    ("GET", "/console/runs"): ADMINS_ONLY,
    ("GET", "/console/api/runs"): ADMINS_ONLY,
    ("GET", "/console/api/jobs"): ADMINS_ONLY,
    ("POST", "/console/jobs/{job_id}/retry"): ADMINS_ONLY,
    ("GET", "/console/search"): ADMINS_ONLY,
    ("GET", "/console/metrics"): ADMINS_ONLY,
    ("GET", "/console/login"): "the login form; reads no rows",
    ("POST", "/console/login"): "checks the token it is sent; an admin's opens the console, reads no rows",
    ("POST", "/console/logout"): "forgets the console's cookie; reads no rows",
    ("GET", "/console/static/{name}"): "the console's stylesheet and script",
}


async def test_every_route_that_reads_or_deletes_builds_its_scope_through_access(
    world: World, seen: Seen
) -> None:
    routes = app_routes(world.client.app.routes)  # type: ignore[attr-defined]
    assert not set(DOORS) & set(NOT_DOORS)
    unclassified = routes - set(DOORS) - set(NOT_DOORS)
    assert not unclassified, (
        f"classify these routes in DOORS (they read or delete) or NOT_DOORS: {unclassified}"
    )
    assert not (set(DOORS) | set(NOT_DOORS)) - routes, "a stale entry: the app has no such route"
    for (method, path), (kind, door, statuses) in DOORS.items():
        name = f"{method} {path}"
        response = await served(seen, functools.partial(door, world))
        assert response.status_code in statuses, (name, response.status_code, response.text)
        # a V2 answer of 503 (no active index run yet) comes before its SQL
        assert_one_way(name, kind, seen, reaches_sql=response.status_code == 200)


async def test_a_delete_reaches_an_agent_editors_files_through_the_same_function(
    world: World, seen: Seen
) -> None:
    own, theirs = new_id("own"), new_id("theirs")
    assert (await upload(world.client, own, "a.txt", TEXT.encode(), world.h())).status_code == 200
    colleague = auth(new_id("colleague"))
    r = await upload(world.client, theirs, "b.txt", TEXT.encode(), colleague, entity_id=world.agent)
    assert r.status_code == 200
    response = await served(
        seen, lambda: world.client.request("DELETE", "/documents", json=[own, theirs], headers=world.h())
    )
    assert response.status_code == 200, response.text
    assert_one_way("DELETE /documents", "delete", seen)
    owners = [scope.owners for _, scope in seen.built]
    assert owners == [(world.caller,), (world.agent, world.caller)]  # the caller's, then the Agent's


# tool -> argument sets that walk each of its branches (file ids or none, V1 or V2, an Agent)
MCP_DOORS: dict[str, list[dict[str, Any]]] = {
    "rag_search": [
        {"query": TEXT, "file_ids": ["{mine}"], "mode": "v1"},
        {"query": TEXT, "mode": "v1"},
        {"query": TEXT, "file_ids": ["{agent_file}"], "entity_id": "{agent}", "mode": "v1"},
        {"query": TEXT, "file_ids": ["{mine}"], "mode": "v2"},
    ],
    "rag_read": [{"file_id": "{mine}"}, {"file_id": "{agent_file}", "entity_id": "{agent}"}],
    "rag_list": [{"limit": 10}, {"entity_id": "{agent}"}],
}
# Tools that read no caller's stored files, and why.
NOT_MCP_DOORS: dict[str, str] = {
    "rag_status": "who the caller is, its namespaces and whether V2 serves them; no stored file",
    "rag_jobs": "the caller's own queued jobs; no stored file",
    "rag_reindex": "admins only: queues a namespace's V2 backfill",
}


def _filled(arguments: dict[str, Any], w: World) -> dict[str, Any]:
    names = {"mine": w.mine, "agent_file": w.agent_file, "agent": w.agent}

    def fill(value: Any) -> Any:
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value.format(**names) if isinstance(value, str) and value.startswith("{") else value

    return {key: fill(value) for key, value in arguments.items()}


async def test_every_mcp_tool_that_reads_builds_its_scope_through_access(world: World, seen: Seen) -> None:
    # the session is opened while SEEING is set: the tasks that serve its tool calls inherit it
    token = SEEING.set(seen)
    try:
        session = RawSession(world.client, world.h())
        assert (await session.open()).status_code == 200
        listed = (await session.request("tools/list"))["result"]["tools"]
        names = {tool["name"] for tool in listed}
        assert not set(MCP_DOORS) & set(NOT_MCP_DOORS)
        assert names == set(MCP_DOORS) | set(NOT_MCP_DOORS), (
            "classify every tool in MCP_DOORS or NOT_MCP_DOORS"
        )
        for name, calls in MCP_DOORS.items():
            for arguments in calls:
                filled = _filled(arguments, world)
                seen.clear()
                answer = await session.call(name, filled)
                assert "result" in answer, (name, filled, answer)
                failed = answer["result"].get("isError") is True
                # V2 mode may answer that the namespace's index is not active yet, after its scope
                assert not failed or filled.get("mode") == "v2", (name, filled, answer)
                assert_one_way(f"{name} {filled}", "read", seen, reaches_sql=not failed)
        await session.close()
    finally:
        SEEING.reset(token)
