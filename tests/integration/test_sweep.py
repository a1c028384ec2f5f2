"""Self-healing against the real database: chunks without vectors get them, status counts them.

V1: rows of rag_api's table in the app's collection whose vector is NULL (as another writer could
leave them). The V2 index's chunks stored while the provider failed are healed in
`tests/integration/test_v2_backfill.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest

from app.jobs.kinds import REEMBED_MISSING
from app.jobs.setup import JobSystem
from app.store.jobs import JobRow
from tests.fixtures.patience import until
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
async def app(settings_factory: SettingsFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings_factory()) as client:
        yield client


def as_array(value: object) -> np.ndarray:
    """A vector as the pgvector codec hands it out, as numpy."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)


def jobs_of(client: httpx.AsyncClient) -> JobSystem:
    system = resources(client).jobs
    assert system is not None
    return system


async def run_sweep_now(client: httpx.AsyncClient) -> None:
    """Make the periodic sweep due now and wait for its pass."""
    system = jobs_of(client)
    pool = resources(client).pool
    (job,) = await system.service.list_jobs(kind=REEMBED_MISSING)
    runs = job.runs
    await pool.execute(
        "UPDATE ragoverlay_jobs SET run_after = now() WHERE id = $1 AND status = 'queued'", job.id
    )
    assert system.worker is not None
    system.worker.wake()

    async def ran_again() -> JobRow | None:
        row = await system.service.get(job.id)
        assert row is not None
        return row if row.runs != runs else None

    row = await until(ran_again, what="the sweep's job to run again", within_s=60)
    assert row is not None and row.last_error is None, row.last_error


async def test_v1_chunks_stored_without_vectors_are_healed_by_the_periodic_sweep(
    app: httpx.AsyncClient,
) -> None:
    user, file_id = new_id("user"), new_id()
    text = "\n\n".join(
        f"Paragraph {i}: " + ("the harbour pilot checked the tide tables. " * 30) for i in range(4)
    )
    r = await app.post(
        "/embed",
        data={"file_id": file_id},
        files={"file": ("tides.txt", text.encode(), "text/plain")},
        headers=auth(user),
    )
    assert r.status_code == 200, r.text
    pool = resources(app).pool
    info = resources(app).info
    before = await pool.fetch(
        "SELECT uuid, embedding FROM langchain_pg_embedding WHERE collection_id = $1 AND custom_id = $2 "
        "ORDER BY uuid",
        info.collection_id,
        file_id,
    )
    assert len(before) >= 3
    lost = [row["uuid"] for row in before[:2]]
    # as if they had been stored while the provider was down
    await pool.execute(
        "UPDATE langchain_pg_embedding SET embedding = NULL WHERE uuid = ANY($1::uuid[])", lost
    )
    assert (
        await pool.fetchval("SELECT count(*) FROM ragoverlay_vectors WHERE uuid = ANY($1::uuid[])", lost) == 0
    )

    admin = auth(new_id("admin"), role="ADMIN")
    status = (await app.get("/admin/status", headers=admin)).json()
    assert status["missing_vectors"]["v1"] == {"documents": 1, "chunks": 2}
    assert status["documents_missing_vectors"] == 1

    await run_sweep_now(app)
    after = {
        row["uuid"]: row["embedding"]
        for row in await pool.fetch(
            "SELECT uuid, embedding FROM langchain_pg_embedding WHERE uuid = ANY($1::uuid[])", lost
        )
    }
    want = {row["uuid"]: row["embedding"] for row in before[:2]}
    for key in lost:
        assert after[key] is not None and np.allclose(as_array(after[key]), as_array(want[key]), atol=1e-5)
    # the vector copy took them back through its trigger, and the status says all is searchable
    assert (
        await pool.fetchval("SELECT count(*) FROM ragoverlay_vectors WHERE uuid = ANY($1::uuid[])", lost) == 2
    )
    status = (await app.get("/admin/status", headers=admin)).json()
    assert status["documents_missing_vectors"] == 0
