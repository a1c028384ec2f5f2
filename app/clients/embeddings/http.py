"""Embedding providers reached over HTTP: OpenAI-compatible, Azure OpenAI, Ollama and HF TEI.

One shared `httpx.AsyncClient`; batches split by count and characters, sent with bounded concurrency,
retried by the shared `RetryPolicy` (app/clients/retry.py: backoff with jitter on connect errors,
timeouts, 408, 429 and 5xx, honouring `Retry-After`), and reassembled in input order. Error
details are ours: never a provider body.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np

from app import metrics
from app.clients.embeddings.base import BaseEmbedder, batch_done, gather_or_cancel, plan_batches
from app.clients.embeddings.breaker import CircuitBreaker
from app.clients.embeddings.windows import hosted_splitter, plan_windows, pool_plan
from app.clients.http import build_http_client, is_retryable_status, parse_retry_after
from app.clients.retry import RetryPolicy, Transient
from app.errors import EmbeddingProviderError
from app.text.tokens import pool_windows

# texts up to this many characters in all are redacted on the event loop (a thread hop costs more)
_INLINE_REDACT_CHARS = 2000
logger = logging.getLogger(__name__)

__all__ = [
    "OPENAI_DEFAULT_BASE_URL",
    "AzureEmbedder",
    "HttpEmbedder",
    "OllamaEmbedder",
    "OpenAIEmbedder",
    "TEIEmbedder",
    "build_http_client",
    "is_retryable_status",
    "parse_retry_after",
]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_HTTP_BATCH_SIZE = 200


class _Unreadable(Exception):
    """A 2xx reply whose body is not what the provider's protocol promises."""


class HttpEmbedder(BaseEmbedder):
    """The transport shared by HTTP providers; subclasses define the request and the reply shape."""

    default_batch_size = DEFAULT_HTTP_BATCH_SIZE
    # Hints appended to error details, naming the settings an operator should look at.
    model_hint = "check EMBEDDINGS_MODEL"
    auth_hint = "check the API key"
    url_hint = "check the provider URL"

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        dimensions: int | None = None,
        client: httpx.AsyncClient | None = None,
        proxy: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        batch_size: int = 0,
        batch_max_chars: int = 200_000,
        concurrency: int = 4,
        cache_size: int = 1024,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 30.0,
        breaker_failures: int = 5,
        breaker_reset_s: float = 10.0,
        max_input_tokens: int | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(provider=provider, model=model, dimensions=dimensions, cache_size=cache_size)
        # texts that may pass the model's input limit are cut into windows and pooled (windows.py)
        self._split = hosted_splitter(provider, model, max_input_tokens)
        self._owns_client = client is None
        # transport: where an owned client sends its requests (tests answer in-process through it)
        self._client = client or build_http_client(
            timeout_s=timeout_s,
            proxy=proxy,
            max_connections=max(16, 2 * concurrency + 4),
            transport=transport,
        )
        self._timeout_s = timeout_s
        self._timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        self._retry = RetryPolicy(
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            retry_after_max_s=retry_after_max_s,
        )
        self._breaker = CircuitBreaker(breaker_failures, breaker_reset_s)
        # PII_REDACT=embeddings: texts are redacted on the wire only (caches and checkpoints key the
        # original text, so a changed setting never mixes in a vector of the other form unnoticed)
        self._redact = redact
        self._batch_size = batch_size or self.default_batch_size
        self._batch_max_chars = batch_max_chars
        # Batches share one bound; queries get their own lane so a search never waits behind an ingest.
        self._batch_slots = asyncio.Semaphore(concurrency)
        self._query_slots = asyncio.Semaphore(concurrency)

    # --- protocol, per provider ---------------------------------------------------------------
    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        """URL, headers and JSON body of one embedding request."""
        raise NotImplementedError

    def _parse(self, payload: Any, count: int) -> Any:
        """The rows of vectors in a reply (raise _Unreadable, KeyError, TypeError... when malformed)."""
        raise NotImplementedError

    # --- embedding ----------------------------------------------------------------------------
    async def _embed_documents(self, texts: list[str]) -> np.ndarray:
        if self._split is None:
            return await self._embed_pieces(texts)
        # windows of long texts travel in the same batches as the other texts
        plan = plan_windows(texts, self._split)
        return pool_plan(await self._embed_pieces(plan.pieces), plan)

    async def _embed_pieces(self, texts: list[str]) -> np.ndarray:
        slices = plan_batches(texts, self._batch_size, self._batch_max_chars)
        if len(slices) == 1:
            vectors = await self._run_batch(texts, self._batch_slots)
            batch_done(len(texts), len(texts))
            return vectors
        out: np.ndarray | None = None

        async def batch(start: int, end: int) -> None:
            nonlocal out
            vectors = await self._run_batch(texts[start:end], self._batch_slots)
            out = self._place(out, len(texts), start, vectors)
            batch_done(end - start, len(texts))

        await gather_or_cancel([batch(start, end) for start, end in slices])
        assert out is not None  # more than one slice: every batch put its rows in
        return out

    async def _embed_query(self, text: str) -> np.ndarray:
        windows = self._split(text) if self._split is not None else None
        if not windows:
            return await self._run_batch([text], self._query_slots)
        vectors = await self._run_batch([piece for piece, _ in windows], self._query_slots)
        return pool_windows(vectors, [weight for _, weight in windows])[None, :]

    async def _run_batch(self, texts: list[str], slots: asyncio.Semaphore) -> np.ndarray:
        # OpenAI and TEI reject an empty string outright; a space embeds to (nearly) the same thing.
        wire_texts = [text if text else " " for text in texts]
        if self._redact is not None:
            redact = self._redact
            if sum(len(text) for text in wire_texts) <= _INLINE_REDACT_CHARS:  # a question: microseconds
                wire_texts = [redact(text) for text in wire_texts]
            else:  # ~0.4 ms of CPU a 1,500-character text: a batch's worth off the event loop
                wire_texts = await asyncio.to_thread(lambda: [redact(text) for text in wire_texts])
        async with slots:
            payload = await self._post(wire_texts)
        try:
            rows = self._parse(payload, len(texts))
            vectors = np.asarray(rows, dtype=np.float32)
        except (_Unreadable, KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise EmbeddingProviderError(
                "The embedding provider returned an unreadable response", retryable=False
            ) from None
        return self._accept(vectors, len(texts))

    async def _post(self, texts: list[str]) -> Any:
        url, headers, body = self._request(texts)
        try:
            return await self._retry.call(
                lambda: self._attempt(url, headers, body),
                what=f"Embedding request to {self.provider}",
                log=logger,
            )
        except Transient as exc:
            detail = exc.detail
            if self._retry.attempts > 1:
                detail = f"{detail}; gave up after {self._retry.attempts} attempts"
            raise EmbeddingProviderError(detail, retryable=True) from None

    async def _attempt(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        """One attempt through the circuit breaker (which may refuse it at once: 503)."""
        try:
            self._breaker.before_attempt()
        except EmbeddingProviderError:
            metrics.EMBEDDING_ATTEMPTS.labels(self.provider, "breaker_open").inc()
            raise
        try:
            payload = await self._post_once(url, headers, body)
        except Transient:
            if self._breaker.failure():
                logger.warning(
                    "Embedding provider %s failed %d times in a row: calls fail at once for %g s",
                    self.provider,
                    self._breaker.consecutive,
                    self._breaker.reset_s,
                )
            raise
        self._breaker.success()
        return payload

    async def _post_once(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        """One request: the reply's JSON, `Transient` for what may clear, else EmbeddingProviderError."""
        try:
            response = await self._client.post(url, json=body, headers=headers, timeout=self._timeout)
        except httpx.TimeoutException:
            metrics.EMBEDDING_ATTEMPTS.labels(self.provider, "timeout").inc()
            raise Transient(
                "timeout",
                detail=f"The embedding provider did not answer within {self._timeout_s:g} s",
            ) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL):
            raise EmbeddingProviderError(
                f"The embedding provider URL is invalid; {self.url_hint}", retryable=False
            ) from None
        except httpx.TransportError as exc:
            metrics.EMBEDDING_ATTEMPTS.labels(self.provider, "transport_error").inc()
            raise Transient(
                type(exc).__name__, detail=f"Could not reach the embedding provider; {self.url_hint}"
            ) from None
        status = response.status_code
        outcome = "ok" if status < 400 else "http_429" if status == 429 else f"http_{status // 100}xx"
        metrics.EMBEDDING_ATTEMPTS.labels(self.provider, outcome).inc()
        if 200 <= status <= 299:
            try:
                return response.json()
            except ValueError:
                raise EmbeddingProviderError(
                    "The embedding provider returned an unreadable response", retryable=False
                ) from None
        if not is_retryable_status(status):
            raise self._rejected(status)
        what = "is rate limiting requests" if status == 429 else "is unavailable"
        raise Transient(
            f"HTTP {status}",
            detail=f"The embedding provider {what} (HTTP {status})",
            retry_after_s=parse_retry_after(response.headers.get("retry-after")),
        )

    def _rejected(self, status: int) -> EmbeddingProviderError:
        if status in (401, 403):
            detail = f"The embedding provider refused our credentials (HTTP {status}); {self.auth_hint}"
        elif status == 413:
            detail = (
                "The embedding provider rejected the batch as too large (HTTP 413); lower "
                "EMBEDDING_BATCH_SIZE or EMBEDDING_BATCH_MAX_CHARS"
            )
        else:
            detail = f"The embedding provider rejected the request (HTTP {status}); {self.model_hint}"
        return EmbeddingProviderError(detail, retryable=False)

    async def aclose(self) -> None:
        """Close the HTTP client when we created it (a passed-in client belongs to the caller)."""
        await super().aclose()
        if self._owns_client:
            await self._client.aclose()


def _float_rows(items: list[Any]) -> list[Any]:
    """Vectors from OpenAI-style items: float lists, or base64 little-endian float32 strings."""
    rows: list[Any] = []
    for item in items:
        embedding = item["embedding"]
        if isinstance(embedding, str):
            try:
                embedding = np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4")
            except (binascii.Error, ValueError):
                raise _Unreadable from None
        rows.append(embedding)
    return rows


class OpenAIEmbedder(HttpEmbedder):
    """`POST {base}/embeddings`: OpenAI, and any OpenAI-compatible server (vLLM, LM Studio, ...)."""

    model_hint = "check EMBEDDINGS_MODEL and RAG_OPENAI_BASEURL"
    auth_hint = "check RAG_OPENAI_API_KEY"
    url_hint = "check RAG_OPENAI_BASEURL"

    def __init__(
        self, *, base_url: str = OPENAI_DEFAULT_BASE_URL, api_key: str | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("provider", "openai")
        super().__init__(**kwargs)
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._configured_dims is not None:
            body["dimensions"] = self._configured_dims
        return self._url, self._headers, body

    def _parse(self, payload: Any, count: int) -> Any:
        items = payload["data"]
        if not isinstance(items, list):
            raise _Unreadable
        items = sorted(items, key=lambda item: int(item["index"]))
        # indexes must be exactly 0..n-1: a reply that skips or repeats one cannot be put in order
        if [int(item["index"]) for item in items] != list(range(len(items))):
            raise _Unreadable
        return _float_rows(items)


class AzureEmbedder(OpenAIEmbedder):
    """`POST {endpoint}/openai/deployments/{deployment}/embeddings`; the model is the deployment name."""

    model_hint = (
        "check EMBEDDINGS_MODEL (the deployment name), RAG_AZURE_OPENAI_ENDPOINT and "
        "RAG_AZURE_OPENAI_API_VERSION"
    )
    auth_hint = "check RAG_AZURE_OPENAI_API_KEY"
    url_hint = "check RAG_AZURE_OPENAI_ENDPOINT"

    def __init__(self, *, endpoint: str, api_key: str, api_version: str, **kwargs: Any) -> None:
        kwargs.setdefault("provider", "azure")
        super().__init__(**kwargs)
        self._url = (
            f"{endpoint.rstrip('/')}/openai/deployments/{quote(self.model, safe='')}/embeddings"
            f"?api-version={quote(api_version, safe='')}"
        )
        self._headers = {"api-key": api_key}

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        # Azure picks the model from the URL; older API versions reject unknown body fields.
        body: dict[str, Any] = {"input": texts}
        if self._configured_dims is not None:
            body["dimensions"] = self._configured_dims
        return self._url, self._headers, body


class OllamaEmbedder(HttpEmbedder):
    """`POST {OLLAMA_BASE_URL}/api/embed` with a list input."""

    model_hint = "check EMBEDDINGS_MODEL (is the model pulled?)"
    auth_hint = "check OLLAMA_BASE_URL"
    url_hint = "check OLLAMA_BASE_URL"

    def __init__(self, *, base_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("provider", "ollama")
        super().__init__(**kwargs)
        self._url = base_url.rstrip("/") + "/api/embed"

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        return self._url, {}, {"model": self.model, "input": texts}

    def _parse(self, payload: Any, count: int) -> Any:
        rows = payload["embeddings"]
        if not isinstance(rows, list):
            raise _Unreadable
        return rows


class TEIEmbedder(HttpEmbedder):
    """Hugging Face text-embeddings-inference: `POST {url}/embed`; the URL is EMBEDDINGS_MODEL."""

    # TEI refuses client batches above its --max-client-batch-size, 32 by default.
    default_batch_size = 32
    model_hint = "check EMBEDDINGS_MODEL (the TEI URL)"
    auth_hint = "check HF_TOKEN"
    url_hint = "check EMBEDDINGS_MODEL (the TEI URL)"

    def __init__(self, *, url: str, token: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("provider", "huggingfacetei")
        kwargs.setdefault("model", url)
        super().__init__(**kwargs)
        self._url = url.rstrip("/") + "/embed"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        return self._url, self._headers, {"inputs": texts, "truncate": True}

    def _parse(self, payload: Any, count: int) -> Any:
        if not isinstance(payload, list):
            raise _Unreadable
        return payload
