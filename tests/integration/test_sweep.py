"""Self-healing against the real database: chunks without vectors get them, status counts them.

V1: rows of rag_api's table in the app's collection whose vector is NULL (as another writer could
leave them). V2: the V2 index's chunk table is not on this branch yet, so this test creates a
table of the same column shape (key, document, text to embed, nullable vector, a namespace) and
plugs it in as the V2 index will.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest

from app.jobs.kinds import REEMBED_MISSING
from app.jobs.setup import JobSystem
from app.jobs.sweep import sweep_missing_vectors
from app.store.missing_vectors import ChunkTableMissingVectors
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
    deadline = time.monotonic() + 60
    while (row := await system.service.get(job.id)) is not None and row.runs == runs:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
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


async def test_a_v2_shaped_chunk_table_plugs_into_the_sweep(app: httpx.AsyncClient) -> None:
    pool = resources(app).pool
    embedder = resources(app).embedder
    table = f"test_v2_chunks_{uuid.uuid4().hex[:8]}"
    await pool.execute(
        f"CREATE TABLE {table} (chunk_id uuid PRIMARY KEY, namespace text NOT NULL, "
        "document_id text NOT NULL, embed_text text NOT NULL, embedding vector)"
    )
    try:
        texts = {f"doc-a-{i}": f"alpha chunk {i}" for i in range(5)} | {
            "doc-b-0": "beta chunk",
            "doc-b-1": "beta two",
        }
        vectors = await embedder.embed_documents(list(texts.values()))
        rows = []
        for (name, text), vector in zip(texts.items(), vectors, strict=True):
            document = name.rsplit("-", 1)[0]
            stored = vector if name in ("doc-a-0", "doc-a-1") else None  # the rest: provider was down
            rows.append((uuid.uuid4(), "ns1", document, text, stored))
        rows.append((uuid.uuid4(), "ns2", "doc-c", "another namespace", None))
        await pool.executemany(
            f"INSERT INTO {table} (chunk_id, namespace, document_id, embed_text, embedding) "
            "VALUES ($1, $2, $3, $4, $5)",
            rows,
        )
        store = ChunkTableMissingVectors(
            pool,
            name="v2",
            table=table,
            key="chunk_id",
            document="document_id",
            text="embed_text",
            vector="embedding",
            where_column="namespace",
            where_value="ns1",
        )
        system = jobs_of(app)
        system.missing_stores.append(store)
        try:
            admin = auth(new_id("admin"), role="ADMIN")
            status = (await app.get("/admin/status", headers=admin)).json()
            assert status["missing_vectors"]["v2"] == {"documents": 2, "chunks": 5}
            report = await sweep_missing_vectors([store], embedder, model="local:all-MiniLM-L6-v2", batch=2)
            assert report.stored == 5 and report.stores[0].skipped == 0
            assert (await store.count_missing()).chunks == 0
            healed = await pool.fetchval(f"SELECT embedding FROM {table} WHERE embed_text = 'beta two'")
            assert np.allclose(as_array(healed), vectors[-1], atol=1e-5)
            # another namespace's rows are not this store's
            assert await pool.fetchval(f"SELECT count(*) FROM {table} WHERE embedding IS NULL") == 1
        finally:
            system.missing_stores.remove(store)
    finally:
        await pool.execute(f"DROP TABLE {table}")
