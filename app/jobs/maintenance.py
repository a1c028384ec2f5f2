"""The maintenance tasks as periodic jobs of the queue: whichever replica is free runs each pass.

Every task registered in the maintenance registry becomes one periodic job (its name the job's
dedupe key, its interval and retry interval the job's), created by whichever replica registers
the task first. Any replica may claim the pass: a task it has not registered yet is built from its
name (`MaintenanceRegistry.resolve`: the index tasks of each dimension, V1 and V2); a name it does
not know at all (a replica of another version) is released for another replica, not failed.
A pass runs the task through `registry.run_once`, so the registry's status stays what the status
page reads, and returns the task's wish for the next pass (`Pass.again_in`) or ends the schedule
(`Pass.done`). Passes are not cut by the job deadline: they make no embedding
calls, and an index build stopped half-way is wasted work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from app.jobs.kinds import MAINTENANCE, MaintenancePass
from app.jobs.registry import JobRegistry, JobResult, Progress, ReleaseJob
from app.jobs.service import JobService
from app.maintenance.registry import MaintenanceRegistry, MaintenanceTask

logger = logging.getLogger(__name__)

# how long a pass of a task this replica cannot build waits before any replica may claim it again
UNKNOWN_TASK_RELEASE_SECONDS = 60.0


class MaintenanceSchedule:
    """Creates the periodic job of each task the maintenance registry gets (its `on_add`)."""

    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs
        self._pending: set[asyncio.Task[None]] = set()

    def task_added(self, task: MaintenanceTask) -> None:
        """Create the task's periodic job (in the background: `want_index` is called from searches)."""
        pending = asyncio.create_task(self._schedule(task), name=f"schedule:{task.name}")
        self._pending.add(pending)
        pending.add_done_callback(self._pending.discard)

    async def _schedule(self, task: MaintenanceTask) -> None:
        try:
            await self.jobs.ensure_periodic(
                MAINTENANCE,
                {"task": task.name},
                key=f"maintenance:{task.name}",
                period_s=max(task.interval, 1.0),
                retry_s=max(task.retry_interval, 1.0),
            )
        except Exception as exc:  # the next start (or the next sight of a dimension) tries again
            logger.warning(
                "Could not schedule maintenance task %s: %s: %s", task.name, type(exc).__name__, exc
            )

    async def close(self) -> None:
        """Wait for scheduling calls still in flight (briefly)."""
        pending = list(self._pending)
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*pending, return_exceptions=True)


class QueuedMaintenance:
    """Runs the passes of the maintenance registry's tasks as jobs of the queue."""

    def __init__(self, registry: MaintenanceRegistry, schedule: MaintenanceSchedule) -> None:
        self.registry = registry
        self.schedule = schedule

    def install(self, jobs: JobRegistry) -> None:
        """Register the `maintenance` kind."""
        jobs.register(MAINTENANCE, self.run_pass, payload=MaintenancePass, deadline=False, priority=-10)

    async def run_pass(self, payload: dict[str, Any], progress: Progress) -> JobResult:
        """One pass of the task the payload names."""
        name = str(payload["task"])
        registry = self.registry
        if not registry.resolve(name):
            # another replica's task that this one cannot build: not a failure of the task
            raise ReleaseJob(
                UNKNOWN_TASK_RELEASE_SECONDS, f"maintenance task {name!r} is not known to this replica"
            )
        progress(0, 1, name)
        result = await registry.run_once(name)
        progress(1, 1, result.progress or name)
        return JobResult(result={"progress": result.progress}, again_in=result.again_in, stop=result.done)

    async def close(self) -> None:
        """Wait for scheduling calls still in flight (briefly)."""
        await self.schedule.close()
