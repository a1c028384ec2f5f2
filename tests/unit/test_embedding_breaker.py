"""The embedding provider's circuit breaker: fail fast once it keeps failing, one trial after a pause."""

from __future__ import annotations

from typing import Any

import pytest

from app.clients.embeddings import OpenAIEmbedder
from app.clients.embeddings.breaker import CircuitBreaker
from app.errors import EmbeddingProviderError
from tests.fixtures.fake_providers import FakeProvider, Reply


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_then_lets_one_trial_through() -> None:
    clock = Clock()
    breaker = CircuitBreaker(3, 10.0, clock=clock)
    for _ in range(2):
        breaker.before_attempt()
        assert breaker.failure() is False
    breaker.before_attempt()
    assert breaker.failure() is True and breaker.is_open
    with pytest.raises(EmbeddingProviderError) as caught:
        breaker.before_attempt()
    assert caught.value.status_code == 503 and "EMBEDDING_BREAKER_RESET_S" in caught.value.detail
    clock.now += 10.0
    breaker.before_attempt()  # the trial
    with pytest.raises(EmbeddingProviderError):
        breaker.before_attempt()  # everyone else still fails fast while it runs
    breaker.success()
    assert not breaker.is_open
    breaker.before_attempt()


def test_a_failed_trial_opens_it_again_and_a_success_resets_the_count() -> None:
    clock = Clock()
    breaker = CircuitBreaker(2, 5.0, clock=clock)
    breaker.failure()
    breaker.success()
    breaker.failure()
    assert not breaker.is_open  # not two in a row
    breaker.failure()
    assert breaker.is_open
    clock.now += 5.0
    breaker.before_attempt()
    assert breaker.failure() is True
    with pytest.raises(EmbeddingProviderError):
        breaker.before_attempt()
    assert breaker.opened == 2


def test_zero_turns_it_off() -> None:
    breaker = CircuitBreaker(0, 5.0)
    for _ in range(100):
        assert breaker.failure() is False  # never (re)opens ...
        breaker.before_attempt()  # ... so every attempt goes ahead
    assert breaker.opened == 0 and not breaker.is_open


async def test_a_failing_provider_is_not_called_while_the_breaker_is_open(
    mock_provider: FakeProvider,
) -> None:
    options: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.02}
    embedder = OpenAIEmbedder(
        model="m",
        base_url=mock_provider.url + "/v1",
        api_key="sk-test",
        transport=mock_provider.transport(),
        max_retries=1,
        breaker_failures=4,
        breaker_reset_s=60.0,
        **options,
    )
    mock_provider.script(*[Reply(status=500)] * 10)
    try:
        for _ in range(2):  # two calls of two attempts each: four failures in a row
            with pytest.raises(EmbeddingProviderError):
                await embedder.embed_documents(["x"])
        sent = len(mock_provider.requests)
        assert sent == 4
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_query("y")
        assert len(mock_provider.requests) == sent  # failed at once, nothing sent
        assert caught.value.status_code == 503 and "in a row" in caught.value.detail
    finally:
        await embedder.aclose()
