"""The queue's rules as pure functions: retry delays, what a failed run leads to, timing checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RetryPolicy:
    """INDEXER_RETRY_*: how often a failed job runs again, and after how long."""

    retry_max: int  # runs after the first (INDEXER_RETRY_MAX): a job runs at most retry_max + 1 times
    base_ms: int  # INDEXER_RETRY_BASE_MS
    max_ms: int  # INDEXER_RETRY_MAX_MS

    @property
    def max_attempts(self) -> int:
        """Runs a job gets before it is parked as failed."""
        return self.retry_max + 1

    def delay_s(self, attempt: int) -> float:
        """Seconds before the run after failed attempt `attempt` (1-based): base·2^(attempt-1), capped."""
        exponent = max(attempt, 1) - 1
        # 2**exponent grows without bound; the cap is reached long before it matters
        delay_ms = self.max_ms if exponent >= 62 else min(self.base_ms * (2**exponent), self.max_ms)
        return delay_ms / 1000.0


@dataclass(frozen=True)
class AfterFailure:
    """What a failed run leads to: another run after `delay_s`, or the job parked as failed."""

    outcome: Literal["retry", "failed"]
    delay_s: float = 0.0


def after_failure(policy: RetryPolicy, *, attempt: int, max_attempts: int, permanent: bool) -> AfterFailure:
    """A one-off job's fate after failed attempt `attempt` of `max_attempts`.

    A permanent failure (the input can never work: a file that cannot be parsed, a bad payload) is
    parked at once; another is retried with the policy's backoff until its attempts are spent.
    """
    if permanent or attempt >= max_attempts:
        return AfterFailure("failed")
    return AfterFailure("retry", policy.delay_s(attempt))


# The longest a statement on a worker's own connection may take; past it the connection is dropped.
LEASE_STATEMENT_TIMEOUT_S = 30.0


def lease_loss_noticed_s(stale_timeout_s: float) -> float:
    """The longest a worker cut off from the database may go on running its jobs: until its next
    heartbeat fails, which takes at most one heartbeat interval and one statement timeout."""
    return heartbeat_interval_s(stale_timeout_s) + LEASE_STATEMENT_TIMEOUT_S


def stale_timeout_warning(stale_timeout_s: float) -> str | None:
    """The start-up warning when a job could be reclaimed while its first run still goes on.

    A run's deadline no longer bounds its age (it is pushed out while the run progresses), so what
    ends the first run of a worker that lost its connection is the worker noticing: the stale
    timeout must be longer than that.
    """
    noticed = lease_loss_noticed_s(stale_timeout_s)
    if stale_timeout_s > noticed:
        return None
    return (
        f"INDEXER_STALE_TIMEOUT ({stale_timeout_s:g} s) is not above the {noticed:g} s a worker may need "
        "to notice that it lost its database connection (a heartbeat, every INDEXER_STALE_TIMEOUT/4 s, "
        f"and a {LEASE_STATEMENT_TIMEOUT_S:g} s statement timeout): its job could be reclaimed and started "
        "elsewhere while the first run goes on. Set INDEXER_STALE_TIMEOUT above 40 seconds."
    )


def heartbeat_interval_s(stale_timeout_s: float) -> float:
    """How often a worker marks its running jobs alive: four beats per stale timeout, 0.5-30 s."""
    return min(30.0, max(0.5, stale_timeout_s / 4))


def sweep_interval_s(stale_timeout_s: float) -> float:
    """How often a worker looks for stale jobs to reclaim: 1-60 s."""
    return min(60.0, max(1.0, stale_timeout_s / 4))
