"""The guard in tests/unit/conftest.py works: a unit test that opens a network socket fails."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from tests.unit.conftest import NetworkInUnitTest


def test_connecting_fails() -> None:
    with socket.socket() as sock, pytest.raises(NetworkInUnitTest, match="MockTransport"):
        sock.connect(("127.0.0.1", 9))


def test_binding_fails() -> None:
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(NetworkInUnitTest):
        sock.bind(("::1", 0))


def refused(error: BaseException) -> bool:
    """True when `error` is, or holds, the guard's refusal (anyio wraps it in an exception group)."""
    if isinstance(error, NetworkInUnitTest):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(refused(inner) for inner in error.exceptions)
    return any(refused(e) for e in (error.__cause__, error.__context__) if e is not None)


async def test_an_httpx_request_fails() -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(BaseException) as caught:  # inspected below
            await client.get("http://127.0.0.1:9/")
    assert refused(caught.value)


async def test_the_event_loop_still_works() -> None:
    # asyncio's own wake-up socketpair is a Unix socket, which stays allowed
    await asyncio.sleep(0)
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
