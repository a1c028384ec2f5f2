"""Requests whose headers or body stall are closed after a timeout (408), instead of held for ever.

uvicorn times out only idle keep-alive connections between requests: a connection that sends part
of its headers, or declares a body and then stops sending it, stays open as long as the client
likes (300 half-sent requests were all still open after 20 s). Two guards close that:

- headers: `stall_guarded_protocol` is uvicorn's httptools protocol with a deadline from the moment
  a connection opens (or a new request on it begins) until its headers are complete
  (`REQUEST_HEADER_TIMEOUT_S`); past it the connection gets a 408 and is closed;
- body: `BodyTimeoutMiddleware` bounds each wait for the next piece of a request body
  (`REQUEST_BODY_TIMEOUT_S`); a body that stops arriving is answered 408 with `Connection: close`,
  so uvicorn closes the connection rather than waiting for the rest. Time the application spends
  working between two reads is not counted, and a body that keeps arriving, however slowly in
  total, is never cut.

An answer given before the request body was read (a 413 from the declared length, a 408, a 401 or
404 to a request whose body is still arriving) says `Connection: close` and ends the connection
with a lingering close, as nginx's does: the answer and a FIN are sent, and whatever the client
still sends is read and dropped until it closes its side, for at most `LINGER_TOTAL_S` (and
`LINGER_IDLE_S` of silence). Without the header a kept-alive client sent its next request on the
closing connection and got "server disconnected" (Python's http.client every time; httpx and
Node's agent whenever the FIN had not arrived yet). uvicorn alone either closed at once, with the
body still arriving (the kernel then answers the unread bytes with a reset, and a client that sends
its whole body before reading, such as Python's http.client with `Connection: close`, saw
"connection reset" instead of the 413), or, on a kept-alive connection, read the rest of the body
with no bound and then held the connection open for ever.

The same transport wrapper also sends an answer's header block and its body in one write (see
`_ClosingTransport.write`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_DETAIL = (
    "The request headers did not arrive within REQUEST_HEADER_TIMEOUT_S ({timeout:g} s); "
    "the connection is closed"
)
# how long a lingering close reads and drops what a client still sends after its answer (nginx's
# lingering_time is 30 s); and how long it waits when nothing comes (its lingering_timeout is 5 s: ours
# is shorter, as a client still sending its body has no reason to pause)
LINGER_TOTAL_S = 30.0
LINGER_IDLE_S = 2.0
BODY_TIMEOUT_DETAIL = (
    "The request body stopped arriving: nothing came for REQUEST_BODY_TIMEOUT_S ({timeout:g} s); "
    "send the whole body without pausing"
)


def _timeout_response(detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


@dataclass(frozen=True)
class _AnswerHead:
    """An answer's header block as it leaves, and whether it waits to be joined to its body."""

    block: bytes
    hold: bool


class _ClosingTransport(asyncio.Transport):
    """The connection's transport as uvicorn sees it: its close lingers while a request body is unread."""

    def __init__(self, raw: asyncio.Transport, protocol: _HeaderDeadlineProtocol) -> None:
        super().__init__()
        self.raw = raw
        self._protocol = protocol
        self._held: bytes | None = None  # an answer's header block, waiting for its body

    def close(self) -> None:
        """Close now, or linger first when the client is still sending the body of an answered request."""
        self.flush()
        if self._protocol.lingering or self.raw.is_closing() or not self._protocol.body_unread():
            self.raw.close()
        else:
            self._protocol.linger()

    def is_closing(self) -> bool:
        """True from the moment uvicorn's close was asked for, lingering included."""
        return self._protocol.lingering or self.raw.is_closing()

    def pause_reading(self) -> None:
        """uvicorn's flow control; a lingering close keeps reading (and dropping)."""
        if not self._protocol.lingering:
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        """uvicorn's flow control."""
        if not self._protocol.lingering:
            self.raw.resume_reading()

    def is_reading(self) -> bool:
        """Whether the socket is read."""
        return self.raw.is_reading()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send bytes; the header block of an answer of known length leaves with its body."""
        # uvicorn writes the header block when `http.response.start` is sent and the body as a second
        # write: two socket writes (and two TCP segments) for every small JSON answer, although the
        # application sends both messages back to back. The header block is held here and joined to
        # the next write (one writev): the same bytes on the wire, one write fewer. Only answers
        # whose body follows at once are held: those declaring a Content-Length (a Response sends
        # its body right after its start) and those without a body (HEAD, 204, 304: flushed as the
        # answer completes). Streamed answers (chunked: server-sent events, generators) are not, so
        # their headers and chunks leave as they come, as do the 100 Continue and the 408s, and
        # uvicorn's write back-pressure is untouched. A held block is flushed by whatever moves the
        # connection on first: the next write, the end of the answer, close (an error after the
        # start), write_eof, abort, a protocol switch. No timer is armed: a `call_soon` flush costs
        # an extra turn of the event loop (one more epoll call) per answer.
        held = self._held
        if held is not None:
            self._held = None
            self.raw.writelines((held, data))
            return
        head = self._protocol.answer_head(data)
        if head is None:
            self.raw.write(data)
        elif head.hold:
            self._held = head.block
        else:
            self.raw.write(head.block)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        """Send several pieces."""
        self.flush()
        self.raw.writelines(list_of_data)

    def flush(self) -> None:
        """Send a held header block now."""
        held = self._held
        if held is not None:
            self._held = None
            if not self.raw.is_closing():  # the connection was lost meanwhile
                self.raw.write(held)

    def write_eof(self) -> None:
        """Half-close after what was written."""
        self.flush()
        self.raw.write_eof()

    def can_write_eof(self) -> bool:
        """Whether half-closing is possible."""
        return self.raw.can_write_eof()

    def abort(self) -> None:
        """Close at once, dropping buffered data."""
        self.flush()  # as if written at once: the kernel may have it already
        self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The socket's details (addresses, TLS)."""
        return self.raw.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        """Bytes waiting to be sent."""
        return self.raw.get_write_buffer_size() + len(self._held or b"")

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Flow control of writes."""
        self.raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """Flow control of writes."""
        return self.raw.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the connection to another protocol (a WebSocket upgrade)."""
        self.flush()
        self.raw.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The protocol that reads the socket."""
        return self.raw.get_protocol()


class _HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose request headers do not complete in time,
    and closing (lingering) those answered before their request body was read."""

    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None
    lingering: bool = False
    _raw: asyncio.Transport | None = None
    _linger_timers: tuple[asyncio.TimerHandle, ...] = ()
    _linger_idle: asyncio.TimerHandle | None = None
    _shutting_down: bool = False
    _wrapped: _ClosingTransport | None = None
    _headed: object = None  # the request/response cycle whose header block was written last

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the first request's header deadline as the connection opens."""
        self._raw = transport
        self._wrapped = _ClosingTransport(transport, self)
        super().connection_made(self._wrapped)
        self._arm_header_deadline()

    def answer_head(self, data: bytes | bytearray | memoryview) -> _AnswerHead | None:
        """The header block of the current answer, when `data` is it (else None), as it must leave.

        uvicorn marks the answer started, decides chunked or not, and writes its header block in one
        synchronous step, so the first write after the start is that block; the 100 Continue is
        written only before the start. An answer that starts while the request body is still
        arriving ends the connection (a lingering close, see `close`): its block says so, and uvicorn
        is told not to keep the connection alive, so it closes once the answer is complete. The
        block is held (`hold`) when the answer declares its length or has no body.
        """
        cycle = self.cycle
        if cycle is None or cycle is self._headed or not cycle.response_started or cycle.response_complete:
            return None
        self._headed = cycle
        block = bytes(data)
        if cycle.keep_alive and cycle.more_body and not cycle.disconnected and block.endswith(b"\r\n\r\n"):
            cycle.keep_alive = False  # uvicorn adds the header itself only when it knew before the start
            block = block[:-2] + b"connection: close\r\n\r\n"
        return _AnswerHead(block, hold=cycle.chunked_encoding is not True)

    def data_received(self, data: bytes) -> None:
        """Parse the request; while lingering, drop what comes."""
        if self.lingering:
            self._arm_linger_idle()
            return
        super().data_received(data)

    def on_message_begin(self) -> None:
        """A request begins (also the next one on a kept-alive connection): its headers are due."""
        super().on_message_begin()
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        """The headers are in: the body, if any, is the application's to time (BodyTimeoutMiddleware)."""
        self._disarm_header_deadline()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        """Answered before the body was read: close (lingering) instead of reading the rest unbounded."""
        if self._wrapped is not None:  # an answer without a body (HEAD) sends its held header block now
            self._wrapped.flush()
        if self.body_unread() and not self.transport.is_closing():
            self.transport.close()
        super().on_response_complete()

    def shutdown(self) -> None:
        """The server stops: no lingering from here on."""
        self._shutting_down = True
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        """Nothing left to time."""
        self._disarm_header_deadline()
        self._end_linger_timers()
        super().connection_lost(exc)

    def body_unread(self) -> bool:
        """True when the current request's response is complete but the client has not sent all its body."""
        cycle = self.cycle
        return (
            cycle is not None
            and cycle.response_complete
            and cycle.more_body
            and not cycle.disconnected
            and not self._shutting_down
        )

    def linger(self) -> None:
        """Send the answer and a FIN, then read and drop until the client closes or the time is up."""
        raw = self._raw
        assert raw is not None
        self.lingering = True
        self._disarm_header_deadline()
        if raw.can_write_eof():
            raw.write_eof()
        raw.resume_reading()
        self._linger_timers = (self.loop.call_later(LINGER_TOTAL_S, self._stop_lingering),)
        self._arm_linger_idle()

    def _arm_linger_idle(self) -> None:
        if self._linger_idle is not None:
            self._linger_idle.cancel()
        self._linger_idle = self.loop.call_later(LINGER_IDLE_S, self._stop_lingering)

    def _end_linger_timers(self) -> None:
        for timer in (*self._linger_timers, self._linger_idle):
            if timer is not None:
                timer.cancel()
        self._linger_timers, self._linger_idle = (), None

    def _stop_lingering(self) -> None:
        self._end_linger_timers()
        if self._raw is not None:
            self._raw.close()

    def _arm_header_deadline(self) -> None:
        if self._header_timer is None and not self.lingering:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        detail = HEADER_TIMEOUT_DETAIL.format(timeout=self.header_timeout_s)
        self.transport.write(_timeout_response(detail))
        self.transport.close()


def stall_guarded_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn (`http=`): headers must complete within `header_timeout_s`."""
    return type(
        "StallGuardedHttpToolsProtocol", (_HeaderDeadlineProtocol,), {"header_timeout_s": header_timeout_s}
    )


class BodyStalled(HTTPException):
    """Raised from `receive` when the next piece of the body does not come in time.

    An HTTPException, so FastAPI's body reader re-raises it untouched and the app's handler answers
    it (with `Connection: close`).
    """


class BodyTimeoutMiddleware:
    """Bound each wait for request body bytes to `timeout_s` (408 and close when it runs out)."""

    def __init__(self, app: ASGIApp, *, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:  # after the body: waiting for a disconnect is not a stall
                return await receive()
            try:
                async with asyncio.timeout(self.timeout_s):
                    message = await receive()
            except TimeoutError:
                body_done = True
                raise BodyStalled(
                    408,
                    BODY_TIMEOUT_DETAIL.format(timeout=self.timeout_s),
                    headers={"Connection": "close"},
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, timed_receive, send_wrapper)
        except BodyStalled as exc:
            if started:
                raise
            await _answer_408(send, exc.detail)


async def _answer_408(send: Send, detail: Any) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 408,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
