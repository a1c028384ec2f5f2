"""Token buckets per (limit, client): the rate limits the HTTP routes and the MCP tools count against.

Each limit holds N requests per minute per client. The budget is a token bucket holding one
minute's worth: a client may send all N at once, and gets them back at N per minute. That shape
matters for LibreChat: its stock `file_search` sends one `/query` per attached file, all at once
(373 files are 373 simultaneous requests from one user), so a per-second limit, or a small burst,
would break ordinary searches; this is also why the search limit is off by default.

The buckets live in this process. With RAG_WORKERS=W processes behind one port, each holds N / W
(rounded up; `per_process_budgets`): a client whose connections spread over the workers gets about
N a minute from the service, one whose connections all reach one worker N / W. With several
replicas, each enforces its own budget (a client spread over R replicas gets up to R × N). Idle
buckets are forgotten after two minutes, so memory grows with the number of active clients only.
Which routes count against which limit, and their
429: `app/api/ratelimit.py`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

IDLE_FORGET_S = 120.0
_SWEEP_EVERY = 1024  # calls between sweeps of idle buckets


def per_process_budgets(per_minute: dict[str, int], workers: int | str) -> dict[str, int]:
    """Each limit's share in one of `workers` processes, rounded up (workers get `auto` as its number)."""
    shares = workers if isinstance(workers, int) else 1
    return {name: math.ceil(rate / shares) for name, rate in per_minute.items()}


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class RateLimiter:
    """Token buckets per (limit, client): `per_minute[limit]` tokens, refilled at that rate per minute."""

    per_minute: dict[str, int]
    clock: Any = time.monotonic
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _calls: int = 0

    def check(self, limit: str, client: str) -> float:
        """Take one token; 0.0 when allowed, else the seconds until one is available (nothing taken)."""
        rate = self.per_minute.get(limit, 0)
        if rate <= 0:
            return 0.0
        now = self.clock()
        self._calls += 1
        if self._calls % _SWEEP_EVERY == 0:
            self._forget_idle(now)
        capacity = float(rate)
        per_second = rate / 60.0
        key = (limit, client)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(capacity, now)
        else:
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * per_second)
            bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / per_second

    def _forget_idle(self, now: float) -> None:
        # a bucket idle this long has refilled completely: forgetting it changes nothing
        for key in [k for k, b in self._buckets.items() if now - b.updated > IDLE_FORGET_S]:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
