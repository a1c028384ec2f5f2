"""`scripts/bench overhead`: the in-process measurement answers, and names its stages."""

from __future__ import annotations

from benchmarks import overhead


def test_every_row_is_answered_and_measured() -> None:
    # measure() raises on any status but 200: the canned search really answers each request
    figures = overhead.measure([1, 3], requests=5, k=2)
    assert list(figures) == ["/query_multiple 1", "/query_multiple 3", "/query 1"]
    assert all(row["p95"] >= row["p50"] > 0 for row in figures.values())


def test_the_stages_are_named_and_the_middleware_share_is_measured() -> None:
    names = [name for name, _ in overhead.stages(k=2)]
    assert "token: a repeat (TokenCache)" in names
    assert "k=2 answer: orjson.dumps" in names
    assert names[-1].startswith("1,000 ids: the same without the app's middleware (RequestContextMiddleware")
