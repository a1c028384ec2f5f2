"""HTTP embedding providers against a fake provider that speaks their wire protocols, in-process.

The fake answers through `httpx.MockTransport` (no socket); the same fake on a real socket, with
real timeouts, a proxy and an unreachable port, is in tests/integration/test_embeddings_http_wire.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest

from app.clients.embeddings import (
    AzureEmbedder,
    HttpEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    TEIEmbedder,
    base,
    build_embedder,
)
from app.clients.http import build_http_client
from app.config import Settings
from app.errors import EmbeddingProviderError
from tests.fixtures.fake_providers import (
    LEAKY_ERROR_MESSAGE,
    FakeProvider,
    RecordedRequest,
    Reply,
)
from tests.fixtures.patience import ceiling, out_of_time

DIMS = 8
FAST: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.02}


def make_settings(**overrides: Any) -> Settings:
    """Settings from explicit values only (no .env file)."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.fixture
def provider(mock_provider: FakeProvider) -> FakeProvider:
    """The fake provider, answered in-process."""
    return mock_provider


@pytest.fixture
async def shared_client(provider: FakeProvider) -> AsyncIterator[httpx.AsyncClient]:
    """The service's shared client (as main.py builds it), sending to the fake in-process."""
    async with build_http_client(timeout_s=60.0, transport=provider.transport()) as client:
        yield client


def openai(fake: FakeProvider, **kwargs: Any) -> OpenAIEmbedder:
    """An OpenAI-compatible embedder aimed at the fake, with fast backoff."""
    options: dict[str, Any] = {
        "model": "text-embedding-3-small",
        "base_url": fake.url + "/v1",
        "api_key": "sk-test",
        "transport": fake.transport(),
        **FAST,
    }
    options.update(kwargs)
    return OpenAIEmbedder(**options)


def expected(texts: list[str], dims: int = DIMS) -> np.ndarray:
    return np.asarray([FakeProvider.vector_for(t, dims) for t in texts], dtype=np.float32)


def assert_safe(error: EmbeddingProviderError, *secrets: str) -> None:
    """Our detail only: no provider body, no input text."""
    for secret in (LEAKY_ERROR_MESSAGE, "sk-LEAKED", *secrets):
        assert secret not in error.detail


# --- wire protocols -------------------------------------------------------------------------------


async def test_openai_request_and_reply(provider: FakeProvider, shared_client: httpx.AsyncClient) -> None:
    settings = make_settings(openai_api_key="sk-test", openai_base_url=provider.url + "/v1/")
    embedder = build_embedder(settings, http_client=shared_client)
    try:
        texts = ["alpha", "beta", "gamma"]
        vectors = await embedder.embed_documents(texts)
    finally:
        await embedder.aclose()
    # the fake answers in reverse index order: the client must restore input order
    np.testing.assert_array_equal(vectors, expected(texts))
    assert vectors.dtype == np.float32 and vectors.shape == (3, DIMS)
    [request] = provider.requests
    assert (request.method, request.path) == ("POST", "/v1/embeddings")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json == {"model": "text-embedding-3-small", "input": texts, "encoding_format": "float"}
    assert embedder.dimensions == DIMS  # learned from the reply


async def test_openai_sends_dimensions_only_when_configured(
    provider: FakeProvider, shared_client: httpx.AsyncClient
) -> None:
    settings = make_settings(
        openai_api_key="sk-test", openai_base_url=provider.url + "/v1", embeddings_dimensions=DIMS
    )
    embedder = build_embedder(settings, http_client=shared_client)
    try:
        await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert provider.requests[0].json["dimensions"] == DIMS


async def test_openai_without_key_sends_no_authorization(
    provider: FakeProvider, shared_client: httpx.AsyncClient
) -> None:
    embedder = build_embedder(
        make_settings(embeddings_provider="openai", openai_base_url=provider.url + "/v1"),
        http_client=shared_client,
    )
    try:
        await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert "authorization" not in provider.requests[0].headers


async def test_openai_reply_may_carry_base64_vectors(provider: FakeProvider) -> None:
    import base64

    vector = np.arange(4, dtype="<f4")
    provider.script(
        Reply(json={"data": [{"index": 0, "embedding": base64.b64encode(vector.tobytes()).decode()}]})
    )
    embedder = openai(provider)
    try:
        np.testing.assert_array_equal(await embedder.embed_documents(["x"]), vector[None, :])
    finally:
        await embedder.aclose()


async def test_azure_request(provider: FakeProvider, shared_client: httpx.AsyncClient) -> None:
    settings = make_settings(
        embeddings_provider="azure",
        azure_endpoint=provider.url + "/",
        azure_api_key="azure-key",
        embeddings_model="my-deployment",
        azure_api_version="2024-10-21",
    )
    embedder = build_embedder(settings, http_client=shared_client)
    try:
        vectors = await embedder.embed_documents(["one", "two"])
    finally:
        await embedder.aclose()
    np.testing.assert_array_equal(vectors, expected(["one", "two"]))
    [request] = provider.requests
    assert request.path == "/openai/deployments/my-deployment/embeddings"
    assert request.query == "api-version=2024-10-21"
    assert request.headers["api-key"] == "azure-key"
    assert "authorization" not in request.headers
    assert request.json == {"input": ["one", "two"]}


async def test_ollama_request(provider: FakeProvider, shared_client: httpx.AsyncClient) -> None:
    embedder = build_embedder(
        make_settings(
            embeddings_provider="ollama",
            ollama_base_url=provider.url,
            embeddings_model="nomic-embed-text",
        ),
        http_client=shared_client,
    )
    try:
        vectors = await embedder.embed_documents(["one", "two"])
    finally:
        await embedder.aclose()
    np.testing.assert_array_equal(vectors, expected(["one", "two"]))
    [request] = provider.requests
    assert request.path == "/api/embed"
    assert request.json == {"model": "nomic-embed-text", "input": ["one", "two"]}


async def test_tei_request(provider: FakeProvider, shared_client: httpx.AsyncClient) -> None:
    # rag_api passes the TEI URL as EMBEDDINGS_MODEL
    embedder = build_embedder(
        make_settings(
            embeddings_provider="huggingfacetei", embeddings_model=provider.url, hf_token="hf-token"
        ),
        http_client=shared_client,
    )
    try:
        vectors = await embedder.embed_documents(["one", "two"])
    finally:
        await embedder.aclose()
    np.testing.assert_array_equal(vectors, expected(["one", "two"]))
    [request] = provider.requests
    assert request.path == "/embed"
    assert request.headers["authorization"] == "Bearer hf-token"
    assert request.json == {"inputs": ["one", "two"], "truncate": True}


async def test_empty_strings_are_sent_as_a_space(provider: FakeProvider) -> None:
    # OpenAI and TEI answer 400 to an empty string input
    embedder = openai(provider)
    try:
        vectors = await embedder.embed_documents(["", "x"])
    finally:
        await embedder.aclose()
    assert provider.requests[0].json["input"] == [" ", "x"]
    assert vectors.shape == (2, DIMS)


# --- empty input, dimensions, malformed replies ---------------------------------------------------


async def test_empty_list_makes_no_request(provider: FakeProvider) -> None:
    embedder = openai(provider)
    configured = openai(provider, dimensions=DIMS)
    try:
        assert (await embedder.embed_documents([])).shape == (0, 0)
        assert (await configured.embed_documents([])).shape == (0, DIMS)
    finally:
        await embedder.aclose()
        await configured.aclose()
    assert provider.requests == []


async def test_wrong_dimension_against_the_setting(provider: FakeProvider) -> None:
    provider.script(Reply(dims=4))
    embedder = openai(provider, dimensions=DIMS)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is False
    assert "4" in caught.value.detail and "8" in caught.value.detail
    assert "EMBEDDINGS_DIMENSIONS" in caught.value.detail


async def test_wrong_dimension_against_the_stored_one_does_not_stick(provider: FakeProvider) -> None:
    """The stored vectors decide before any reply: a wrong reply is refused, the next right one is not."""

    async def stored() -> int | None:
        return DIMS

    embedder = openai(provider)
    embedder.use_stored_dimensions(stored)
    try:
        provider.script(Reply(dims=6))
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["first after a restart"])
        assert (await embedder.embed_documents(["y"])).shape == (1, DIMS)
        provider.script(Reply(dims=6))
        with pytest.raises(EmbeddingProviderError):
            await embedder.embed_query("z")
        assert (await embedder.embed_query("z")).shape == (DIMS,)
    finally:
        await embedder.aclose()
    assert caught.value.retryable is False
    assert "6" in caught.value.detail and "8" in caught.value.detail
    assert "already stored" in caught.value.detail


async def test_nothing_stored_is_remembered_and_a_stored_file_decides(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer "nothing stored" is read once, not per call; a file stored here then decides."""
    lookups = 0

    async def source() -> int | None:
        nonlocal lookups
        lookups += 1
        return None

    clock = [1000.0]
    monkeypatch.setattr(base, "_clock", lambda: clock[0])
    embedder = openai(provider)
    embedder.use_stored_dimensions(source)
    try:
        provider.script(Reply(dims=6))
        assert (await embedder.embed_documents(["nothing stored yet"])).shape == (1, 6)
        for i in range(5):
            assert (await embedder.embed_query(f"query {i}")).shape == (DIMS,)
        assert lookups == 1  # the answer "nothing stored" is kept
        embedder.note_stored_dimension(DIMS)  # an upload of this process committed 8-d vectors
        provider.script(Reply(dims=6))
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["now judged"])
        assert "already stored" in caught.value.detail
        assert lookups == 1
    finally:
        await embedder.aclose()


async def test_nothing_stored_is_asked_again_only_after_the_recheck_interval(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica may store the first file: "nothing stored" is asked again, rarely."""
    stored: list[int] = []
    lookups = 0

    async def source() -> int | None:
        nonlocal lookups
        lookups += 1
        return stored[0] if stored else None

    clock = [1000.0]
    monkeypatch.setattr(base, "_clock", lambda: clock[0])
    embedder = openai(provider)
    embedder.use_stored_dimensions(source, None, looked_up=True)  # what start-up does
    try:
        await embedder.embed_query("a")
        assert lookups == 0  # start-up's answer holds
        stored.append(DIMS)  # another replica stored a file
        clock[0] += base.DIMENSION_UNKNOWN_RECHECK_S - 1
        await embedder.embed_query("b")
        assert lookups == 0
        clock[0] += 2
        await embedder.embed_query("c")
        assert lookups == 1 and embedder.trusted_dimensions == DIMS
        clock[0] += 10 * base.DIMENSION_UNKNOWN_RECHECK_S
        await embedder.embed_query("d")
        assert lookups == 1  # known: never asked again
    finally:
        await embedder.aclose()


async def test_batches_of_different_dimensions_in_one_call_are_refused(provider: FakeProvider) -> None:
    provider.script(Reply(dims=6))
    embedder = openai(provider, batch_size=1, concurrency=1)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["a", "b"])
    finally:
        await embedder.aclose()
    assert "different dimensions" in caught.value.detail


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"{not json"),
        Reply(json={"data": "nope"}),
        Reply(json={"data": [{"index": 0, "embedding": ["a", "b"]}]}),
        Reply(json={"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 0, "embedding": [1.0, 2.0]}]}),
        Reply(json={"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [1.0]}]}),
        Reply(json={"unexpected": True}),
    ],
    ids=["not-json", "data-not-list", "strings", "repeated-index", "ragged", "wrong-shape"],
)
async def test_unreadable_replies(provider: FakeProvider, reply: Reply) -> None:
    provider.script(reply)
    embedder = openai(provider)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["a", "b"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is False
    assert len(provider.requests) == 1  # a 2xx is never retried


async def test_fewer_vectors_than_texts(provider: FakeProvider) -> None:
    provider.script(Reply(json={"embeddings": [[1.0, 2.0]]}))
    embedder = OllamaEmbedder(model="m", base_url=provider.url, transport=provider.transport(), **FAST)
    try:
        with pytest.raises(EmbeddingProviderError, match="1 vectors for 2 texts"):
            await embedder.embed_documents(["a", "b"])
    finally:
        await embedder.aclose()


async def test_non_finite_values(provider: FakeProvider) -> None:
    # Python's json module accepts NaN, so a broken provider can deliver one
    provider.script(Reply(body=b'{"embeddings": [[NaN, 1.0]]}'))
    embedder = OllamaEmbedder(model="m", base_url=provider.url, transport=provider.transport(), **FAST)
    try:
        with pytest.raises(EmbeddingProviderError, match="non-finite") as caught:
            await embedder.embed_documents(["a"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is False


# --- retries --------------------------------------------------------------------------------------


async def test_retry_after_is_honoured(provider: FakeProvider) -> None:
    provider.script(Reply(status=429, headers={"Retry-After": "0.4"}))
    embedder = openai(provider)
    try:
        started = time.monotonic()
        vectors = await embedder.embed_documents(["x"])
        elapsed = time.monotonic() - started
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2
    assert elapsed >= 0.39  # the header, not the 10 ms backoff, set the wait
    np.testing.assert_array_equal(vectors, expected(["x"]))


async def test_retry_after_is_capped(provider: FakeProvider) -> None:
    provider.script(Reply(status=503, headers={"Retry-After": "3600"}))
    embedder = openai(provider, retry_after_max_s=0.05)
    try:
        started = time.monotonic()
        await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    took = time.monotonic() - started  # not the hour Retry-After asked for
    assert took < ceiling(2), out_of_time("the retry after RETRY_AFTER_MAX_S (0.05 s)", took)
    assert len(provider.requests) == 2


async def test_retries_stop_at_the_maximum(provider: FakeProvider) -> None:
    provider.script(*[Reply(status=503) for _ in range(10)])
    embedder = openai(provider, max_retries=2)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["private text"])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 3  # the first try and two retries
    assert caught.value.retryable is True and caught.value.status_code == 503
    assert "HTTP 503" in caught.value.detail
    assert_safe(caught.value, "private text")


@pytest.mark.parametrize("status", [408, 429, 500, 502, 504])
async def test_retryable_statuses(provider: FakeProvider, status: int) -> None:
    provider.script(Reply(status=status))
    embedder = openai(provider)
    try:
        await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2


async def test_bad_request_is_not_retried(provider: FakeProvider) -> None:
    provider.script(Reply(status=400))
    embedder = openai(provider)
    try:
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["private text"])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 1
    assert caught.value.retryable is False and caught.value.status_code == 502
    assert caught.value.detail.startswith("The embedding provider rejected the request (HTTP 400)")
    assert "EMBEDDINGS_MODEL" in caught.value.detail
    assert_safe(caught.value, "private text")


async def test_bad_credentials_name_the_key_setting(provider: FakeProvider) -> None:
    provider.script(Reply(status=401))
    embedder = openai(provider)
    try:
        with pytest.raises(EmbeddingProviderError, match="RAG_OPENAI_API_KEY") as caught:
            await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert caught.value.retryable is False and len(provider.requests) == 1


async def test_timeout_is_a_retryable_error(provider: FakeProvider) -> None:
    provider.script(Reply(delay=600.0))  # never answers while the test runs
    embedder = openai(provider, timeout_s=0.2, max_retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    took = time.monotonic() - started
    assert took < ceiling(1.5), out_of_time("the 0.2 s timeout", took)
    assert caught.value.retryable is True
    assert caught.value.detail == "The embedding provider did not answer within 0.2 s"


async def test_timeout_then_success(provider: FakeProvider) -> None:
    provider.script(Reply(delay=2.0))
    embedder = openai(provider, timeout_s=0.2, max_retries=1)
    try:
        vectors = await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    np.testing.assert_array_equal(vectors, expected(["x"]))


async def test_dropped_connection_is_retried(provider: FakeProvider) -> None:
    provider.script(Reply(close=True))
    embedder = openai(provider)
    try:
        vectors = await embedder.embed_documents(["x"])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2
    np.testing.assert_array_equal(vectors, expected(["x"]))


# --- batching and concurrency ---------------------------------------------------------------------


async def test_batches_by_count_in_order(provider: FakeProvider) -> None:
    texts = [f"text {i}" for i in range(10)]
    embedder = openai(provider, batch_size=3)
    try:
        vectors = await embedder.embed_documents(texts)
    finally:
        await embedder.aclose()
    assert sorted(len(provider.texts_of(r)) for r in provider.requests) == [1, 3, 3, 3]
    np.testing.assert_array_equal(vectors, expected(texts))


async def test_batches_by_characters_in_order(provider: FakeProvider) -> None:
    # 5 texts of 400 characters, 1,000 per batch: 400+400 fits, a third would not -> 2, 2, 1
    texts = [f"{i}" * 400 for i in range(5)]
    embedder = openai(provider, batch_max_chars=1000)
    try:
        vectors = await embedder.embed_documents(texts)
    finally:
        await embedder.aclose()
    assert sorted(len(provider.texts_of(r)) for r in provider.requests) == [1, 2, 2]
    np.testing.assert_array_equal(vectors, expected(texts))


async def test_batches_complete_out_of_order(provider: FakeProvider) -> None:
    # the first batch answers last: results must still come back in input order
    def slow_first(request: RecordedRequest) -> Reply:
        return Reply(delay=0.3 if "t0" in provider.texts_of(request) else 0.0)

    provider.handler = slow_first
    texts = [f"t{i}" for i in range(6)]
    embedder = openai(provider, batch_size=2)
    try:
        vectors = await embedder.embed_documents(texts)
    finally:
        await embedder.aclose()
    np.testing.assert_array_equal(vectors, expected(texts))


async def test_batches_of_different_dimensions_fail_the_call(provider: FakeProvider) -> None:
    # the batch holding "t3" answers with 5 dimensions, the others with 8: never a mixed matrix
    provider.handler = lambda request: Reply(dims=5) if "t3" in provider.texts_of(request) else None
    embedder = openai(provider, batch_size=2, concurrency=1)
    try:
        with pytest.raises(EmbeddingProviderError, match="different dimensions within one request"):
            await embedder.embed_documents([f"t{i}" for i in range(6)])
    finally:
        await embedder.aclose()


async def test_concurrency_is_bounded(provider: FakeProvider) -> None:
    provider.delay = 0.1
    embedder = openai(provider, batch_size=1, concurrency=2)
    try:
        await embedder.embed_documents([f"t{i}" for i in range(8)])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 8
    assert provider.max_in_flight == 2


async def test_one_failing_batch_fails_the_call(provider: FakeProvider) -> None:
    provider.script(Reply(status=400))
    embedder = openai(provider, batch_size=1, concurrency=1)
    try:
        with pytest.raises(EmbeddingProviderError):
            await embedder.embed_documents(["a", "b", "c"])
    finally:
        await embedder.aclose()


async def test_query_does_not_wait_behind_an_ingest(provider: FakeProvider) -> None:
    def slow_batches(request: RecordedRequest) -> Reply:
        return Reply(delay=60.0 if len(provider.texts_of(request)) > 1 else 0.0)  # batches hang

    provider.handler = slow_batches
    embedder = openai(provider, batch_size=2, concurrency=1)
    try:
        ingest = asyncio.create_task(embedder.embed_documents([f"d{i}" for i in range(8)]))  # 4 x 60 s
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await embedder.embed_query("question")
        took = time.monotonic() - started
        assert took < ceiling(0.25), out_of_time("the query beside a hanging ingest batch", took)
        assert not ingest.done()
        ingest.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ingest
    finally:
        await embedder.aclose()


# --- the query cache ------------------------------------------------------------------------------


async def test_cache_hit_makes_no_request(provider: FakeProvider) -> None:
    embedder = openai(provider)
    try:
        first = await embedder.embed_query("what is the refund policy?")
        second = await embedder.embed_query("what is the refund policy?")
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 1
    assert first.shape == (DIMS,) and first.dtype == np.float32
    np.testing.assert_array_equal(first, second)
    assert not second.flags.writeable  # a caller cannot corrupt the cached vector


async def test_cache_is_keyed_by_exact_text(provider: FakeProvider) -> None:
    embedder = openai(provider)
    try:
        await embedder.embed_query("Refund")
        await embedder.embed_query("refund")
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2


async def test_concurrent_identical_misses_share_one_request(provider: FakeProvider) -> None:
    provider.delay = 0.2
    embedder = openai(provider)
    try:
        results = await asyncio.gather(*[embedder.embed_query("same") for _ in range(5)])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 1
    for vector in results:
        np.testing.assert_array_equal(vector, results[0])


async def test_a_cancelled_waiter_does_not_cancel_the_others(provider: FakeProvider) -> None:
    provider.delay = 0.2
    embedder = openai(provider)
    try:
        first = asyncio.create_task(embedder.embed_query("same"))
        second = asyncio.create_task(embedder.embed_query("same"))
        await asyncio.sleep(0.05)
        first.cancel()
        vector = await second
        assert vector.shape == (DIMS,)
        assert first.cancelled()
        await embedder.embed_query("same")  # cached by then
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 1


async def test_a_failed_query_is_not_cached(provider: FakeProvider) -> None:
    provider.script(Reply(status=400))
    embedder = openai(provider)
    try:
        with pytest.raises(EmbeddingProviderError):
            await embedder.embed_query("q")
        assert (await embedder.embed_query("q")).shape == (DIMS,)
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2


# --- the shared client ----------------------------------------------------------------------------


async def test_a_passed_client_is_used_and_left_open(provider: FakeProvider) -> None:
    async with httpx.AsyncClient(transport=provider.transport()) as client:
        embedder = build_embedder(
            make_settings(openai_api_key="sk-test", openai_base_url=provider.url + "/v1"),
            http_client=client,
        )
        assert isinstance(embedder, HttpEmbedder)
        await embedder.embed_documents(["x"])
        await embedder.aclose()
        assert not client.is_closed
        response = await client.get(provider.url + "/anything")
        assert response.status_code == 404


async def test_an_owned_client_is_closed(provider: FakeProvider) -> None:
    embedder = openai(provider)
    await embedder.embed_documents(["x"])
    await embedder.aclose()
    assert embedder._client.is_closed


@pytest.mark.parametrize("cls", [AzureEmbedder, OllamaEmbedder, TEIEmbedder])
async def test_every_provider_retries(provider: FakeProvider, cls: type[HttpEmbedder]) -> None:
    provider.script(Reply(status=503))
    if cls is AzureEmbedder:
        embedder: HttpEmbedder = AzureEmbedder(
            model="d",
            endpoint=provider.url,
            api_key="k",
            api_version="2024-10-21",
            transport=provider.transport(),
            **FAST,
        )
    elif cls is OllamaEmbedder:
        embedder = OllamaEmbedder(model="m", base_url=provider.url, transport=provider.transport(), **FAST)
    else:
        embedder = TEIEmbedder(url=provider.url, transport=provider.transport(), **FAST)
    try:
        vectors = await embedder.embed_documents(["x", "y"])
    finally:
        await embedder.aclose()
    assert len(provider.requests) == 2
    np.testing.assert_array_equal(vectors, expected(["x", "y"]))


async def test_each_finished_batch_is_reported_to_the_caller(provider: FakeProvider) -> None:
    """An ingest's progress: the texts of each batch as it comes back, out of the call's texts."""
    embedder = openai(provider, batch_size=3, concurrency=2)
    seen: list[tuple[int, int]] = []
    texts = [f"text {i}" for i in range(8)]
    try:
        with base.reporting_batches(lambda count, of: seen.append((count, of))):
            await embedder.embed_documents(texts)
        await embedder.embed_documents(["outside the block"])  # nobody asked: nothing reported
    finally:
        await embedder.aclose()
    # batches of 3, 3 and 2 texts, in whatever order they finish
    assert sorted(seen) == [(2, 8), (3, 8), (3, 8)]
