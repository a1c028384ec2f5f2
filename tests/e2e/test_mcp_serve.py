"""With `scripts/serve` running on its embedded defaults, an MCP client lists and calls every tool over
streamable HTTP and over stdio (`scripts/mcp`, a client of the service's own embedded PostgreSQL)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fixtures.patience import ceiling
from tests.fixtures.serve import REPO, free_port, serving
from tests.integration.mcp_support import mcp_client, payload

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOOLS = {"rag_search", "rag_read", "rag_list", "rag_status", "rag_jobs", "rag_reindex"}
TEXT = b"The lighthouse keeper recorded a storm that lasted nine days in the winter of 1950."


def clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAG_", "JWT_", "DB_", "POSTGRES_", "DATABASE_", "EMBEDDINGS_", "S3_"))
    }


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Path]]:
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-e2e-mcp-"))
    data_dir.chmod(0o755)  # the embedded server may run as another user when tests run as root
    env = {**clean_env(), "RAG_PORT": str(free_port()), "DATA_DIR": str(data_dir)}
    try:
        with serving(env, data_dir / "serve.log", timeout_s=240):
            yield f"http://127.0.0.1:{env['RAG_PORT']}", data_dir
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def walk(client: Client, file_id: str) -> None:
    """List the tools and call each one (no auth configured: the caller is `public`)."""
    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
    found = payload(await client.call_tool("rag_search", {"query": "how long did the storm last?"}))
    assert [r["file_id"] for r in found["results"]] == [file_id]
    assert [f["file_id"] for f in payload(await client.call_tool("rag_list", {}))["files"]] == [file_id]
    assert "nine days" in payload(await client.call_tool("rag_read", {"file_id": file_id}))["text"]
    assert payload(await client.call_tool("rag_status", {}))["namespaces"] == ["public"]
    assert payload(await client.call_tool("rag_jobs", {}))["jobs"] == []
    refused = await client.call_tool("rag_reindex", {"namespace": "public"})
    assert refused.is_error  # nobody is an admin without JWT_SECRET


async def test_every_tool_over_http_and_over_stdio_beside_scripts_serve(served: tuple[str, Path]) -> None:
    url, data_dir = served
    async with httpx.AsyncClient(timeout=ceiling(120)) as http:
        r = await http.post(f"{url}/embed", data={"file_id": "storm-1"}, files={"file": ("log.txt", TEXT)})
    assert r.status_code == 200, r.text
    async with mcp_client(url, {}) as client:
        await walk(client, "storm-1")
    params = StdioServerParameters(
        command=str(REPO / "scripts" / "mcp"),
        args=["--principal", "public"],
        env={**clean_env(), "DATA_DIR": str(data_dir)},
        cwd=str(REPO),
    )
    async with Client(params) as client:
        await walk(client, "storm-1")
    # the service still owns its database: it answers as before
    async with httpx.AsyncClient(timeout=ceiling(5)) as http:
        assert (await http.get(f"{url}/health")).json() == {"status": "UP"}


def test_stdio_without_a_running_service_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "mcp"), "--principal", "alice"],
        env={**clean_env(), "DATA_DIR": str(tmp_path)},
        cwd=REPO,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=ceiling(120),
    )
    assert done.returncode == 2 and b"start `scripts/serve` first" in done.stderr
