"""Logging set-up (once per process) and the request-id / access-log middleware."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid
from datetime import UTC, datetime

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.text.pii import LOG_KINDS, Redactor

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access_logger = logging.getLogger("ragoverlay.access")
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (CONSOLE_JSON=true), with the request id."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as JSON."""
        out = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        if record.exc_info and record.levelno >= logging.ERROR:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _RedactFilter(logging.Filter):
    """PII_REDACT=logs: e-mail addresses, phone numbers, IBANs and card numbers out of log messages."""

    def __init__(self) -> None:
        super().__init__()
        self._redactor = Redactor(LOG_KINDS)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._redactor.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def configure_logging(*, debug: bool, console_json: bool, redact: bool = False) -> None:
    """Configure the root logger once: level from DEBUG_RAG_API, format from CONSOLE_JSON, PII_REDACT."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_ragoverlay", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._ragoverlay = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    if redact:
        handler.addFilter(_RedactFilter())
    if console_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    # our access log replaces uvicorn's (which would print query strings)
    logging.getLogger("uvicorn.access").disabled = True
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3", "httpx", "httpcore", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RequestContextMiddleware:
    """Pure ASGI middleware: a request id on every response and log line, and one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for key, value in scope.get("headers", []):
            if key == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        rid = incoming if incoming and _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        status = 500
        response_started = False
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"server-timing"]
                headers.append((b"x-request-id", rid.encode()))
                # time to the first byte of the answer, as the server saw it; one Server-Timing header
                # with the route's own stages first (a `total` of theirs gives way to the request's)
                total = (time.perf_counter() - started) * 1000
                stages = [
                    part.strip()
                    for k, v in message.get("headers", [])
                    if k.lower() == b"server-timing"
                    for part in v.decode("latin-1").split(",")
                    if part.strip() and part.strip().split(";", 1)[0].strip() != "total"
                ]
                stages.append(f"total;dur={total:.2f}")
                headers.append((b"server-timing", ", ".join(stages).encode("latin-1")))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            # Answer here, inside the request context, so the 500 carries the request id; the type
            # only goes to the log: exception text may hold request data or a provider's answer.
            logging.getLogger("ragoverlay").error(
                "Unhandled %s on %s %s", type(exc).__name__, scope.get("method"), scope.get("path")
            )
            logging.getLogger("ragoverlay").debug("Traceback of the unhandled error", exc_info=exc)
            if response_started:
                raise
            body = json.dumps({"detail": "Internal server error", "request_id": rid}).encode()
            await send_wrapper(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_wrapper({"type": "http.response.body", "body": body})
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            # path only: query strings may carry ids, and bodies are never logged
            level = logging.DEBUG if scope.get("path") == "/health" else logging.INFO
            access_logger.log(
                level, "%s %s %s %.1fms", scope.get("method"), scope.get("path"), status, elapsed
            )
            request_id_var.reset(token)
