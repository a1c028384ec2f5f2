"""A circuit breaker for the embedding provider: stop calling it for a while once it keeps failing.

Without one, a provider that hangs costs every request its full timeout and retries, and requests
queue behind the bounded concurrency: in the fault run, with the provider hanging and 25 clients,
answers took up to 45 s. With it, after `failures` failed attempts in a row (timeouts, dropped
connections, 429 and 5xx: what the retry policy treats as transient), calls fail at once with 503
for `reset_s` seconds; then one trial attempt goes through (the others still fail fast), and its
success closes the breaker again. A request error (4xx) says nothing about the provider's health
and does not count; any success resets the count.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.errors import EmbeddingProviderError


class CircuitBreaker:
    """Closed -> open after `failures` transient failures in a row -> one trial after `reset_s`."""

    def __init__(self, failures: int, reset_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.reset_s = reset_s
        self.clock = clock
        self.consecutive = 0
        self.open_until = 0.0
        self.opened = 0  # times it opened (for the log and tests)
        self._trial = False

    @property
    def enabled(self) -> bool:
        """False when EMBEDDING_BREAKER_FAILURES is 0."""
        return self.failures > 0

    @property
    def is_open(self) -> bool:
        """True while calls fail fast (open, or half-open with the trial in flight)."""
        return (
            self.enabled
            and self.consecutive >= self.failures
            and (self.clock() < self.open_until or self._trial)
        )

    def before_attempt(self) -> None:
        """Raise (503) instead of calling a provider that keeps failing; let one trial through."""
        if not self.enabled or self.consecutive < self.failures:
            return
        now = self.clock()
        if now >= self.open_until and not self._trial:
            self._trial = True  # half-open: this attempt is the trial
            return
        wait = max(1, round(self.open_until - now)) if now < self.open_until else 1
        raise EmbeddingProviderError(
            f"The embedding provider failed {self.consecutive} times in a row; not calling it for "
            f"about {wait} s (EMBEDDING_BREAKER_RESET_S); try again shortly",
            retryable=True,
        )

    def success(self) -> None:
        """The provider answered: close."""
        self.consecutive = 0
        self._trial = False

    def failure(self) -> bool:
        """A transient failure; True when it (re)opened the breaker."""
        self._trial = False
        self.consecutive += 1
        if self.enabled and self.consecutive >= self.failures:
            self.open_until = self.clock() + self.reset_s
            self.opened += 1
            return True
        return False
