"""A body far over MAX_JSON_BODY_BYTES, sent whole by a client that does not wait, still gets its 413;
the connection of a request answered before its body was read ends (a lingering close), and the
answer says so (`Connection: close`), so a kept-alive client sends its next request on a new one."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.runtime import request_timeouts as stalls
from app.runtime.request_timeouts import stall_guarded_protocol
from tests.fixtures.patience import ceiling
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, make_token

UPLOAD_CAP = 1_000_000  # MAX_UPLOAD_BYTES of the served app


@pytest.fixture
async def served(settings_factory: SettingsFactory) -> AsyncIterator[int]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings_factory(max_upload_bytes=UPLOAD_CAP)),
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
            await asyncio.wait_for(task, ceiling(30))


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


# Requests answered before their body is read: (method, path, body, content type, with a token, status).
# The bodies are far larger than what arrives with the headers, so the answer starts while they arrive.
EARLY_ANSWERS = {
    "json-413": ("/query", json.dumps({"query": "x" * 2_000_000, "file_id": "f"}).encode(), True, 413),
    "upload-413": ("/embed", b"x" * (3 * UPLOAD_CAP), True, 413),
    "upload-401": ("/embed", b"x" * (3 * UPLOAD_CAP), False, 401),
}
ROUNDS = 20


def _early_request(name: str, port: int) -> tuple[str, dict[str, str], bytes | None, dict[str, bytes]]:
    path, body, with_token, _ = EARLY_ANSWERS[name]
    headers = {"Authorization": f"Bearer {make_token('user-keep-alive')}"} if with_token else {}
    if path == "/embed":
        return f"http://127.0.0.1:{port}{path}", headers, None, {"file_id": b"f", "file": body}
    headers["Content-Type"] = "application/json"
    return f"http://127.0.0.1:{port}{path}", headers, body, {}


@pytest.mark.parametrize("name", list(EARLY_ANSWERS))
async def test_a_kept_alive_httpx_client_carries_on_after_an_early_answer(served: int, name: str) -> None:
    """Before, the answer did not say `Connection: close` and the next request could meet the closing
    connection ("Server disconnected without sending a response", 11 of 20 after an upload's 413)."""
    url, headers, content, parts = _early_request(name, served)
    files = {"file": ("big.txt", parts["file"])} if parts else None
    data = {"file_id": "f"} if parts else None
    answered_next = 0
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(ROUNDS):
            early = await client.post(url, headers=headers, content=content, files=files, data=data)
            assert early.status_code == EARLY_ANSWERS[name][3], early.text[:300]
            assert early.headers.get("connection") == "close", early.headers
            health = await client.get(f"http://127.0.0.1:{served}/health")
            assert health.json() == {"status": "UP"}
            answered_next += 1
    assert answered_next == ROUNDS


def _stdlib_rounds(port: int, name: str) -> list[str]:
    """http.client on one HTTPConnection: it reuses the socket unless the answer said close.

    It never notices a server's FIN by itself, so without the header every next request failed.
    """
    url, headers, content, parts = _early_request(name, port)
    path = url.split(str(port), 1)[1]
    if parts:
        boundary = "keepalive-boundary"
        content = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file_id"\r\n\r\nf\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
                "Content-Type: text/plain\r\n\r\n"
            ).encode()
            + parts["file"]
            + f"\r\n--{boundary}--\r\n".encode()
        )
        headers = {**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    failures: list[str] = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for round_ in range(ROUNDS):
            conn.request("POST", path, body=content, headers=headers)
            early = conn.getresponse()
            early.read()
            if early.status != EARLY_ANSWERS[name][3]:
                failures.append(f"round {round_}: {early.status} instead of {EARLY_ANSWERS[name][3]}")
            try:
                conn.request("GET", "/health")
                health = conn.getresponse()
                if health.status != 200:
                    failures.append(f"round {round_}: /health answered {health.status}")
                health.read()
            except (http.client.HTTPException, OSError) as exc:
                failures.append(f"round {round_}: the next request failed: {exc!r}")
                conn.close()
    finally:
        conn.close()
    return failures


@pytest.mark.parametrize("name", list(EARLY_ANSWERS))
async def test_a_kept_alive_stdlib_client_carries_on_after_an_early_answer(served: int, name: str) -> None:
    failures = await asyncio.to_thread(_stdlib_rounds, served, name)
    assert failures == []
