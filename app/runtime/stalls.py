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
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_DETAIL = (
    "The request headers did not arrive within REQUEST_HEADER_TIMEOUT_S ({timeout:g} s); "
    "the connection is closed"
)
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


class _HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose request headers do not complete in time."""

    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the first request's header deadline as the connection opens."""
        super().connection_made(transport)
        self._arm_header_deadline()

    def on_message_begin(self) -> None:
        """A request begins (also the next one on a kept-alive connection): its headers are due."""
        super().on_message_begin()
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        """The headers are in: the body, if any, is the application's to time (BodyTimeoutMiddleware)."""
        self._disarm_header_deadline()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """Nothing left to time."""
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self._header_timer is None:
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
