"""The per-client token buckets: a minute's budget at once, refilled per minute, per client and limit."""

from __future__ import annotations

import pytest

from app.metrics import parse_server_timing
from app.ratelimit import IDLE_FORGET_S, RateLimiter, per_process_budgets


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_whole_minute_of_requests_may_come_at_once_then_they_refill() -> None:
    clock = Clock()
    limiter = RateLimiter({"search": 60}, clock=clock)
    assert all(limiter.check("search", "user:a") == 0.0 for _ in range(60))  # a LibreChat fan-out
    wait = limiter.check("search", "user:a")
    assert wait == pytest.approx(1.0)  # 60 per minute: one more each second
    clock.now += 0.5
    assert limiter.check("search", "user:a") == pytest.approx(0.5)  # a refusal takes nothing
    clock.now += 0.5
    assert limiter.check("search", "user:a") == 0.0
    assert limiter.check("search", "user:a") > 0


def test_clients_and_limits_are_counted_apart() -> None:
    clock = Clock()
    limiter = RateLimiter({"search": 2, "embed": 1}, clock=clock)
    assert limiter.check("search", "user:a") == 0.0
    assert limiter.check("search", "user:a") == 0.0
    assert limiter.check("search", "user:a") == pytest.approx(30.0)
    assert limiter.check("search", "user:b") == 0.0
    assert limiter.check("embed", "user:a") == 0.0
    assert limiter.check("embed", "user:a") == pytest.approx(60.0)


def test_zero_means_no_limit_and_unknown_limits_are_free() -> None:
    limiter = RateLimiter({"search": 0})
    assert all(limiter.check("search", "user:a") == 0.0 for _ in range(10_000))
    assert limiter.check("reindex", "user:a") == 0.0
    assert len(limiter) == 0


def test_idle_buckets_are_forgotten() -> None:
    clock = Clock()
    limiter = RateLimiter({"search": 5}, clock=clock)
    for i in range(500):
        limiter.check("search", f"addr:10.0.0.{i}")
    assert len(limiter) == 500
    clock.now += IDLE_FORGET_S + 1
    for _ in range(1024):  # the sweep runs every 1,024 calls
        limiter.check("search", "user:busy")
    assert len(limiter) == 1


def test_server_timing_parsing() -> None:
    assert parse_server_timing('embed;dur=1.50, db;dur=2.25;desc="exact"') == [
        ("embed", 0.0015),
        ("db", 0.00225),
    ]
    assert parse_server_timing("total;dur=x, ;dur=1, cache") == []


def test_each_of_several_workers_holds_its_share_of_a_budget_rounded_up() -> None:
    # RAG_WORKERS=2: 10/2 = 5 each; 0 stays off; 7/2 = 3.5 -> 4 (a limit of 1 never becomes 0)
    budgets = {"reindex": 10, "search": 0, "embed": 7, "mcp": 1}
    assert per_process_budgets(budgets, 2) == {"reindex": 5, "search": 0, "embed": 4, "mcp": 1}
    assert per_process_budgets(budgets, 1) == budgets
    assert per_process_budgets(budgets, "auto") == budgets  # auto runs as one process, else a number
