"""The ports `scripts/faults` starts SeaweedFS on: distinct, and outside the kernel's ephemeral range,
where neither an outgoing connection nor `bind(0)` can take one before weed binds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.faults import WEED_COMPONENTS, _weed_ports

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not RANGE.exists(), reason="the ephemeral range is Linux's")
def test_weed_ports_are_distinct_and_outside_the_ephemeral_range() -> None:
    first, last = (int(x) for x in RANGE.read_text().split()[:2])
    for _ in range(200):  # bind(0) repeated a port in ~1 set of 8 in 430
        ports = _weed_ports()
        assert set(ports) == {f"{c}.{k}" for c in WEED_COMPONENTS for k in ("port", "port.grpc")}
        values = list(ports.values())
        assert len(set(values)) == len(values), ports
        assert all(not first <= port <= last and 1024 < port <= 65535 for port in values), (
            ports,
            first,
            last,
        )
