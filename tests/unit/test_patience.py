"""The tests' time limits: written for an idle machine, stretched by its load, failing as time."""

from __future__ import annotations

import os

import pytest

from tests.fixtures import patience


@pytest.fixture
def cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patience, "_cpus", lambda: 2)
    monkeypatch.delenv("RAGOVERLAY_TEST_SLOWNESS", raising=False)


@pytest.mark.parametrize(("load", "factor"), [(0.3, 1.0), (2.0, 1.0), (10.0, 5.0), (18.0, 9.0), (80.0, 10.0)])
def test_limits_stretch_with_the_load_per_cpu(
    cpus: None, monkeypatch: pytest.MonkeyPatch, load: float, factor: float
) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert patience.slowness() == factor
    assert patience.ceiling(60) == 60 * factor


def test_the_environment_stretches_them_more(cpus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (10.0, 0.0, 0.0))
    monkeypatch.setenv("RAGOVERLAY_TEST_SLOWNESS", "3")
    assert patience.ceiling(10) == 150


def test_a_wait_returns_what_it_waited_for(cpus: None) -> None:
    calls = iter([None, 0, "ready"])
    assert patience.wait_until(lambda: next(calls), what="x", within_s=5, every_s=0) == "ready"


def test_a_wait_that_runs_out_says_it_was_time(cpus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (10.0, 0.0, 0.0))
    with pytest.raises(AssertionError) as failed:
        patience.wait_until(lambda: False, what="the job to finish", within_s=0.01, every_s=0.01)
    message = str(failed.value)
    assert message.startswith("out of time waiting for the job to finish: ")
    assert "a time limit, stretched x5.0 for this machine's load 10.0 on 2 CPUs" in message
    assert "RAGOVERLAY_TEST_SLOWNESS" in message


async def test_the_async_wait_too(cpus: None) -> None:
    seen = []

    async def check() -> int:
        seen.append(1)
        return len(seen) if len(seen) == 3 else 0

    assert await patience.until(check, what="x", within_s=5, every_s=0) == 3
    with pytest.raises(AssertionError, match=r"^out of time waiting for nothing"):
        await patience.until(lambda: _false(), what="nothing", within_s=0.01, every_s=0.01)


async def _false() -> bool:
    return False


@pytest.mark.timeout(7)
def test_pytest_timeouts_are_stretched_too(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py put a stretched copy of this test's mark in front of it."""
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] == pytest.approx(7 * patience.slowness(), rel=0.5)
    assert marker.args[0] >= 7
