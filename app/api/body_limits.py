"""Request bodies bounded while they stream in, before any parser sees them (pure ASGI); URLs UTF-8.

A JSON body is parsed whole (FastAPI reads it into memory, then `json.loads` builds every object), so
its size must be decided on the byte stream: the declared Content-Length is refused at once, and a
body without one (chunked) is counted as it arrives and refused the moment it passes the cap. Four
parallel 50 MB bodies used to grow the service by ~776 MiB before an answer; now each costs at most
the cap. The same pass checks that a JSON body is UTF-8 (RFC 8259), so invalid bytes answer 422
instead of the framework's generic 400.

The path and query string must percent-decode to UTF-8 too (422): an encoded lone surrogate would
otherwise reach the route as U+FFFD, a different id than the one the caller sent.

Routes that stream a multipart upload to disk (`/embed`, ...) keep their own MAX_UPLOAD_BYTES cap and
are exempt. Methods without a body (GET, HEAD, OPTIONS) pass untouched: no route reads one.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Collection
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A refusal sets no `Connection: close` itself: the server's protocol
# (app/runtime/request_timeouts.py) adds it to every answer that starts while the request body is
# still arriving, and then closes lingering, as nginx does (the answer and a FIN go out, what the
# client still sends is read and dropped), so a client still sending reads its 413 instead of a
# reset, and a kept-alive one opens a new connection.
# A small body that arrived whole with its headers leaves the connection open.
INVALID_UTF8_MESSAGE = "The request body is not valid UTF-8; JSON bodies must be UTF-8 encoded (RFC 8259)"
INVALID_URL_MESSAGE = (
    "The {part} is not valid UTF-8 once percent-decoded (an encoded surrogate or a stray byte); "
    "percent-encode the UTF-8 bytes of valid text"
)


NOT_JSON_MESSAGE = (
    "The request body must be JSON sent with the header Content-Type: application/json (this request "
    "{sent}); with curl, add -H 'Content-Type: application/json'"
)


def not_json_errors(errors: list[dict[str, Any]], content_type: str | None) -> list[dict[str, Any]] | None:
    """A JSON route's 422 errors when its body came without a JSON Content-Type: the errors about
    the whole body (FastAPI did not read it as JSON, so it "should be a valid dictionary") become
    one that says to send JSON with that header; None when the body was sent as JSON."""
    if _is_json(content_type) and content_type is not None:
        return None
    if not any(list(err.get("loc", ())) == ["body"] for err in errors):
        return None
    media = (content_type or "").split(";", 1)[0].strip()[:100]
    sent = f"said Content-Type: {media}" if media else "had no Content-Type"
    hint = {"type": "json_content_type", "loc": ["body"], "msg": NOT_JSON_MESSAGE.format(sent=sent)}
    return [hint, *(err for err in errors if list(err.get("loc", ())) != ["body"])]


def too_large_detail(limit: int) -> str:
    """The 413 detail: what the limit is and what to change."""
    return (
        f"The request body is larger than MAX_JSON_BODY_BYTES ({limit} bytes); send fewer file ids "
        "or a shorter query, or ask the operator to raise MAX_JSON_BODY_BYTES"
    )


class BodyRefused(HTTPException):
    """Raised from `receive` when the body passes the cap or is not UTF-8.

    An HTTPException, so FastAPI's body reader re-raises it untouched and the app's handler answers;
    should it escape the app, the middleware answers it.
    """


def _url_error(scope: Scope) -> list[dict[str, Any]] | None:
    """422 errors when the path or query string does not decode to UTF-8.

    Servers would otherwise decode such bytes to U+FFFD and hand the route a different id.
    """
    raw_path = scope.get("raw_path")
    if isinstance(raw_path, bytes):
        raw_path = raw_path.split(b"?", 1)[0]
    parts = (("path", "path", raw_path), ("query", "query string", scope.get("query_string", b"")))
    for loc, name, raw in parts:
        if not raw:
            continue
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return [{"type": "string_unicode", "loc": [loc], "msg": INVALID_URL_MESSAGE.format(part=name)}]
    return None


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return True  # FastAPI may still parse it as JSON
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class GuardedReceive:
    """`receive` that counts body bytes (and checks UTF-8), raising BodyRefused past the cap."""

    def __init__(self, receive: Receive, limit: int, *, check_utf8: bool) -> None:
        self._receive = receive
        self.limit = limit
        self.received = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")() if check_utf8 else None

    async def __call__(self) -> Message:
        """The next ASGI message, after the checks."""
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        body: bytes = message.get("body", b"")
        self.received += len(body)
        if self.received > self.limit:
            raise BodyRefused(413, too_large_detail(self.limit))
        if self._decoder is not None:
            try:
                self._decoder.decode(body, final=not message.get("more_body", False))
            except UnicodeDecodeError:
                self._decoder = None
                raise BodyRefused(
                    422,
                    [{"type": "json_invalid", "loc": ["body"], "msg": INVALID_UTF8_MESSAGE}],  # type: ignore[arg-type]
                ) from None
        return message


class BodyGuardMiddleware:
    """Cap request bodies at `max_body_bytes` (413), require UTF-8 JSON and URLs (422), on the byte stream."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, exempt_paths: Collection[str] = ()) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.exempt_paths = frozenset(exempt_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        url_error = _url_error(scope)
        if url_error is not None:
            await _answer(send, 422, url_error)
            return
        if scope["method"] in _BODYLESS_METHODS or scope["path"] in self.exempt_paths:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            # refused before a single body byte is read, and before authentication
            await _answer(send, 413, too_large_detail(self.max_body_bytes))
            return
        guarded = GuardedReceive(
            receive, self.max_body_bytes, check_utf8=_is_json(headers.get("content-type"))
        )
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, guarded, send_wrapper)
        except BodyRefused as exc:
            if started:
                raise
            await _answer(send, exc.status_code, exc.detail)


async def _answer(send: Send, status: int, detail: Any) -> None:
    payload: dict[str, Any] = {"detail": detail}
    if status == 422:
        payload["message"] = "Request validation failed"
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
