"""`build_services`, the composition root, on the real database: each service reports where it should.

No FastAPI app here: the services are built as the lifespan builds them, and each wire is followed
to its effect (an upload queues its V2 staging, a V2 dimension schedules its index task on the
queue, a pool that cannot hand out a connection wakes the supervisor).
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any

import pytest

from app.errors import DatabaseUnavailable
from app.evidence.kinds import V2_INDEX_FILE
from app.ingest.pipeline import SourceFile
from app.jobs.kinds import MAINTENANCE
from app.jobs.uploads import Queued
from app.services import Services, build_services
from tests.contract.helpers import agent_id
from tests.fixtures.patience import until as wait_async
from tests.fixtures.service import SettingsFactory, new_id


async def until(check: Any, what: str, within: float = 30.0) -> Any:
    """Poll the coroutine function `check` until it returns something truthy."""
    return await wait_async(check, what=what, within_s=within, every_s=0.05)


async def store_text(services: Services, tmp_path: Path, owner: str, text: bytes) -> str:
    path = tmp_path / "note.txt"
    path.write_bytes(text)
    source = SourceFile(path, "note.txt", "text/plain", len(text), hashlib.sha256(text).hexdigest())
    file_id = new_id()
    await services.ingest.ingest(source, file_id=file_id, owner=owner, uploader=owner)
    return file_id


async def test_build_services_wires_each_report_at_construction(
    settings_factory: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = agent_id()
    # no worker: the jobs stay queued where this test reads them; no timed supervisor checks
    settings = settings_factory(
        v2_namespace_ids=[namespace], indexer_concurrency=0, db_pool_max_size=2, db_check_interval_s=3600
    )
    async with contextlib.AsyncExitStack() as stack:
        services = await build_services(settings, stack)

        # an upload of a V2 namespace queues its V2 staging; another owner's does not
        file_id = await store_text(services, tmp_path, namespace, b"Puffins nest in burrows.")
        await store_text(services, tmp_path, new_id("user"), b"Gannets plunge from a height.")
        staged = await services.jobs.service.list_jobs(kind=V2_INDEX_FILE)
        assert [(r.payload["file_id"], r.payload["owner"]) for r in staged] == [(file_id, namespace)]

        # a dimension a V2 run stores: its index task is registered and scheduled on the queue
        services.evidence.parts.context.on_dimension(8)  # type: ignore[misc]
        assert "v2-hnsw-index-8" in services.maintenance.registry

        async def scheduled() -> bool:
            rows = await services.jobs.service.list_jobs(kind=MAINTENANCE, limit=100)
            return {"task": "v2-hnsw-index-8"} in [r.payload for r in rows]

        await until(scheduled, "the V2 index task as a periodic job")

        # a pool that cannot hand out a connection wakes the supervisor at once
        checks: list[bool] = []
        real_check = services.database.check

        async def counted_check() -> bool:
            checks.append(True)
            return await real_check()

        monkeypatch.setattr(services.database, "check", counted_check)
        async with services.pool.acquire() as first, services.pool.acquire() as second:
            assert first is not second
            with pytest.raises(DatabaseUnavailable):
                await services.pool.acquire(timeout=0.05)

            async def woken() -> bool:
                return bool(checks)

            await until(woken, "a supervisor check right after the pool's failure")
        assert services.database.up


async def test_ingestion_reports_every_stored_file_itself(
    settings_factory: SettingsFactory, tmp_path: Path
) -> None:
    """No caller of `ingest` has anything left to tell: an upload stored at once and one stored by its
    job both reach V1's search statistics and evidence search (staged with the upload, or queued)."""
    namespace = agent_id()
    settings = settings_factory(v2_namespace_ids=[namespace], db_check_interval_s=3600)
    async with contextlib.AsyncExitStack() as stack:
        services = await build_services(settings, stack)
        uploads = services.jobs.uploads
        files_before = services.maintenance.state.stats.files
        sources = []
        for n, text in enumerate((b"Puffins nest in burrows.", b"Gannets plunge from a height.")):
            path = tmp_path / f"note-{n}.txt"
            path.write_bytes(text)
            sources.append(
                SourceFile(path, path.name, "text/plain", len(text), hashlib.sha256(text).hexdigest())
            )
        now, later = new_id("now"), new_id("later")
        stored = await uploads.accept(sources[0], file_id=now, owner=namespace, uploader=namespace)
        assert not isinstance(stored, Queued) and stored.chunk_count == 1
        queued = await uploads.accept(
            sources[1], file_id=later, owner=namespace, uploader=namespace, background=True
        )
        assert isinstance(queued, Queued)

        async def finished() -> bool:
            row = await services.jobs.service.get(queued.job_id)
            return row is not None and row.status == "done"

        await until(finished, "the upload's job", within=120)
        # both counted for the search planner, by ingestion itself
        assert services.maintenance.state.stats.files == files_before + 2

        # and evidence search heard of both from ingestion: staged with the upload, or its staging
        # queued (the first upload finds no run yet; which one the second finds depends on timing)
        done = await services.jobs.service.get(queued.job_id)
        assert done is not None and done.result is not None
        for state in (stored.derived["evidence"], done.result["evidence"]):
            assert state["searchable"] is True or state["job_id"], state
        rows = await services.jobs.service.list_jobs(kind=V2_INDEX_FILE)
        assert now in {r.payload["file_id"] for r in rows}  # the first upload's, left to a job
