"""An OpenAI-compatible `POST {base}/chat/completions` asked for one short text, failing softly.

Used at index time only (contextual chunking), where a slow, failing or babbling endpoint must never
fail an upload: every failure is a `ChatFailed` with a short reason the caller counts, never a
provider body. Bounded three ways: a total time per request (not only httpx's per-read timeout, so
a server that drips bytes cannot hold it), the reply's size (read as a stream, abandoned past
`MAX_REPLY_BYTES`), and the tokens asked for (`max_tokens`). 429 and 5xx get one retry through the
shared `RetryPolicy`; a timeout gets none (the next chunk should not wait for this one twice).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx

from app.clients.http import build_http_client, is_retryable_status, parse_retry_after
from app.clients.retry import RetryPolicy, Transient

logger = logging.getLogger(__name__)

# a chat completion of a sentence is well under 4 KB; 64 KB leaves room for verbose servers
MAX_REPLY_BYTES = 64 * 1024


class ChatFailed(Exception):
    """No usable reply; `reason` is short and ours ("timeout", "HTTP 500", "unreadable reply")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ChatClient:
    """One OpenAI-compatible chat endpoint and model; `complete` returns the reply's text."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_tokens: int = 120,
        max_retries: int = 1,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 16,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.model = model
        # PII_REDACT=contextual: every message's text is redacted before it is sent
        self._redact = redact
        self._url = base_url.rstrip("/") + "/chat/completions"
        # the key goes into this header only: never into a log line or an error
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._max_tokens = max_tokens
        self._client = build_http_client(
            timeout_s=timeout_s, max_connections=max_connections, transport=transport
        )
        self._retry = RetryPolicy(
            max_retries=max_retries, backoff_base_s=0.25, backoff_max_s=1.0, retry_after_max_s=2.0
        )

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """The assistant's text for `messages`; ChatFailed when there is none to use."""
        if self._redact is not None:
            redact = self._redact  # a document's window is milliseconds of CPU: off the event loop
            messages = await asyncio.to_thread(
                lambda: [{**m, "content": redact(m["content"])} for m in messages]
            )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self._max_tokens,
            "temperature": 0,
        }
        try:
            payload = await self._retry.call(
                lambda: self._once(body), what="Contextual chunking request", log=logger
            )
        except Transient as exc:
            raise ChatFailed(exc.reason) from None
        return _reply_text(payload)

    async def _once(self, body: dict[str, Any]) -> Any:
        """One request within the total time: its JSON, `Transient` for 429/5xx/dropped, else ChatFailed."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._post(body)
        except TimeoutError:
            raise ChatFailed("timeout") from None
        except httpx.TimeoutException:
            raise ChatFailed("timeout") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL):
            raise ChatFailed("invalid URL") from None
        except httpx.TransportError as exc:
            raise Transient(type(exc).__name__) from None

    async def _post(self, body: dict[str, Any]) -> Any:
        async with self._client.stream("POST", self._url, json=body, headers=self._headers) as response:
            status = response.status_code
            if is_retryable_status(status):
                raise Transient(
                    f"HTTP {status}", retry_after_s=parse_retry_after(response.headers.get("retry-after"))
                )
            if not 200 <= status <= 299:
                raise ChatFailed(f"HTTP {status}")
            raw = bytearray()
            async for part in response.aiter_bytes():
                raw += part
                if len(raw) > MAX_REPLY_BYTES:
                    raise ChatFailed("reply too large")
        try:
            return json.loads(bytes(raw))
        except ValueError:
            raise ChatFailed("unreadable reply") from None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def _reply_text(payload: Any) -> str:
    """`choices[0].message.content` of a chat completion, or ChatFailed."""
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ChatFailed("unreadable reply") from None
    if not isinstance(content, str):
        raise ChatFailed("unreadable reply")
    return content
