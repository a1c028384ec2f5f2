"""A body far over MAX_JSON_BODY_BYTES, sent whole by a client that does not wait, still gets its 413;
and the connection of a request answered before its body was read ends (a lingering close)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from app.main import create_app
from app.runtime import stalls
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
    """Send the whole request as a plain blocking client does (not reading meanwhile), then read.

    A reset or a broken pipe while sending fails: a client that reads only after sending (Python's
    http.client, curl without Expect) would never see the answer.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        while sent < len(body):
            sent += sock.send(body[sent : sent + 65536])
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


def _http_client_post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """The standard library's client: it sends the whole body, then reads the answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/query_v2", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("connection", ["keep-alive", "close"])
async def test_http_client_sending_11_mb_reads_its_413(served: int, connection: str) -> None:
    """Before the lingering close, `Connection: close` ended in ConnectionResetError, not the 413."""
    token = make_token("user-big-body")
    body = b"x" * (11 * 1000 * 1000)
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "Connection": connection,
    }
    status, answer = await asyncio.to_thread(_http_client_post, served, body, headers)
    assert status == 413
    assert "MAX_JSON_BODY_BYTES" in json.loads(answer)["detail"]


def _answered_then_idle(port: int, head: bytes, part: bytes, idle_s: float) -> tuple[bytes, str]:
    """Send the headers and part of the body, read to the end of the stream, stay silent, write again."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + part)
        received = b""
        while chunk := sock.recv(65536):  # until the server's FIN (a timeout fails the test)
            received += chunk
        time.sleep(idle_s)
        # once the server has closed its socket, a write is answered with a reset: the next one fails
        for _ in range(20):
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                return received, "closed"
            time.sleep(0.1)
        return received, "open"


@pytest.mark.parametrize("sent", [0, 2_000_000, 11_000_000], ids=["no-body", "part", "whole-body"])
async def test_a_connection_answered_before_its_body_ends(
    served: int, sent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a kept-alive connection answered 413 stayed open for ever (no keep-alive timer ran)."""
    monkeypatch.setattr(stalls, "LINGER_IDLE_S", 0.5)
    head = (
        b"POST /query_v2 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 11000000\r\n\r\n"
    )
    received, outcome = await asyncio.to_thread(_answered_then_idle, served, head, b"a" * sent, 1.5)
    assert received.startswith(b"HTTP/1.1 413 "), received[:200]
    assert outcome == "closed"
