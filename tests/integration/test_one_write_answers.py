"""An answer of known length leaves the server in one socket write (its header block joined to its body),
while streamed answers still stream and answers without a body still complete: the real server (uvicorn
with our protocol, the app with its middleware), real sockets, and the writes counted on the transport."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import pytest
import uvicorn
from fastapi import FastAPI, Response
from fastapi.responses import StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.main import create_app
from app.runtime.request_timeouts import stall_guarded_protocol
from tests.fixtures.patience import ceiling
from tests.fixtures.serve import free_port
from tests.fixtures.service import SettingsFactory

WRITES: list[bytes] = []  # every write the server made on a connection's socket, in order


class _CountingTransport:
    """The connection's own transport, recording each write (one write: one call, one syscall)."""

    def __init__(self, raw: asyncio.Transport) -> None:
        self._raw = raw

    def write(self, data: bytes | bytearray | memoryview) -> None:
        WRITES.append(bytes(data))
        self._raw.write(data)

    def writelines(self, pieces: Iterable[bytes | bytearray | memoryview]) -> None:
        pieces = [bytes(piece) for piece in pieces]
        WRITES.append(b"".join(pieces))
        self._raw.writelines(pieces)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Gates:
    """What the test lets the streamed answer produce next."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.last = asyncio.Event()


class _BrokenAfterStart:
    """An ASGI endpoint that fails between its start (declaring 10 bytes) and its body."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        raise RuntimeError("failed between the start and the body")


def _with_test_routes(app: FastAPI, gates: _Gates) -> FastAPI:
    async def streamed() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            await gates.first.wait()
            yield b"first chunk"
            await gates.last.wait()
            yield b"last chunk"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def head_only() -> Response:
        return Response(b"never sent", headers={"x-kind": "head"})  # content-length: 10, no body

    async def echo(payload: dict[str, int]) -> dict[str, int]:
        return payload

    app.add_api_route("/test/streamed", streamed, methods=["GET"])
    app.add_api_route("/test/head", head_only, methods=["HEAD"])
    app.add_api_route("/test/echo", echo, methods=["POST"])
    app.add_api_route("/test/empty", lambda: Response(status_code=204), methods=["DELETE"])
    app.router.routes.append(Route("/test/broken", _BrokenAfterStart()))
    return app


@pytest.fixture
async def served(settings_factory: SettingsFactory) -> AsyncIterator[tuple[int, _Gates]]:
    base = stall_guarded_protocol(10.0)

    class Counting(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(cast(asyncio.Transport, _CountingTransport(transport)))

    gates = _Gates()
    port = free_port()
    config = uvicorn.Config(
        _with_test_routes(create_app(settings_factory()), gates),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        http=Counting,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the server did not start"
        await asyncio.sleep(0.05)
    WRITES.clear()
    try:
        yield port, gates
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, ceiling(30))


async def _head_block(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str]]:
    block = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ceiling(10))
    lines = block.decode("latin-1").split("\r\n")[1:-2]
    return block, {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}


async def _answer(reader: asyncio.StreamReader, *, bodyless: bool = False) -> bytes:
    """One whole answer of known length (or none), as it came off the socket."""
    block, headers = await _head_block(reader)
    if bodyless:
        return block
    return block + await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), ceiling(10))


async def test_a_json_answer_leaves_in_one_write(served: tuple[int, _Gates]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        health = await _answer(reader)
        assert health.startswith(b"HTTP/1.1 200 ")
        assert json.loads(health.split(b"\r\n\r\n", 1)[1]) == {"status": "UP"}
        assert WRITES == [health], "the header block and the body left in one write"

        WRITES.clear()  # the next request on the kept-alive connection: a 401 with its detail
        writer.write(
            b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 17\r\n\r\n{"query": "pump"}'
        )
        refused = await _answer(reader)
        assert refused.startswith(b"HTTP/1.1 401 ")
        assert "detail" in json.loads(refused.split(b"\r\n\r\n", 1)[1])
        assert WRITES == [refused]
    finally:
        writer.close()


async def test_the_100_continue_goes_alone_and_first(served: tuple[int, _Gates]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: 12\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ceiling(10))
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b'{"echo": 42}')
        answer = await _answer(reader)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"echo":42}')
        assert WRITES == [interim, answer]
    finally:
        writer.close()


async def test_a_streamed_answer_still_streams(served: tuple[int, _Gates]) -> None:
    port, gates = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /test/streamed HTTP/1.1\r\nHost: x\r\n\r\n")
        # the headers arrive before any chunk is produced, then each chunk before the next is made
        _, headers = await _head_block(reader)
        assert headers["transfer-encoding"] == "chunked"
        assert headers["content-type"].startswith("text/event-stream")
        assert not gates.first.is_set()
        gates.first.set()
        assert await asyncio.wait_for(reader.readuntil(b"first chunk\r\n"), ceiling(10))
        assert not gates.last.is_set()
        gates.last.set()
        assert await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), ceiling(10))
        assert [w.split(b"\r\n", 1)[0] for w in WRITES] == [b"HTTP/1.1 200 OK", b"b", b"a", b"0"]
    finally:
        writer.close()


async def test_head_204_and_pipelined_answers_complete(served: tuple[int, _Gates]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"HEAD /test/head HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await _answer(reader, bodyless=True)
        assert head.startswith(b"HTTP/1.1 200 ") and b"x-kind: head" in head
        assert b"content-length: 10" in head  # the length a GET would have had, and no body
        writer.write(b"DELETE /test/empty HTTP/1.1\r\nHost: x\r\n\r\n")
        empty = await _answer(reader, bodyless=True)
        assert empty.startswith(b"HTTP/1.1 204 ")
        assert WRITES == [head, empty]

        # three requests in one packet: three answers, in order and whole. (Those queued behind
        # another may leave in two writes: uvicorn's newest request is then not the one answering.)
        WRITES.clear()
        writer.write(
            b"HEAD /test/head HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"DELETE /test/empty HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        answers = [
            await _answer(reader, bodyless=True),
            await _answer(reader),
            await _answer(reader, bodyless=True),
        ]
        assert [a.split(b"\r\n", 1)[0] for a in answers] == [
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 204 No Content",
        ]
        assert b"".join(WRITES) == b"".join(answers)
        assert WRITES[0] == answers[0]
    finally:
        writer.close()


async def test_an_error_between_start_and_body_still_sends_the_headers(served: tuple[int, _Gates]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /test/broken HTTP/1.1\r\nHost: x\r\n\r\n")
        received = await asyncio.wait_for(reader.read(), ceiling(10))  # until the server closes
        assert received.startswith(b"HTTP/1.1 200 OK\r\n") and received.endswith(b"\r\n\r\n")
        assert b"\r\ncontent-length: 10\r\n" in received  # the headers as declared, then the close
        assert WRITES == [received]
    finally:
        writer.close()
