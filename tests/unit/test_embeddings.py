"""Pure parts of the embedding clients: batching, Retry-After, the LRU, and provider selection."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from app.clients.embeddings import (
    AzureEmbedder,
    Embedder,
    LocalEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    QueryCache,
    TEIEmbedder,
    build_embedder,
    parse_retry_after,
    plan_batches,
)
from app.config import Settings, load_settings
from app.errors import ConfigError


def make_settings(**overrides: Any) -> Settings:
    """Settings from explicit values only (no .env file)."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


# --- plan_batches ---------------------------------------------------------------------------------


def test_batches_split_by_count() -> None:
    # 7 texts, at most 3 per batch: [0,3) [3,6) [6,7)
    assert plan_batches(["a"] * 7, 3, 1000) == [(0, 3), (3, 6), (6, 7)]


def test_batches_split_by_chars() -> None:
    # sizes 4,4,4,4 with max 10 chars: 4+4=8 fits, +4=12 does not -> [0,2) [2,4)
    assert plan_batches(["xxxx"] * 4, 100, 10) == [(0, 2), (2, 4)]


def test_an_oversized_text_gets_a_batch_of_its_own() -> None:
    # 3 + 50 > 10 closes the first batch; 50 alone exceeds the limit but must still be sent
    assert plan_batches(["abc", "x" * 50, "de"], 100, 10) == [(0, 1), (1, 2), (2, 3)]


def test_batches_of_nothing() -> None:
    assert plan_batches([], 5, 10) == []


def test_batches_need_positive_limits() -> None:
    with pytest.raises(ValueError):
        plan_batches(["a"], 0, 10)


# --- Retry-After ----------------------------------------------------------------------------------


def test_retry_after_in_seconds() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0


def test_retry_after_as_http_date() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    # 12:00:30 GMT is 30 s after `now`
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=now) == pytest.approx(30.0)
    # a date in the past means "now"
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0


def test_retry_after_garbage_is_ignored() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None


# --- the query LRU --------------------------------------------------------------------------------


def test_query_cache_evicts_least_recently_used() -> None:
    cache = QueryCache(2)
    a, b, c = (np.full(2, i, dtype=np.float32) for i in range(3))
    cache.put(("m", "a"), a)
    cache.put(("m", "b"), b)
    assert cache.get(("m", "a")) is a  # "a" is now the most recent, so "b" goes next
    cache.put(("m", "c"), c)
    assert cache.get(("m", "b")) is None
    assert cache.get(("m", "a")) is a and cache.get(("m", "c")) is c
    assert len(cache) == 2


def test_query_cache_of_size_zero_keeps_nothing() -> None:
    cache = QueryCache(0)
    cache.put(("m", "a"), np.zeros(2, dtype=np.float32))
    assert cache.get(("m", "a")) is None


# --- build_embedder -------------------------------------------------------------------------------


async def test_local_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a key alone selects openai, as in rag_api
    embedder = build_embedder(make_settings())
    try:
        assert isinstance(embedder, LocalEmbedder)
        assert isinstance(embedder, Embedder)
        assert (embedder.provider, embedder.model, embedder.dimensions) == ("local", "all-MiniLM-L6-v2", 384)
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(
    ("overrides", "cls", "provider", "model"),
    [
        ({"openai_api_key": "sk-test"}, OpenAIEmbedder, "openai", "text-embedding-3-small"),
        (
            {
                "embeddings_provider": "azure",
                "azure_endpoint": "https://x.example",
                "azure_api_key": "k",
                "embeddings_model": "my-deployment",
            },
            AzureEmbedder,
            "azure",
            "my-deployment",
        ),
        ({"embeddings_provider": "ollama"}, OllamaEmbedder, "ollama", "nomic-embed-text"),
        (
            {"embeddings_provider": "huggingfacetei"},
            TEIEmbedder,
            "huggingfacetei",
            "http://huggingfacetei:3000",
        ),
    ],
)
async def test_provider_selection(overrides: dict[str, object], cls: type, provider: str, model: str) -> None:
    embedder = build_embedder(make_settings(**overrides))
    try:
        assert type(embedder) is cls
        assert isinstance(embedder, Embedder)
        assert (embedder.provider, embedder.model, embedder.dimensions) == (provider, model, None)
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"embeddings_provider": "local", "embeddings_model": "text-embedding-3-large"}, "EMBEDDINGS_MODEL"),
        ({"embeddings_dimensions": 512}, "384"),
        ({"embeddings_provider": "huggingfacetei", "embeddings_model": "bge-small"}, "TEI server URL"),
    ],
)
def test_settings_refuse_what_no_embedder_can_run(overrides: dict[str, object], needle: str) -> None:
    # cross-field checks live in Settings: the service stops at start-up, before any embedder exists
    with pytest.raises(ConfigError, match=needle):
        load_settings(_env_file=None, **overrides)


def test_local_embedder_checks_its_own_arguments() -> None:
    with pytest.raises(ConfigError, match="EMBEDDINGS_MODEL"):
        LocalEmbedder(model="text-embedding-3-large")
    with pytest.raises(ConfigError, match="384"):
        LocalEmbedder(dimensions=512)
