"""The shared retry policy (tenacity): attempts, backoff bounds, Retry-After, what is retried."""

from __future__ import annotations

import logging

import pytest

from app.clients.retry import RetryPolicy, Transient

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.002, retry_after_max_s=0.05)


def test_backoff_doubles_up_to_the_ceiling_with_jitter() -> None:
    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=8.0)
    # ceilings: 0.5, 1, 2, 4, 8, 8; each wait lies in [ceiling/2, ceiling]
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0)]:
        waits = [policy.backoff(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), attempt
        assert len(set(waits)) > 1  # jittered


async def test_transient_failures_are_retried_until_success(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Transient("HTTP 503", detail="unavailable")
        return "ok"

    with caplog.at_level(logging.WARNING):
        assert await FAST.call(flaky, what="Test call", log=logging.getLogger("test")) == "ok"
    assert len(calls) == 3
    # only this test's logger: a session-wide app may log from its background tasks meanwhile
    messages = [r.getMessage() for r in caplog.records if r.name == "test"]
    assert messages[0].startswith("Test call failed (HTTP 503); retry 1 of 3 in ")
    assert messages[1].startswith("Test call failed (HTTP 503); retry 2 of 3 in ")


async def test_the_last_transient_failure_propagates() -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise Transient(f"attempt {len(calls)}")

    with pytest.raises(Transient, match="attempt 4"):
        await FAST.call(down, what="Test call", log=logging.getLogger("test"))
    assert len(calls) == FAST.attempts == 4


async def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    async def broken() -> None:
        calls.append(1)
        raise ValueError("final")

    with pytest.raises(ValueError, match="final"):
        await FAST.call(broken, what="Test call", log=logging.getLogger("test"))
    assert calls == [1]


async def test_retry_after_sets_the_wait_and_is_capped(caplog: pytest.LogCaptureFixture) -> None:
    replies = [Transient("HTTP 429", retry_after_s=0.03), Transient("HTTP 503", retry_after_s=3600.0)]

    async def limited() -> str:
        if replies:
            raise replies.pop(0)
        return "ok"

    with caplog.at_level(logging.WARNING):
        await FAST.call(limited, what="Test call", log=logging.getLogger("test"))
    waits = [r.getMessage().rsplit(" in ", 1)[1] for r in caplog.records]
    assert waits == ["0.03 s", "0.05 s"]  # the server's 0.03 s; 3600 s capped at retry_after_max_s


def test_the_blocking_twin() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Transient("timeout")
        return "ok"

    assert FAST.retrying(what="Script call", log=logging.getLogger("test"))(flaky) == "ok"
    assert len(calls) == 2


async def test_no_retries_means_one_attempt() -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise Transient("timeout")

    with pytest.raises(Transient):
        await RetryPolicy(max_retries=0).call(down, what="x", log=logging.getLogger("test"))
    assert calls == [1]
