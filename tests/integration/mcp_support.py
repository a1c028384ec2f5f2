"""The app under a real HTTP server in the test's event loop, and the MCP SDK's own client for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from app.config import Settings
from app.main import create_app
from tests.fixtures.patience import ceiling
from tests.fixtures.serve import free_port


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """`create_app(settings)` served by uvicorn on a free loopback port; its URL and a client for it."""
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(1200):
            if server.started or task.done():
                break
            await asyncio.sleep(0.05)
        if task.done():
            task.result()
        assert server.started, "uvicorn did not start"
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            client.app = app  # type: ignore[attr-defined]
            yield url, client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, ceiling(60))


@contextlib.asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str], *, mode: str = "legacy") -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP to `url`/mcp, sending `headers` on every request."""
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
            yield client


def payload(result: CallToolResult) -> dict[str, Any]:
    """A successful tool call's JSON result."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    first = result.content[0]
    return json.loads(first.text)  # type: ignore[union-attr]


def error_text(result: CallToolResult) -> str:
    """The sentence of a refused tool call."""
    assert result.is_error, result
    return " ".join(getattr(c, "text", "") for c in result.content)


ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PROTOCOL = "2025-11-25"


def initialize_body(request_id: int = 1) -> dict[str, Any]:
    """A handshake-era `initialize` request."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response: a JSON body, or the `data:` lines of an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    return [response.json()] if response.content else []


class RawSession:
    """A session driven by hand over httpx, for what the SDK's client will not send (bad input)."""

    def __init__(self, http: httpx.AsyncClient, headers: dict[str, str]) -> None:
        self.http = http
        self.headers = {**ACCEPT, **headers}
        self.session_id: str | None = None
        self.next_id = 10

    async def open(self) -> httpx.Response:
        """Send `initialize` (and `notifications/initialized` when it worked)."""
        response = await self.http.post("/mcp", json=initialize_body(), headers=self.headers)
        if response.status_code == 200:
            self.session_id = response.headers["mcp-session-id"]
            self.headers |= {"mcp-session-id": self.session_id, "mcp-protocol-version": PROTOCOL}
            note = await self.post_raw(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            assert note.status_code == 202, note.text
        return response

    async def post_raw(self, body: str | bytes) -> httpx.Response:
        """POST a body exactly as given."""
        return await self.http.post("/mcp", content=body, headers=self.headers)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One JSON-RPC request; its answer (`result` or `error`)."""
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        response = await self.post_raw(json.dumps(body))
        assert response.status_code == 200, response.text
        found = [m for m in messages(response) if m.get("id") == self.next_id]
        assert len(found) == 1, response.text
        return found[0]

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`tools/call`."""
        return await self.request("tools/call", {"name": name, "arguments": arguments})

    async def close(self) -> None:
        """End the session (DELETE)."""
        if self.session_id is not None:
            await self.http.delete("/mcp", headers=self.headers)
