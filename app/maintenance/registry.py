"""Maintenance tasks and their registry: who runs, how often, and how each one is doing.

A task is a plain async callable that does one pass and says what it did (`Pass`); the registry
keeps its `TaskStatus`. Who runs the passes: the registry itself, each task in a loop at its
interval (`run_loops=True`), or the job queue (`run_loops=False` with `on_add`: each task becomes
a periodic job, whose passes call `run_once`; `app/jobs/maintenance.py`). The admin status page
reads `statuses()`.

Tasks made on demand (an index per embedding dimension) are known to every process by their name:
each family registers a resolver (`add_resolver`) that builds the task from its name, so a replica
can run a pass of a task that another replica created (`resolve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

import asyncpg

logger = logging.getLogger(__name__)

TaskState = Literal["waiting", "running", "idle", "failed", "done"]


@dataclass(frozen=True)
class Pass:
    """What one pass of a task did, and when it wants the next one."""

    progress: str = ""
    again_in: float | None = None  # seconds until the next pass; None: the task's interval
    done: bool = False  # nothing left to do: no further pass


Report = Callable[[str], None]
"""How a pass reports progress while it runs (e.g. "building ragoverlay_vec_hnsw_384")."""


@dataclass(frozen=True)
class MaintenanceTask:
    """A named unit of background work: `run` does one pass."""

    name: str
    run: Callable[[Report], Awaitable[Pass]]
    interval: float  # seconds between passes
    retry_interval: float = 30.0  # seconds before the next pass after a failed one


@dataclass(frozen=True)
class TaskStatus:
    """How a task is doing: a snapshot, safe to hand out."""

    name: str
    interval: float
    state: TaskState = "waiting"
    progress: str = ""
    last_error: str | None = None
    last_run: datetime | None = None  # when the last pass ended
    last_duration_s: float | None = None
    runs: int = 0
    failures: int = 0


class MaintenanceRegistry:
    """The running maintenance tasks, each with its status, readable in one place."""

    def __init__(
        self, *, run_loops: bool = True, on_add: Callable[[MaintenanceTask], None] | None = None
    ) -> None:
        # False: tasks are only registered, and something else runs their passes (`run_once`):
        # the tests, and the job queue, which learns of each new task through `on_add`
        self.run_loops = run_loops
        self.on_add = on_add
        self._tasks: dict[str, MaintenanceTask] = {}
        self._status: dict[str, TaskStatus] = {}
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._resolvers: list[Callable[[str], bool]] = []

    def add_resolver(self, resolver: Callable[[str], bool]) -> None:
        """Add a builder of tasks by name: `resolver(name)` registers the task it recognises, True."""
        self._resolvers.append(resolver)

    def resolve(self, name: str) -> bool:
        """True when task `name` is registered, after asking the resolvers to build it if need be."""
        if name in self._tasks:
            return True
        for resolver in self._resolvers:
            if resolver(name) and name in self._tasks:
                return True
        return False

    def add(self, task: MaintenanceTask) -> bool:
        """Register `task` and run it in the background; False when the name is taken."""
        if task.name in self._tasks:
            return False
        self._tasks[task.name] = task
        self._status[task.name] = TaskStatus(task.name, task.interval)
        if self.run_loops:
            self._loops[task.name] = asyncio.create_task(self._loop(task), name=f"maintenance:{task.name}")
        elif self.on_add is not None:
            self.on_add(task)
        return True

    def task(self, name: str) -> MaintenanceTask:
        """The registered task `name` (KeyError when there is no such task)."""
        return self._tasks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def names(self) -> list[str]:
        """Registered task names, in registration order."""
        return list(self._tasks)

    def status(self, name: str) -> TaskStatus:
        """The status of task `name` (KeyError when there is no such task)."""
        return self._status[name]

    def statuses(self) -> list[TaskStatus]:
        """Every task's status, in registration order."""
        return [self._status[name] for name in self._tasks]

    async def run_once(self, name: str) -> Pass:
        """Run one pass of `name` now, recording it like a scheduled pass (exceptions propagate)."""
        task = self._tasks[name]
        result = await self._pass(task)
        if isinstance(result, BaseException):
            raise result
        return result

    async def close(self) -> None:
        """Cancel every loop and wait for them to end."""
        loops = list(self._loops.values())
        for loop in loops:
            loop.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*loops, return_exceptions=True)
        self._loops.clear()

    def _set(self, name: str, **changes: object) -> None:
        self._status[name] = replace(self._status[name], **changes)  # type: ignore[arg-type]

    async def _pass(self, task: MaintenanceTask) -> Pass | Exception:
        """One pass with its bookkeeping; an exception is returned (and logged), never raised."""
        self._set(task.name, state="running")
        started = time.monotonic()

        def report(progress: str) -> None:
            self._set(task.name, progress=progress)

        try:
            result = await task.run(report)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a background loop must survive any failure; it is recorded
            status = self._status[task.name]
            if isinstance(exc, (OSError, asyncpg.PostgresError)):
                logger.warning("Maintenance task %s failed: %s", task.name, exc)
            else:
                logger.exception("Maintenance task %s failed", task.name)
            self._set(
                task.name,
                state="failed",
                last_error=f"{type(exc).__name__}: {exc}",
                last_run=datetime.now(UTC),
                last_duration_s=time.monotonic() - started,
                runs=status.runs + 1,
                failures=status.failures + 1,
            )
            return exc
        self._set(
            task.name,
            state="done" if result.done else "idle",
            progress=result.progress or self._status[task.name].progress,
            last_run=datetime.now(UTC),
            last_duration_s=time.monotonic() - started,
            runs=self._status[task.name].runs + 1,
        )
        return result

    async def _loop(self, task: MaintenanceTask) -> None:
        while True:
            result = await self._pass(task)
            if isinstance(result, Exception):
                delay = task.retry_interval
            elif result.done:
                return
            else:
                delay = task.interval if result.again_in is None else result.again_in
            await asyncio.sleep(delay)
