"""The MCP server through the SDK's own client, over real HTTP (uvicorn) and over stdio.

Each app runs on the session's embedded PostgreSQL with a collection of its own; files are uploaded
through the HTTP routes, then reached only through the tools.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest

from app.config import Settings
from tests.contract.helpers import upload
from tests.fixtures.service import auth, new_id
from tests.integration.mcp_support import error_text, mcp_client, payload, serving

TOOLS = {"rag_search", "rag_read", "rag_list", "rag_status", "rag_jobs", "rag_reindex"}
API_KEY = "mcp-test-key-0123456789"
GATEWAY_KEY = "mcp-gateway-key-0123456789"


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
        assert hit["filename"] == "heron.txt" and len(hit["snippet"]) <= served.settings.search_snippet_max_chars + 2
        listing = payload(await client.call_tool("rag_list", {}))
        assert [f["file_id"] for f in listing["files"]] == [served.mine]
        assert listing["files"][0]["v2_indexed"] is False and listing["files"][0]["chunks"] >= 1
        first = payload(await client.call_tool("rag_read", {"file_id": served.mine, "limit": 100}))
        assert first["filename"] == "heron.txt" and first["offset"] == 0 and len(first["text"]) == 100
        rest = payload(
            await client.call_tool("rag_read", {"file_id": served.mine, "offset": first["next_offset"], "limit": 10**5})
        )
        assert rest["next_offset"] is None and rest["offset"] == 100
        assert len(first["text"]) + len(rest["text"]) == first["total_chars"]
        status = payload(await client.call_tool("rag_status", {}))
        assert status["principal"] == served.user and status["auth"] == "jwt" and status["admin"] is False
        jobs = payload(await client.call_tool("rag_jobs", {}))
        assert jobs["jobs"] == []
        refused = await client.call_tool("rag_reindex", {"namespace": served.user})
        assert "admin" in error_text(refused)
