"""Unit tests open no network sockets: any attempt fails the test that made it.

Unix sockets stay allowed (asyncio's event loop wakes itself up through a socketpair).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class NetworkInUnitTest(AssertionError):
    """A unit test tried to reach the network."""


@pytest.fixture(autouse=True)
def no_network_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuse connect/bind on IPv4 and IPv6 sockets for the duration of each unit test."""

    def refuse(name: str) -> Any:
        original = getattr(socket.socket, name)

        def guarded(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family in _NETWORK_FAMILIES:
                raise NetworkInUnitTest(
                    f"unit tests open no sockets (socket.{name}{args!r}); answer in-process with "
                    "httpx.MockTransport, or move the test to tests/integration/"
                )
            return original(self, *args, **kwargs)

        return guarded

    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, refuse(name))
    yield
