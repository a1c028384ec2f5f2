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
        await asyncio.wait_for(task, 60)


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
