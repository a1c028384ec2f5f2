"""A body far over MAX_JSON_BODY_BYTES, sent whole by a client that does not wait, still gets its 413."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator

import pytest
import uvicorn

from app.main import create_app
from app.runtime.stalls import stall_guarded_protocol
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, make_token


@pytest.fixture
async def served(settings_factory: SettingsFactory) -> AsyncIterator[int]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings_factory()),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        http=stall_guarded_protocol(10.0),
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the server did not start"
        await asyncio.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


def _send_all_then_read(port: int, head: bytes, body: bytes) -> bytes:
    """Send the whole request as a plain blocking client does (not reading meanwhile), then read."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        try:
            while sent < len(body):
                sent += sock.send(body[sent : sent + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may stop reading once it answered: the answer must still be readable
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
                if b"\r\n\r\n" in received:
                    length = int(received.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                    if len(received.split(b"\r\n\r\n", 1)[1]) >= length:
                        break
        return received


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "close"])
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_an_11_mb_search_body_gets_its_413_answer(served: int, declared: bool, close: bool) -> None:
    token = make_token("user-big-body")
    body = json.dumps({"query": "x" * (11 * 1024 * 1024), "file_id": "f"}).encode()
    framing = f"Content-Length: {len(body)}\r\n" if declared else "Transfer-Encoding: chunked\r\n"
    head = (
        "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\n{framing}" + ("Connection: close\r\n" if close else "") + "\r\n"
    ).encode()
    if not declared:
        body = (
            b"".join(
                f"{len(body[i : i + 65536]):x}\r\n".encode() + body[i : i + 65536] + b"\r\n"
                for i in range(0, len(body), 65536)
            )
            + b"0\r\n\r\n"
        )
    answer = await asyncio.to_thread(_send_all_then_read, served, head, body)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    assert "MAX_JSON_BODY_BYTES" in detail
