"""Job kinds: a name, an async handler `handler(payload, progress)`, and how the queue treats it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError


class Progress(Protocol):
    """How a running job says how far it is: `progress(done, total, note)`; cheap, never blocks.

    The worker writes the latest value with the next heartbeat (about once a second), so a handler
    may call it for every item it finishes.
    """

    def __call__(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """Record `done` of `total` (None: unchanged) and an optional note."""
        ...


@dataclass(frozen=True)
class JobResult:
    """What a handler may return (a plain dict or None will do too).

    `result` is stored on the job. For a periodic job, `again_in` sets the delay before the next
    pass (None: its period) and `stop` ends the schedule.
    """

    result: dict[str, Any] | None = None
    again_in: float | None = None
    stop: bool = False


Handler = Callable[[dict[str, Any], Progress], Awaitable["JobResult | dict[str, Any] | None"]]


class PermanentJobError(Exception):
    """Raised by a handler when running again cannot help: the job is parked as failed at once."""


class ReleaseJob(Exception):
    """Raised by a handler that cannot run the job here or now: it goes back to the queue uncounted.

    Not a failure: the attempt is given back and no error is recorded. The job is due again after
    `delay_s` (so the same worker does not take it straight back), for any replica to claim.
    """

    def __init__(self, delay_s: float, reason: str) -> None:
        super().__init__(reason)
        self.delay_s = delay_s
        self.reason = reason


# The id of the job whose handler is running (set by the worker around each run): a handler may
# record it so that a run of the same job after a crash finds what the first run started.
_current_job: ContextVar[int | None] = ContextVar("ragoverlay_current_job", default=None)


def current_job_id() -> int | None:
    """The id of the job this handler runs for (None outside a worker's run)."""
    return _current_job.get()


def set_current_job(job_id: int | None) -> Token[int | None]:
    """Mark the running job (the worker does this); returns the token that `reset_current_job` takes."""
    return _current_job.set(job_id)


def reset_current_job(token: Token[int | None]) -> None:
    """Undo `set_current_job`."""
    _current_job.reset(token)


@dataclass(frozen=True)
class JobKind:
    """A registered kind of job."""

    name: str
    handler: Handler
    payload: type[BaseModel] | None = None  # validated before the handler runs (a mismatch parks the job)
    deadline: bool = (
        True  # False: not cut by INDEXER_JOB_TIMEOUT_MS (database-only work such as index builds)
    )
    max_attempts: int | None = None  # None: INDEXER_RETRY_MAX + 1
    priority: int = 0  # higher runs first

    def parse(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload checked against the kind's model, as the handler receives it."""
        if self.payload is None:
            return payload
        try:
            return self.payload.model_validate(payload).model_dump()
        except ValidationError as exc:
            raise PermanentJobError(
                f"the payload does not fit kind {self.name}: {exc.error_count()} error(s)"
            ) from exc


class JobRegistry:
    """Kind name → handler. Only the kinds registered in a process are claimed by its worker."""

    def __init__(self) -> None:
        self._kinds: dict[str, JobKind] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        payload: type[BaseModel] | None = None,
        deadline: bool = True,
        max_attempts: int | None = None,
        priority: int = 0,
    ) -> JobKind:
        """Register `handler` for kind `name` (ValueError when the name is taken)."""
        if name in self._kinds:
            raise ValueError(f"job kind {name!r} is registered already")
        kind = JobKind(name, handler, payload, deadline, max_attempts, priority)
        self._kinds[name] = kind
        return kind

    def get(self, name: str) -> JobKind | None:
        """The kind `name`, or None when this process has no handler for it."""
        return self._kinds.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def names(self) -> list[str]:
        """Registered kind names, in registration order."""
        return list(self._kinds)
