"""The MCP server through the SDK's own client, over real HTTP (uvicorn) and over stdio.

Each app runs on the session's embedded PostgreSQL with a collection of its own; files are uploaded
through the HTTP routes, then reached only through the tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from app.config import Settings
from app.errors import ConfigError
from app.evidence.query.refusal import SAFE_REFUSAL
from app.runtime.postgres import attach_running
from tests.contract.helpers import agent_id, upload
from tests.fixtures import v2_corpus
from tests.fixtures.mongo_server import mongo_server
from tests.fixtures.patience import ceiling, until
from tests.fixtures.serve import REPO
from tests.fixtures.service import TEST_JWT_SECRET, Database, auth, env_without_ragoverlay, make_token, new_id
from tests.integration.mcp_support import (
    ACCEPT,
    PROTOCOL,
    RawSession,
    error_text,
    initialize_body,
    mcp_client,
    messages,
    payload,
    serving,
)
from tests.operator.catalogue_seed import Catalogue, uri_for
from tests.operator.catalogue_seed import database as database_of

TOOLS = {"rag_search", "rag_read", "rag_list", "rag_status", "rag_jobs", "rag_reindex"}
API_KEY = "mcp-test-key-0123456789"
GATEWAY_KEY = "mcp-gateway-key-0123456789"


async def wait_active(
    http: httpx.AsyncClient, namespace: str, files: int, *, admin: str, seconds: float = 300
) -> None:
    """Until the namespace has an active V2 run holding `files` files (the upload queued its backfill)."""

    async def active() -> bool:
        r = await http.get("/v2/status", headers=auth(admin))
        assert r.status_code == 200, r.text
        runs = [run for run in r.json()["active_runs"] if run["namespace"] == namespace]
        return bool(runs and runs[0]["files"] >= files and not r.json().get("running_runs"))

    await until(
        active, what=f"an active V2 run of {namespace} with {files} files", within_s=seconds, every_s=0.3
    )


def jwt_with(secret: str) -> str:
    return jwt.encode({"id": "alice", "exp": 4102444800}, secret, algorithm="HS256")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Served:
    url: str
    http: httpx.AsyncClient
    settings: Settings
    user: str
    other: str
    mine: str
    theirs: str


@pytest.fixture(scope="module")
async def served(settings_factory: Callable[..., Settings]) -> AsyncIterator[Served]:
    user, other = new_id("alice"), new_id("bob")
    settings = settings_factory(
        mcp_api_keys=[f"{sha(API_KEY)}:svc-reader:{user}"],
        admin_user_ids=["root-admin"],
    )
    async with serving(settings) as (url, http):
        mine, theirs = new_id("mine"), new_id("theirs")
        text = "# PAGE\nThe heron nests by the quiet river in early spring. " * 40
        assert (await upload(http, mine, "heron.txt", text.encode(), auth(user))).status_code == 200
        secret = b"The launch code for project Nightingale is 7-4-1-9."
        assert (await upload(http, theirs, "secret.txt", secret, auth(other))).status_code == 200
        yield Served(url, http, settings, user, other, mine, theirs)


async def test_lists_and_calls_every_tool_with_a_librechat_token(served: Served) -> None:
    async with mcp_client(served.url, auth(served.user)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and len(tool.description) > 60
        search = payload(await client.call_tool("rag_search", {"query": "where does the heron nest?"}))
        assert search["mode"] == "v1"
        assert search["results"] and {r["file_id"] for r in search["results"]} == {served.mine}
        hit = search["results"][0]
        assert (
            hit["filename"] == "heron.txt"
            and len(hit["snippet"]) <= served.settings.search_snippet_max_chars + 2
        )
        listing = payload(await client.call_tool("rag_list", {}))
        assert [f["file_id"] for f in listing["files"]] == [served.mine]
        assert listing["files"][0]["v2_indexed"] is False and listing["files"][0]["chunks"] >= 1
        first = payload(await client.call_tool("rag_read", {"file_id": served.mine, "limit": 100}))
        assert first["filename"] == "heron.txt" and first["offset"] == 0 and len(first["text"]) == 100
        rest = payload(
            await client.call_tool(
                "rag_read", {"file_id": served.mine, "offset": first["next_offset"], "limit": 10**5}
            )
        )
        assert rest["next_offset"] is None and rest["offset"] == 100
        assert len(first["text"]) + len(rest["text"]) == first["total_chars"]
        status = payload(await client.call_tool("rag_status", {}))
        assert status["principal"] == served.user and status["auth"] == "jwt" and status["admin"] is False
        jobs = payload(await client.call_tool("rag_jobs", {}))
        assert jobs["jobs"] == []
        refused = await client.call_tool("rag_reindex", {"namespace": served.user})
        assert "admin" in error_text(refused)


async def test_an_admin_queues_a_reindex_and_sees_every_job(served: Served) -> None:
    async with mcp_client(served.url, auth("root-admin")) as admin:
        queued = payload(await admin.call_tool("rag_reindex", {"namespace": served.user}))
        assert isinstance(queued["job_id"], int)
        every = payload(await admin.call_tool("rag_jobs", {"limit": 200}))
        assert queued["job_id"] in {j["id"] for j in every["jobs"]}
        status = payload(await admin.call_tool("rag_status", {}))
        assert status["admin"] is True and set(status["jobs"]) == {"queued", "running", "done", "failed"}
    async with mcp_client(served.url, auth(served.user)) as user:
        # the caller's own jobs only: the admin's backfill is not theirs
        assert queued["job_id"] not in {
            j["id"] for j in payload(await user.call_tool("rag_jobs", {}))["jobs"]
        }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-token-nor-a-key"},
        {"Authorization": f"Bearer {'x' + API_KEY}"},
        {"Authorization": f"Bearer {jwt_with('another-secret-0123456789-0123456789-0123456789')}"},
        {"Authorization": f"Bearer {make_token('alice', ttl=-60)}"},
        {"Authorization": f"Bearer {make_token(None)}"},
    ],
    ids=["none", "basic", "garbage", "unknown-key", "wrong-secret", "expired", "no-user-id"],
)
async def test_every_unproven_caller_is_refused(served: Served, headers: dict[str, str]) -> None:
    response = await served.http.post("/mcp", json=initialize_body(), headers={**ACCEPT, **headers})
    assert response.status_code == 401
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["message"] and "Traceback" not in response.text
    assert "mcp-session-id" not in response.headers


async def test_an_api_key_reads_exactly_its_namespaces(served: Served) -> None:
    async with mcp_client(served.url, {"Authorization": f"Bearer {API_KEY}"}) as client:
        status = payload(await client.call_tool("rag_status", {}))
        assert status["auth"] == "api_key" and status["principal"] == "svc-reader"
        assert status["namespaces"] == [served.user]
        found = payload(await client.call_tool("rag_search", {"query": "heron nest"}))
        assert {r["file_id"] for r in found["results"]} == {served.mine}
        with pytest.raises(MCPError, match="one of this caller's namespaces"):
            await client.call_tool("rag_search", {"query": "launch code", "entity_id": served.other})
        gone = await client.call_tool("rag_read", {"file_id": served.theirs})
        assert "No file" in error_text(gone) and "Nightingale" not in error_text(gone)


async def test_a_session_answers_only_the_principal_that_opened_it(served: Served) -> None:
    mine = RawSession(served.http, auth(served.user))
    assert (await mine.open()).status_code == 200
    assert "result" in await mine.request("tools/list")
    stolen = RawSession(served.http, auth(served.other))
    stolen.headers |= {"mcp-session-id": mine.session_id or "", "mcp-protocol-version": "2025-11-25"}
    response = await stolen.post_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert response.status_code == 404
    # a new token of the same user keeps the session (LibreChat's tokens live five minutes)
    mine.headers |= auth(served.user)
    assert "result" in await mine.request("tools/list")
    await mine.close()


async def test_bad_input_gets_an_error_that_says_what_to_change(served: Served) -> None:
    session = RawSession(served.http, auth(served.user))
    assert (await session.open()).status_code == 200
    # refused before the SDK parses them, as the HTTP edge refuses them (NUL, lone surrogates)
    edge: list[tuple[dict[str, object], str]] = [
        ({"query": "a\x00b"}, "params.arguments.query contains a NUL"),
        ({"query": "a\ud800b"}, "params.arguments.query contains invalid Unicode (a lone surrogate"),
        ({"query": "heron", "file_ids": ["ok", "bad\x00"]}, "params.arguments.file_ids[1] contains a NUL"),
    ]
    for arguments, expected in edge:
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "rag_search", "arguments": arguments},
        }
        response = await session.post_raw(json.dumps(body))
        assert response.status_code == 400, response.text
        answer = response.json()
        assert (
            answer["id"] == 7 and answer["error"]["code"] == -32602 and expected in answer["error"]["message"]
        )
    cases: list[tuple[str, dict[str, object], str]] = [
        (
            "rag_search",
            {"query": "heron", "file_ids": [f"f{i}" for i in range(1001)]},
            "At most 1000 file_ids are allowed (1001 given); send at most 1000 per request, or leave "
            "file_ids out to search every file you can read",
        ),
        # the words /query_multiple answers with (400): one place for limits and wording
        ("rag_search", {"query": "heron", "k": 0}, "k must be at least 1"),
        ("rag_search", {"query": "heron", "k": 101}, "k must be at most 100"),
        ("rag_search", {"query": "x" * 20_001}, "query must have at most 20000 characters"),
        ("rag_search", {"query": "heron", "file_ids": ["f" * 513]}, "file_ids[0] must have at most 512"),
        ("rag_search", {"query": "heron", "entity_id": served.other}, "ENTITY_ID_PATTERN"),
        ("rag_search", {"query": "   "}, "must not be empty"),
        ("rag_read", {"file_id": served.mine, "limit": 10**6}, "limit must be"),
        ("rag_list", {"limit": 0}, "limit must be"),
    ]
    for name, arguments, expected in cases:
        answer = await session.call(name, arguments)
        assert "error" in answer, (arguments, answer)
        assert answer["error"]["code"] == -32602 and expected in answer["error"]["message"], answer
        assert "Traceback" not in json.dumps(answer)
    unknown = await session.call("rag_delete_everything", {})
    text = json.dumps(unknown)
    assert ("error" in unknown or unknown["result"]["isError"]) and "rag_delete_everything" in text
    typed = await session.call("rag_search", {"query": "heron", "k": "five"})
    assert "Traceback" not in json.dumps(typed) and ("error" in typed or typed["result"]["isError"])
    for body in (b"{not json", b'{"jsonrpc": "2.0", "id": 5}', b"[]"):
        response = await session.post_raw(body)
        assert response.status_code in (200, 202, 400), response.text
        assert "Traceback" not in response.text
        if response.status_code == 400:
            assert messages(response)[0]["error"]["message"]
    # nothing was lost: the session still answers
    found = await session.call("rag_search", {"query": "heron nest"})
    assert found["result"].get("isError") is not True
    await session.close()


# --- V2 through the tool: the same evidence and the same refusal as /query_v2 ------------------------

V2_ADMIN = "admin-mcp-v2"
V2_USER = "uploader-mcp-v2"


@dataclass
class V2World:
    url: str
    http: httpx.AsyncClient
    agent: str
    other: str
    files: list[str]
    foreign: str


@pytest.fixture(scope="module")
async def v2_world(
    settings_factory: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[V2World]:
    agent, other = agent_id(), agent_id()
    settings = settings_factory(v2_namespace_ids=[agent, other], admin_user_ids=[V2_ADMIN])
    # two files of the V2 test corpus (the quick formats) and the other owner's file
    folder = tmp_path_factory.mktemp("mcpv2")
    async with serving(settings) as (url, http):
        files = []
        for name in ("ratings.md", "notes.txt"):
            path = v2_corpus.MIXED_CORPUS[name](folder / name)
            file_id = new_id(name.split(".")[0])
            r = await upload(http, file_id, name, path.read_bytes(), auth(V2_USER), entity_id=agent)
            assert r.status_code == 200, r.text
            files.append(file_id)
        foreign = new_id("foreign")
        secret = v2_corpus.FOREIGN_TEXT.encode()
        assert (
            await upload(http, foreign, v2_corpus.FOREIGN_NAME, secret, auth("stranger-mcp"), entity_id=other)
        ).status_code == 200
        await wait_active(http, agent, len(files), admin=V2_ADMIN)
        await wait_active(http, other, 1, admin=V2_ADMIN)
        yield V2World(url, http, agent, other, files, foreign)


async def test_v2_evidence_and_refusal_are_those_of_query_v2(v2_world: V2World) -> None:
    w = v2_world
    async with mcp_client(w.url, auth(V2_USER)) as client:
        for question in (
            "How fast does the F 2 fan turn?",
            "What is the weight of the K 99 heater?",
        ):
            tool = payload(
                await client.call_tool(
                    "rag_search", {"query": question, "entity_id": w.agent, "file_ids": w.files}
                )
            )
            assert tool["mode"] == "v2"  # the default where the namespace has V2
            http = await w.http.post(
                "/query_v2",
                json={"query": question, "file_ids": w.files, "entity_id": w.agent},
                headers=auth(V2_USER),
            )
            assert http.status_code == 200, http.text
            expected = http.json()
            assert tool["safe_refusal"] == expected["safe_refusal"]
            assert [(r["citation_id"], r["file_id"], r["page"]) for r in tool["results"]] == [
                (r["citation_id"], r["file_id"], r["page"]) for r in expected["results"]
            ]
        refused = payload(
            await client.call_tool(
                "rag_search", {"query": "What is the weight of the K 99 heater?", "entity_id": w.agent}
            )
        )
        assert refused["results"] == [] and refused["safe_refusal"] == SAFE_REFUSAL
        found = payload(
            await client.call_tool("rag_search", {"query": "F 2 fan speed in rpm", "entity_id": w.agent})
        )
        assert found["results"] and found["results"][0]["citation_id"] == "V2-1"
        assert found["results"][0]["filename"] == "ratings.md"
        # another Agent's file named outright yields no evidence, only the refusal
        foreign = payload(
            await client.call_tool(
                "rag_search", {"query": "valve ZX 9000 rating", "entity_id": w.agent, "file_ids": [w.foreign]}
            )
        )
        assert foreign["results"] == [] and "ZX 9000" not in json.dumps(foreign)
        listed = payload(await client.call_tool("rag_list", {"entity_id": w.agent}))
        assert {f["file_id"]: f["v2_indexed"] for f in listed["files"]} == dict.fromkeys(w.files, True)
        # the caller's own namespace has no V2: asking for it is refused, as /query_v2 refuses it
        off = await client.call_tool("rag_search", {"query": "pump", "mode": "v2"})
        assert "not enabled" in error_text(off)


# --- sessions: the cap, the idle TTL, the creation rate ----------------------------------------------


async def test_session_cap_idle_expiry_and_creation_rate(settings_factory: Callable[..., Settings]) -> None:
    # no wait between the session openings and the calls: the minute's budgets (4 sessions, 1 search)
    # must not refill while a busy machine runs the test; the idle TTL is waited for last
    ttl = ceiling(1.5)  # the sessions stay alive until the wait below
    settings = settings_factory(
        mcp_session_max=2,
        mcp_session_ttl_seconds=ttl,
        mcp_session_create_rate_per_minute=4,
        search_rate_per_minute=1,
        admin_user_ids=["m"],
    )
    async with serving(settings) as (_url, http):
        user = new_id("sess")
        first, second = RawSession(http, auth(user)), RawSession(http, auth(user))
        assert (await first.open()).status_code == 200
        assert (await second.open()).status_code == 200
        third = await RawSession(http, auth(user)).open()
        assert third.status_code == 503 and messages(third)[0]["error"]["message"]  # MCP_SESSION_MAX
        await second.close()  # room again
        fourth = RawSession(http, auth(user))
        assert (await fourth.open()).status_code == 200  # the 4th session this minute
        assert "result" in await fourth.request("tools/list")
        limited = await RawSession(http, auth(user)).open()
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        assert "MCP_SESSION_CREATE_RATE_PER_MINUTE" in limited.json()["error"]["message"]
        # an open session is not limited by the creation rate
        assert "result" in await fourth.call("rag_search", {"query": "anything"})
        # SEARCH_RATE_PER_MINUTE counts rag_search as it counts /query
        limited_search = await fourth.call("rag_search", {"query": "anything"})
        assert limited_search["result"]["isError"] and "SEARCH_RATE_PER_MINUTE" in json.dumps(limited_search)
        metrics = (await http.get("/metrics", headers=auth("m"))).text
        assert 'ragoverlay_mcp_sessions_refused_total{reason="rate"}' in metrics
        assert 'ragoverlay_mcp_tool_calls_total{outcome="ok",tool="rag_search"}' in metrics
        await asyncio.sleep(ttl + 2)  # idle past MCP_SESSION_TTL_SECONDS
        expired = await first.post_raw(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        assert expired.status_code == 404


async def test_without_sessions_every_request_stands_alone_and_no_session_is_counted(
    settings_factory: Callable[..., Settings],
) -> None:
    """MCP_STATELESS=true (replicas without affinity): no session id, no cap, no creation budget;
    the SDK's own client works as with sessions."""
    settings = settings_factory(mcp_stateless=True, mcp_session_max=1, mcp_session_create_rate_per_minute=1)
    async with serving(settings) as (url, http):
        user = new_id("stateless")
        headers = {**ACCEPT, **auth(user)}
        for _ in range(3):  # past MCP_SESSION_MAX and the creation budget: neither applies
            opened = await http.post("/mcp", json=initialize_body(), headers=headers)
            assert opened.status_code == 200, opened.text
            assert "mcp-session-id" not in opened.headers
        listed = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**headers, "mcp-protocol-version": PROTOCOL},
        )
        assert listed.status_code == 200 and "rag_search" in listed.text
        async with mcp_client(url, auth(user)) as client:
            status = payload(await client.call_tool("rag_status", {}))
            assert status, status


# --- stdio: scripts/mcp as a client of the running service's embedded PostgreSQL ---------------------


def stdio_env(served: Served, data_dir: Path) -> dict[str, str]:
    """The service's settings for a stdio process: the same collection, the embedded database's folder."""
    return {
        **env_without_ragoverlay(),
        "DATA_DIR": str(data_dir),
        "COLLECTION_NAME": served.settings.collection_name,
        "JWT_SECRET": TEST_JWT_SECRET,
        "EMBEDDINGS_PROVIDER": "local",
    }


def test_attach_finds_the_running_embedded_server_and_refuses_an_idle_folder(
    database: Database, tmp_path: Path
) -> None:
    attached = attach_running(database.root / "postgres")
    assert f":{attached.port}/" in database.dsn
    with pytest.raises(ConfigError, match="start `scripts/serve` first"):
        attach_running(tmp_path / "postgres")


async def test_stdio_serves_one_principal_on_the_services_database(
    served: Served, database: Database
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli.mcp", "--principal", served.user],
        env=stdio_env(served, database.root),  # the session's embedded server, owned by this process
        cwd=str(REPO),
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        status = payload(await client.call_tool("rag_status", {}))
        assert status["auth"] == "stdio" and status["namespaces"] == [served.user]
        found = payload(await client.call_tool("rag_search", {"query": "heron nest", "k": 3}))
        assert {r["file_id"] for r in found["results"]} == {served.mine}
        assert [f["file_id"] for f in payload(await client.call_tool("rag_list", {}))["files"]] == [
            served.mine
        ]
        gone = await client.call_tool("rag_read", {"file_id": served.theirs})
        assert "Nightingale" not in error_text(gone)
        with pytest.raises(MCPError, match="k must be at most 100"):
            await client.call_tool("rag_search", {"query": "heron", "k": 500})


def test_stdio_refuses_without_a_principal_or_a_running_service(served: Served, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "app.cli.mcp"]
    missing = subprocess.run(
        command, env=stdio_env(served, tmp_path), cwd=REPO, capture_output=True, timeout=60
    )
    assert missing.returncode == 2 and b"--principal" in missing.stderr
    idle = subprocess.run(
        [*command, "--principal", "alice"],
        env=stdio_env(served, tmp_path),
        cwd=REPO,
        capture_output=True,
        timeout=ceiling(120),
        stdin=subprocess.DEVNULL,
    )
    assert idle.returncode == 2 and b"start `scripts/serve` first" in idle.stderr
    assert b"Traceback" not in idle.stderr
    assert not (tmp_path / "postgres" / "PG_VERSION").exists()  # no second server was made


# --- LibreChat's gateway: a shared key and a user id header, checked against the catalogue ------------


async def test_the_gateway_reads_what_librechats_catalogue_allows_that_user(
    settings_factory: Callable[..., Settings],
) -> None:
    with mongo_server() as mongo_uri, database_of(mongo_uri, "mcp_gateway") as db:
        cat = Catalogue(db)
        author, viewer, outsider = cat.user(), cat.user(), cat.user()
        kb = cat.file(author, name="handbook.txt")
        agent = cat.agent(author, [kb])
        cat.share(agent, "user", viewer)
        settings = settings_factory(
            allowlist_verify="mongo",
            librechat_mongo_uri=uri_for(mongo_uri, "mcp_gateway"),
            mcp_gateway_key_sha256=sha(GATEWAY_KEY),
        )
        async with serving(settings) as (url, http):
            text = b"Travel rules: economy class for flights under six hours, per the handbook."
            r = await upload(http, kb, "handbook.txt", text, auth(str(author)), entity_id=agent)
            assert r.status_code == 200, r.text

            def gateway(user: object) -> dict[str, str]:
                return {"Authorization": f"Bearer {GATEWAY_KEY}", "X-LibreChat-User-Id": str(user)}

            bare = await http.post(
                "/mcp", json=initialize_body(), headers={**ACCEPT, "Authorization": f"Bearer {GATEWAY_KEY}"}
            )
            assert bare.status_code == 401 and "X-LibreChat-User-Id" in bare.json()["error"]["message"]
            question = {"query": "flight class rules", "entity_id": agent}
            async with mcp_client(url, gateway(viewer)) as client:
                assert payload(await client.call_tool("rag_status", {}))["auth"] == "gateway"
                found = payload(await client.call_tool("rag_search", question))
                assert {r["file_id"] for r in found["results"]} == {kb}
            async with mcp_client(url, gateway(outsider)) as client:
                # the claimed entity_id alone would grant this read; the catalogue does not
                assert payload(await client.call_tool("rag_search", question))["results"] == []
                assert payload(await client.call_tool("rag_list", {"entity_id": agent}))["files"] == []
                denied = await client.call_tool("rag_read", {"file_id": kb, "entity_id": agent})
                assert "economy" not in error_text(denied)
