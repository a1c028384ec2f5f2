"""HTTP embedders against the fake provider on a real socket: what only a socket can show.

A request and reply on the wire, a timeout enforced by httpx's own clock, a connection the server
drops, a proxy, and a port nobody listens on. The retry and protocol logic itself is covered
in-process by tests/unit/test_embeddings_http.py.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import numpy as np
import pytest

from app.clients.embeddings import OpenAIEmbedder, build_embedder
from app.config import Settings
from app.errors import EmbeddingProviderError
from tests.fixtures.fake_providers import FakeProvider, Reply
from tests.fixtures.patience import ceiling, out_of_time

FAST: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.02}


def make_settings(**overrides: Any) -> Settings:
    """Settings from explicit values only (no .env file)."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


def openai(fake: FakeProvider, **kwargs: Any) -> OpenAIEmbedder:
    """An OpenAI-compatible embedder aimed at the fake's socket, with fast backoff."""
    return OpenAIEmbedder(
        model="text-embedding-3-small", base_url=fake.url + "/v1", api_key="sk-test", **FAST, **kwargs
    )


async def test_request_and_reply_on_the_wire(fake_provider: FakeProvider) -> None:
    settings = make_settings(openai_api_key="sk-test", openai_base_url=fake_provider.url + "/v1/")
    embedder = build_embedder(settings)  # owns a client on the real network stack
    try:
        vectors = await embedder.embed_documents(["alpha", "beta"])
    finally:
        await embedder.aclose()
    expected = [FakeProvider.vector_for(t) for t in ("alpha", "beta")]
    np.testing.assert_array_equal(vectors, np.asarray(expected, dtype=np.float32))
    [request] = fake_provider.requests
    assert (request.method, request.path) == ("POST", "/v1/embeddings")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"


async def test_a_real_timeout_is_retried(fake_provider: FakeProvider) -> None:
    fake_provider.script(Reply(delay=600.0))  # never answers while the test runs
    embedder = openai(fake_provider, timeout_s=0.2, max_retries=1)
    try:
        started = time.monotonic()
        vectors = await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    took = time.monotonic() - started
    assert took < ceiling(1.5), out_of_time("httpx to give up on the slow reply after 0.2 s", took)
    assert len(fake_provider.requests) == 2 and vectors.shape == (1, 8)


async def test_a_real_timeout_without_retries(fake_provider: FakeProvider) -> None:
    fake_provider.script(Reply(delay=2.0))
    embedder = openai(fake_provider, timeout_s=0.2, max_retries=0)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is True
    assert caught.value.detail == "The embedding provider did not answer within 0.2 s"


async def test_a_dropped_connection_is_retried(fake_provider: FakeProvider) -> None:
    fake_provider.script(Reply(close=True))
    embedder = openai(fake_provider)
    try:
        vectors = await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert len(fake_provider.requests) == 2 and vectors.shape == (1, 8)


async def test_proxy_setting_routes_openai_through_the_proxy(fake_provider: FakeProvider) -> None:
    # the fake acts as the HTTP proxy; the provider host never resolves, so nothing leaves the machine
    settings = make_settings(
        openai_api_key="sk-test",
        openai_base_url="http://embeddings.invalid/v1",
        openai_proxy=fake_provider.url,
    )
    embedder = build_embedder(settings)
    try:
        await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    [request] = fake_provider.requests
    assert request.headers["host"] == "embeddings.invalid"
    assert request.path == "/v1/embeddings"


async def test_unreachable_provider() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, **FAST)
    try:
        with pytest.raises(EmbeddingProviderError, match="RAG_OPENAI_BASEURL") as caught:
            await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is True
    assert caught.value.detail.endswith("gave up after 2 attempts")
