"""JSON bodies are capped on the byte stream (MAX_JSON_BODY_BYTES), before any parsing: 413 with a detail.

The proof that a body is refused *without reading it all* drives the ASGI app directly with a
`receive` that counts what it hands out: a declared Content-Length over the cap is refused before a
single chunk is read, and a chunked body without one after at most cap / chunk + 1 chunks.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.schemas import MAX_FILE_IDS, MAX_QUERY_CHARS
from tests.contract.helpers import upload
from tests.fixtures.service import auth, make_token, new_id, running_app

CHUNK = 64 * 1024
OVERSIZED = 50 * 1024 * 1024  # what the attack sent, four at a time

JSON_ROUTES = [
    ("POST", "/query"),
    ("POST", "/query_multiple"),
    ("POST", "/local/embed"),
    ("DELETE", "/documents"),
]


class CountingBody:
    """An endless-looking JSON body handed out in chunks, counting how many were taken."""

    def __init__(self, total: int, chunk: int = CHUNK) -> None:
        self.total = total
        self.chunk = chunk
        self.taken = 0

    async def receive(self) -> dict[str, Any]:
        sent = self.taken * self.chunk
        if sent >= self.total:
            return {"type": "http.disconnect"}
        self.taken += 1
        size = min(self.chunk, self.total - sent)
        body = (b'{"query": "' + b"a" * (size - 11)) if self.taken == 1 else b"a" * size
        return {"type": "http.request", "body": body, "more_body": sent + size < self.total}

    async def iterate(self) -> AsyncIterator[bytes]:
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                return
            yield message["body"]
            if not message["more_body"]:
                return


async def call_asgi(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], receive: Any
) -> tuple[int, dict[str, Any], dict[bytes, bytes]]:
    """One raw ASGI request; returns the status, the JSON body and the headers of the answer."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], json.loads(body), dict(start["headers"])


def token_header() -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {make_token(new_id('user'))}".encode())


def limit_of(client: httpx.AsyncClient) -> int:
    return int(client.app.state.settings.max_json_body_bytes)  # type: ignore[attr-defined]


def assert_413(status: int, body: dict[str, Any], limit: int) -> None:
    assert status == 413
    assert "MAX_JSON_BODY_BYTES" in body["detail"] and str(limit) in body["detail"]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_declared_length_over_the_cap_is_refused_before_reading(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    body = CountingBody(OVERSIZED)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(OVERSIZED).encode()),
        token_header(),
    ]
    status, answer, _ = await call_asgi(client.app, method, path, headers, body.receive)  # type: ignore[attr-defined]
    assert_413(status, answer, limit_of(client))
    assert body.taken == 0  # not one byte of the body was read


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_chunked_body_is_refused_as_soon_as_it_passes_the_cap(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    body = CountingBody(OVERSIZED)
    headers = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked"), token_header()]
    status, answer, _ = await call_asgi(client.app, method, path, headers, body.receive)  # type: ignore[attr-defined]
    limit = limit_of(client)
    assert_413(status, answer, limit)
    # read up to the chunk that crossed the cap, never the other ~49.5 MB
    assert body.taken == limit // CHUNK + 1
    assert body.taken * CHUNK < 2 * limit


async def test_unauthenticated_oversized_body_is_refused_too(client: httpx.AsyncClient) -> None:
    body = CountingBody(OVERSIZED)
    status, answer, _ = await call_asgi(
        client.app,  # type: ignore[attr-defined]
        "POST",
        "/query_multiple",
        [(b"content-type", b"application/json")],
        body.receive,
    )
    assert status == 413 and body.taken == limit_of(client) // CHUNK + 1
    assert "MAX_JSON_BODY_BYTES" in answer["detail"]


async def test_streamed_through_http_client(client: httpx.AsyncClient) -> None:
    """The same through httpx: a generator body has no Content-Length and is pulled lazily."""
    body = CountingBody(OVERSIZED)
    r = await client.post(
        "/query_multiple",
        content=body.iterate(),
        headers={**auth(new_id("user")), "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert "MAX_JSON_BODY_BYTES" in r.json()["detail"]
    assert body.taken == limit_of(client) // CHUNK + 1


async def test_the_largest_legitimate_search_fits(client: httpx.AsyncClient) -> None:
    """1,000 ids of 200 characters and a 20,000-character query: what the default is sized for."""
    ids = [new_id() + "-" + "x" * (200 - 18) for _ in range(MAX_FILE_IDS)]
    assert all(len(i) == 200 for i in ids)
    body = {"query": "é" * MAX_QUERY_CHARS, "file_ids": ids, "k": 10}
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert len(raw) < limit_of(client)
    r = await client.post(
        "/query_multiple", content=raw, headers={**auth(new_id("user")), "Content-Type": "application/json"}
    )
    assert r.status_code == 404  # parsed and searched: none of these files exist
    r = await client.request("DELETE", "/documents", json=ids, headers=auth(new_id("user")))
    assert r.status_code == 404


async def test_uploads_keep_their_own_cap(client: httpx.AsyncClient) -> None:
    """Multipart routes stream to disk under MAX_UPLOAD_BYTES: a file above the JSON cap is read whole.

    A damaged picture is refused only after it arrived (415, not the guard's 413), and nothing is
    indexed, so the session's shared vector index is not flooded with hundreds of near-identical chunks.
    """
    content = b"\x89PNG\r\n\x1a\n" + bytes(2 * limit_of(client))
    r = await upload(client, new_id(), "big.png", content, auth(new_id("user")), content_type="image/png")
    assert r.status_code == 415, r.text
    assert "could not be read as a picture" in r.json()["detail"]


async def test_cap_is_a_setting(settings_factory) -> None:  # type: ignore[no-untyped-def]
    async with running_app(settings_factory(max_json_body_bytes=2048)) as c:
        h = auth(new_id("user"))
        r = await c.post("/query", json={"query": "q" * 1000, "file_id": "f"}, headers=h)
        assert r.status_code == 200
        r = await c.post("/query", json={"query": "q" * 3000, "file_id": "f"}, headers=h)
        assert r.status_code == 413
        assert "2048" in r.json()["detail"]
