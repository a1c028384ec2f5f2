"""Short versions of the queue's fault runs (`python -m benchmarks.jobs_faults` for the long ones).

Two worker processes share one database: every job runs exactly once. `python -m app` is killed
with SIGKILL while a large upload accepted as a job is being embedded: the file's previous version
stays whole and searchable throughout, no partial version is ever seen, and the second service
takes the job back (counted as an attempt) and stores the new version whole.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from benchmarks.jobs_faults import run_kill, run_replicas
from tests.e2e.test_openapi_fuzz import own_database
from tests.fixtures.patience import ceiling
from tests.fixtures.service import Database

# the runs wait on their conditions (every job done, the job resumed and finished); their limits are
# for an idle machine and stretched for a busy one (tests/fixtures/patience.py), as is this one
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_replicas_run_every_job_exactly_once_and_a_killed_job_resumes_whole(database: Database) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="ragoverlay-jobs-faults-"))
    workdir.chmod(0o755)
    with own_database(database) as dsn:
        replicas = asyncio.run(run_replicas(dsn, jobs=120, concurrency=3, timeout_s=ceiling(60)))
        kill = asyncio.run(run_kill(dsn, chunks=80, stale_s=2, workdir=workdir, timeout_s=ceiling(150)))
    assert replicas.ok, replicas
    assert sorted(replicas.per_worker) and len(replicas.per_worker) == 2  # both replicas took a share
    assert kill.partial == 0 and kill.errors == 0, kill
    assert kill.v1_whole > 0  # the previous version answered while the job ran and after the kill
    assert (kill.job_status, kill.job_attempts, kill.v2_whole_after) == ("done", 2, True), kill
    assert kill.killed_at_progress.startswith("running"), kill
