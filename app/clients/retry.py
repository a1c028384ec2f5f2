"""One retry policy (tenacity) for every call that may fail for a moment: exponential backoff with
jitter, the server's own `Retry-After` when it sent one (capped), a bounded number of attempts.

Callers raise `Transient` for a failure worth another try (a timeout, 408, 429, 5xx, a dropped
connection) and anything else for a final one; when the attempts run out the last `Transient`
propagates, and the caller turns it into its own error:

    policy = RetryPolicy(max_retries=settings.embedding_max_retries)
    try:
        reply = await policy.call(send_once, what="Embedding request to openai", log=logger)
    except Transient as exc:
        raise ProviderError(f"{exc.reason}; gave up after {policy.attempts} attempts") from None
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
)

T = TypeVar("T")


class Transient(Exception):
    """A failure that may clear on its own; `retry_after_s` is the server's requested wait, if any."""

    def __init__(self, reason: str, *, detail: str = "", retry_after_s: float | None = None) -> None:
        # reason: short, for the log ("timeout", "HTTP 503"); detail: the client-safe sentence
        super().__init__(reason)
        self.reason = reason
        self.detail = detail or reason
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; `max_retries` = 0 means one attempt only."""

    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_after_max_s: float = 30.0

    @property
    def attempts(self) -> int:
        """The first try plus the retries."""
        return self.max_retries + 1

    def backoff(self, attempt: int) -> float:
        """Wait after failed attempt `attempt` (1-based): exponential, with jitter so that clients
        that failed together do not retry together (between half and all of the ceiling)."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempt - 1))
        jitter: float = random.random()  # noqa: S311 - jitter, not cryptography
        return ceiling * (0.5 + jitter / 2)

    def wait(self, state: RetryCallState) -> float:
        """The server's `Retry-After` (capped) when the failure carried one, else the backoff."""
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, Transient) and error.retry_after_s is not None:
            return min(error.retry_after_s, self.retry_after_max_s)
        return self.backoff(state.attempt_number)

    def _log_retry(self, what: str, log: logging.Logger) -> Callable[[RetryCallState], None]:
        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            reason = error.reason if isinstance(error, Transient) else type(error).__name__
            delay = state.next_action.sleep if state.next_action is not None else 0.0
            log.warning(
                "%s failed (%s); retry %d of %d in %.2f s",
                what,
                reason,
                state.attempt_number,
                self.max_retries,
                delay,
            )

        return before_sleep

    def async_retrying(self, *, what: str, log: logging.Logger) -> AsyncRetrying:
        """A tenacity `AsyncRetrying` that retries `Transient` only and re-raises the last one."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=self.wait,
            retry=retry_if_exception_type(Transient),
            before_sleep=self._log_retry(what, log),
            reraise=True,
        )

    def retrying(self, *, what: str, log: logging.Logger) -> Retrying:
        """The blocking twin of `async_retrying`, for scripts and worker threads."""
        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=self.wait,
            retry=retry_if_exception_type(Transient),
            before_sleep=self._log_retry(what, log),
            reraise=True,
        )

    async def call(self, fn: Callable[[], Awaitable[T]], *, what: str, log: logging.Logger) -> T:
        """Await `fn()` until it returns, raises a non-`Transient` error, or the attempts run out."""

        async def attempt() -> T:
            # tenacity awaits only what it can tell is a coroutine function, never a lambda
            return await fn()

        result: T = await self.async_retrying(what=what, log=log)(attempt)
        return result
