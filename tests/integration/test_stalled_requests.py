"""Half-sent requests are closed after a timeout: headers that never complete, and bodies that stop
arriving, on the real server (uvicorn with our protocol, the app with its middleware, real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from app.main import create_app
from app.runtime.request_timeouts import stall_guarded_protocol
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory, make_token

HEADER_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 0.5


@pytest.fixture
async def served(settings_factory: SettingsFactory) -> AsyncIterator[int]:
    settings = settings_factory(request_body_timeout_s=BODY_TIMEOUT_S)
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        # stretched on a busy machine: the slow-body client below sends its headers with an awaited
        # write, which a busy shared event loop may run after the server accepted the connection
        http=stall_guarded_protocol(ceiling(HEADER_TIMEOUT_S)),
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


async def _sent_before_accepted(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose first bytes are in the server's socket before the server accepts it.

    Connecting and sending without yielding to the event loop (which the server shares) fills the
    kernel's accept queue: the header deadline starts at accept, when the bytes are already there. An
    awaited connect and write let a busy loop accept first and fire the deadline before the client
    wrote; the write then met a closed socket and the client read a reset instead of the 408.
    """
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(data)
    sock.setblocking(False)
    return await asyncio.open_connection(sock=sock)


async def _closed_within(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    """Everything the server sent until it closed the connection (fails when it stays open past
    `timeout_s`, stretched for a busy machine)."""
    received = b""
    try:
        async with asyncio.timeout(ceiling(timeout_s)):
            while chunk := await reader.read(65536):
                received += chunk
    except TimeoutError:
        raise AssertionError(out_of_time("the server to close the connection", ceiling(timeout_s))) from None
    return received


async def test_stalled_headers_and_bodies_are_answered_408_and_closed(served: int) -> None:
    token = make_token("user-stall")
    connections = []
    try:
        for i in range(60):
            if i % 2 == 0:  # headers that never finish
                sent = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            else:  # complete headers, then a body that stops after a few bytes
                sent = (
                    b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {token}\r\n".encode()
                    + b'Content-Length: 200\r\n\r\n{"query": "he'
                )
            reader, writer = await _sent_before_accepted(served, sent)
            connections.append((i, reader, writer))
        started = time.monotonic()
        answers = await asyncio.gather(*(_closed_within(r, 10.0) for _, r, _ in connections))
        elapsed = time.monotonic() - started
    finally:
        for _, _, writer in connections:
            writer.close()
    for (i, _, _), answer in zip(connections, answers, strict=True):
        assert answer.startswith(b"HTTP/1.1 408 "), (i, answer[:200])
        assert b"connection: close" in answer.lower()
        if i % 2 == 0:
            assert b"REQUEST_HEADER_TIMEOUT_S" in answer
        else:
            assert b"REQUEST_BODY_TIMEOUT_S" in answer
    assert elapsed < ceiling(5.0), out_of_time("all 60 connections closed at their 0.5 s deadlines", elapsed)


async def test_a_request_that_keeps_sending_is_not_cut(served: int) -> None:
    """A body that arrives slowly but steadily (each piece well within the timeout) is read whole.

    Eleven pieces an eighth of the timeout apart: in total longer than the timeout, and a busy
    machine that delays the client's next piece by several times its gap still does not stall it.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    body = b'{"query": "herons", "file_id": "nothing-here", "k": 1}'
    token = make_token("user-slow")
    writer.write(
        b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    )
    started = time.monotonic()
    for at in range(0, len(body), 5):
        await asyncio.sleep(BODY_TIMEOUT_S / 8)
        writer.write(body[at : at + 5])
        await writer.drain()
    assert time.monotonic() - started > BODY_TIMEOUT_S  # in total longer than the timeout
    answer = await _closed_within(reader, 10.0)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert answer.endswith(b"[]")


async def test_300_connections_with_half_a_header_are_all_closed(served: int) -> None:
    """The issue's case: 300 clients that send half a request header each hold a socket until the deadline."""
    connections = []
    try:
        for _ in range(300):
            connections.append(
                await _sent_before_accepted(served, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half: ")
            )
        started = time.monotonic()
        answers = await asyncio.gather(*(_closed_within(r, 15.0) for r, _ in connections))
        elapsed = time.monotonic() - started
    finally:
        for _, writer in connections:
            writer.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers)
    print(f"300 half-sent headers closed in {elapsed:.2f} s (REQUEST_HEADER_TIMEOUT_S {HEADER_TIMEOUT_S})")
    assert elapsed < ceiling(10.0), out_of_time("300 connections closed at their 0.5 s deadlines", elapsed)
