"""The one factory of `httpx.AsyncClient`s, and what every HTTP caller needs to judge a reply.

Every outbound client (embedding providers now; the reranker and the benchmark's client too) is
built here, so timeouts, pool bounds, redirects and proxies are decided in one place.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime

import httpx


def build_http_client(
    *,
    timeout_s: float,
    connect_timeout_s: float = 10.0,
    proxy: str | None = None,
    max_connections: int = 64,
    max_keepalive_connections: int | None = 16,
    base_url: str = "",
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` with a bounded pool, no redirects, and a connect timeout ≤ the total."""
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s)),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections
        ),
        # a proxy and a transport do not combine: a given transport is the whole network path
        proxy=proxy if transport is None else None,
        transport=transport,
        # an API that redirects a POST is misconfigured; following it could send a key elsewhere
        follow_redirects=False,
    )


def is_retryable_status(status: int) -> bool:
    """True for statuses that may clear on their own: 408, 429 and every 5xx."""
    return status in (408, 429) or 500 <= status <= 599


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
