"""The compact vector copy (migration 0006, triggers in sql/40_vector_copy.sql): triggers mirror
rag_api-style writes, the backfill copies rows that predate the triggers, and a search on the copy
trusts nothing but the row itself."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.access.principal import Principal
from app.config import Settings
from app.search.planner import VectorSearchDecision
from app.store import chunks as store
from app.store import vector_copy
from app.store.db import StoreInfo, bootstrap
from app.store.scope import Scope
from tests.fixtures.patience import ceiling
from tests.fixtures.service import Database, auth, new_id, running_app
from tests.integration.reference import exact_top_k

DIMS = 8


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture
async def fresh_dsn(database: Database) -> AsyncIterator[str]:
    """A database of its own (TRUNCATE and a disabled trigger must not touch other tests' rows)."""
    name = f"vc_{uuid.uuid4().hex[:10]}"
    owner = urlsplit(database.dsn).username
    su = await asyncpg.connect(database.superuser_dsn)
    try:
        await su.execute(f'CREATE DATABASE {name} OWNER "{owner}"')
        ext = await asyncpg.connect(with_database(database.superuser_dsn, name))
        try:
            await ext.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await ext.close()
        yield with_database(database.dsn, name)
    finally:
        await su.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await su.close()


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    return conn


def rag_api_row(
    info: StoreInfo,
    file_id: str | None,
    owner: str | None,
    vector: np.ndarray,
    text: str = "t",
    navigation: str | None = None,
) -> tuple[Any, ...]:
    """A row as rag_api writes it (random v4 uuid, json metadata text, custom_id = file id); a
    `navigation` page's row as ragoverlay writes it."""
    meta: dict[str, object] = {"file_id": file_id, "digest": text, "source": f"/app/uploads/{file_id}.pdf"}
    if owner is not None:
        meta["user_id"] = owner
    if navigation is not None:
        meta["navigation"] = navigation
    return (uuid.uuid4(), info.collection_id, vector.astype(np.float32), text, json.dumps(meta), file_id)


COLUMNS = ["uuid", "collection_id", "embedding", "document", "cmetadata", "custom_id"]


async def copy_rows(conn: asyncpg.Connection) -> dict[uuid.UUID, asyncpg.Record]:
    rows = await conn.fetch(
        "SELECT uuid, collection_id, file_id, owner, dims, embedding FROM ragoverlay_vectors"
    )
    return {r["uuid"]: r for r in rows}


async def test_triggers_mirror_inserts_updates_deletes_and_truncate(fresh_dsn: str) -> None:
    info = await bootstrap(fresh_dsn, "vc")
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(1)
        big = rng.normal(size=DIMS) * 1e6  # far outside halfvec's range: stored at unit length
        rows = [
            rag_api_row(info, "f1", "u1", big),
            rag_api_row(info, "f1", "u1", rng.normal(size=DIMS)),
            rag_api_row(info, "f2", None, rng.normal(size=DIMS)),  # legacy, no owner
            rag_api_row(info, None, "u1", rng.normal(size=DIMS)),  # no file id: never searchable
            rag_api_row(info, "f3", "u2", rng.normal(size=4)),  # another model's dimension
            rag_api_row(info, "f1", "u1", rng.normal(size=DIMS), navigation="toc"),  # stored, never copied
        ]
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows[:3], columns=COLUMNS)
        await conn.executemany(
            "INSERT INTO langchain_pg_embedding (uuid, collection_id, embedding, document, cmetadata, "
            "custom_id) VALUES ($1, $2, $3, $4, $5, $6)",
            rows[3:],
        )
        got = await copy_rows(conn)
        assert set(got) == {rows[i][0] for i in (0, 1, 2, 4)}
        first = got[rows[0][0]]
        assert (first["collection_id"], first["file_id"], first["owner"], first["dims"]) == (
            info.collection_id,
            "f1",
            "u1",
            DIMS,
        )
        stored = np.asarray(first["embedding"].to_numpy(), dtype=np.float32)
        np.testing.assert_allclose(stored, big / np.linalg.norm(big), atol=1e-3)
        assert got[rows[2][0]]["owner"] is None
        assert got[rows[4][0]]["dims"] == 4

        # an owner change follows; losing the file id drops the row from the copy
        # cmetadata is json in rag_api's schema, jsonb in langchain's newer one
        cast = "::json" if await _is_json(conn) else ""
        await conn.execute(
            "UPDATE langchain_pg_embedding "
            f"SET cmetadata = jsonb_set(cmetadata::jsonb, '{{user_id}}', '\"u9\"'){cast} WHERE uuid = $1",
            rows[1][0],
        )
        await conn.execute("UPDATE langchain_pg_embedding SET custom_id = NULL WHERE uuid = $1", rows[2][0])
        await conn.execute("UPDATE langchain_pg_embedding SET custom_id = 'f1' WHERE uuid = $1", rows[3][0])
        got = await copy_rows(conn)
        assert got[rows[1][0]]["owner"] == "u9"
        assert rows[2][0] not in got
        assert got[rows[3][0]]["file_id"] == "f1"
        assert rows[5][0] not in got and rows[5][0] in await source_rows(conn)
        # a row that becomes a navigation page's leaves the copy
        await conn.execute(
            "UPDATE langchain_pg_embedding SET cmetadata = "
            f"jsonb_set(cmetadata::jsonb, '{{navigation}}', '\"index\"'){cast} WHERE uuid = $1",
            rows[1][0],
        )
        assert rows[1][0] not in await copy_rows(conn)

        await conn.execute("DELETE FROM langchain_pg_embedding WHERE uuid = $1", rows[0][0])
        assert rows[0][0] not in await copy_rows(conn)
        await conn.execute("TRUNCATE langchain_pg_embedding")
        assert await copy_rows(conn) == {}
    finally:
        await conn.close()


async def source_rows(conn: asyncpg.Connection) -> set[uuid.UUID]:
    return {r["uuid"] for r in await conn.fetch("SELECT uuid FROM langchain_pg_embedding")}


async def _is_json(conn: asyncpg.Connection) -> bool:
    kind = await conn.fetchval(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'langchain_pg_embedding' AND column_name = 'cmetadata'"
    )
    return kind == "json"


async def test_backfill_copies_rows_written_before_the_triggers(fresh_dsn: str) -> None:
    info = await bootstrap(fresh_dsn, "vc")
    other = await bootstrap(fresh_dsn, "vc-other")  # a second collection is copied too
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(2)
        # rows from before the migration: written while the triggers did not exist
        await conn.execute("ALTER TABLE langchain_pg_embedding DISABLE TRIGGER USER")
        rows = [
            rag_api_row(target, f"file-{i % 7}", f"u{i % 2}", rng.normal(size=DIMS), f"t{i}")
            for target in (info, other)
            for i in range(40)
        ]
        rows.append(rag_api_row(info, None, "u1", rng.normal(size=DIMS)))
        toc = rag_api_row(info, "file-2", "u1", rng.normal(size=DIMS), "contents", navigation="toc")
        await conn.copy_records_to_table("langchain_pg_embedding", records=[*rows, toc], columns=COLUMNS)
        await conn.execute("ALTER TABLE langchain_pg_embedding ENABLE TRIGGER USER")
        await conn.execute("UPDATE ragoverlay_vector_copy SET state = 'backfilling'")
        assert await copy_rows(conn) == {}
        # and one row written after the triggers came: copied by them, not twice by the backfill
        late = rag_api_row(info, "file-3", "u1", rng.normal(size=DIMS), "late")
        await conn.copy_records_to_table("langchain_pg_embedding", records=[late], columns=COLUMNS)

        # 3 rows per batch: files of ~6 rows straddle every batch boundary
        copied = await vector_copy.backfill(conn, batch_rows=3)
        assert copied == 80
        got = await copy_rows(conn)
        assert set(got) == {r[0] for r in rows if r[5] is not None} | {late[0]}  # not the toc row
        assert await vector_copy.copy_state(conn) == "ready"
        assert await vector_copy.backfill(conn) is None  # nothing left to do
        for r in rows[:-1]:
            assert (got[r[0]]["file_id"], got[r[0]]["owner"], got[r[0]]["collection_id"]) == (
                r[5],
                json.loads(r[4])["user_id"],
                r[1],
            )
    finally:
        await conn.close()


async def test_search_on_the_copy_rechecks_each_candidate_row(fresh_dsn: str) -> None:
    """A wrong copy row (stale owner, a row gone) can cost a candidate, never leak one."""
    info = await bootstrap(fresh_dsn, "vc")
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(3)
        q = rng.normal(size=DIMS).astype(np.float32)
        mine = [rag_api_row(info, "mine", "me", rng.normal(size=DIMS), f"mine {i}") for i in range(12)]
        theirs = [
            rag_api_row(info, "mine", "them", q + 0.01 * rng.normal(size=DIMS), f"theirs {i}")
            for i in range(3)
        ]
        await conn.copy_records_to_table("langchain_pg_embedding", records=mine + theirs, columns=COLUMNS)
        # the copy claims their rows (nearest to the query of all) are mine
        await conn.execute("UPDATE ragoverlay_vectors SET owner = 'me' WHERE owner = 'them'")
        # and one of my rows vanished from rag_api's table without the copy noticing
        await conn.execute("ALTER TABLE langchain_pg_embedding DISABLE TRIGGER USER")
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE uuid = $1", mine[0][0])
        await conn.execute("ALTER TABLE langchain_pg_embedding ENABLE TRIGGER USER")

        choice = VectorSearchDecision("exact", True, 5, 20, True, 15)
        scope = Scope.of(info.collection_id, ["me"], file_ids=["mine"])
        result = await store.search(conn, scope, choice.call(q))
        assert result.path == "exact"
        assert len(result.hits) == 5
        assert all(h.text.startswith("mine ") for h in result.hits)
        assert all(h.id != mine[0][0] for h in result.hits)
        want = await exact_top_k(conn, info, vector=q, file_ids=["mine"], owners=["me"], k=5)
        assert [h.id for h in result.hits] == [h.id for h in want]
    finally:
        await conn.close()


async def test_the_service_backfills_the_copy_then_searches_it_through_its_index(
    fresh_dsn: str, settings_factory: Callable[..., Settings]
) -> None:
    """A rag_api deployment switched over, rows from before included: the service takes it from there."""
    info = await bootstrap(fresh_dsn, "switched")
    conn = await connect(fresh_dsn)
    rng = np.random.default_rng(4)
    user = new_id("user")
    files = [new_id() for _ in range(6)]
    try:
        await conn.execute("ALTER TABLE langchain_pg_embedding DISABLE TRIGGER USER")
        rows = [rag_api_row(info, f, user, rng.normal(size=384), f"{f} {i}") for f in files for i in range(5)]
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        await conn.execute("ALTER TABLE langchain_pg_embedding ENABLE TRIGGER USER")
        await conn.execute("UPDATE ragoverlay_vector_copy SET state = 'backfilling'")
    finally:
        await conn.close()

    settings = settings_factory(database_url=fresh_dsn, collection_name="switched")
    async with running_app(settings) as client:
        resources = client.app.state.services  # type: ignore[attr-defined]
        state = resources.search.state
        await asyncio.wait_for(state.copy_ready.wait(), ceiling(60))
        for _ in range(600):  # the index build runs in the background
            if state.walk(384) is not None:
                break
            await asyncio.sleep(0.1)
        assert state.walk(384) == "ragoverlay_vec_walk_384"
        registry = resources.maintenance.registry
        assert registry.status("vector-copy").state == "idle"
        assert registry.status("hnsw-index-384").state == "done"
        conn = await connect(fresh_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM ragoverlay_vectors") == len(rows)
            query = "anything at all"
            vector = await resources.embedder.embed_query(query)
            choice = resources.search.plan(
                384, await resources.access.read_scope(Principal(user), None, files), 7
            )
            assert choice.use_copy
            want = await exact_top_k(conn, info, vector=vector, file_ids=files, owners=[user], k=7)
        finally:
            await conn.close()
        r = await client.post(
            "/query_multiple", json={"query": query, "file_ids": files, "k": 7}, headers=auth(user)
        )
        assert r.status_code == 200
        assert [p[0]["id"] for p in r.json()] == [str(h.id) for h in want]


async def test_reconcile_repairs_rows_written_or_removed_behind_the_triggers(fresh_dsn: str) -> None:
    info = await bootstrap(fresh_dsn, "vc")
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(5)
        kept = [rag_api_row(info, "f1", "u1", rng.normal(size=DIMS)) for _ in range(4)]
        index = rag_api_row(info, "f1", "u1", rng.normal(size=DIMS), navigation="index")
        await conn.copy_records_to_table("langchain_pg_embedding", records=[*kept, index], columns=COLUMNS)
        await conn.execute("UPDATE ragoverlay_vector_copy SET state = 'ready'")
        assert await vector_copy.reconcile(conn) == (0, 0)  # in step (the index row is never copied)

        # a bulk load and a delete with the triggers off
        await conn.execute("ALTER TABLE langchain_pg_embedding DISABLE TRIGGER USER")
        behind = [rag_api_row(info, "f2", "u1", rng.normal(size=DIMS)) for _ in range(3)]
        await conn.copy_records_to_table("langchain_pg_embedding", records=behind, columns=COLUMNS)
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE uuid = $1", kept[0][0])
        await conn.execute("ALTER TABLE langchain_pg_embedding ENABLE TRIGGER USER")

        assert await vector_copy.reconcile(conn) == (3, 1)
        assert set(await copy_rows(conn)) == {r[0] for r in kept[1:] + behind}
        assert await vector_copy.reconcile(conn) == (0, 0)
        # not while the copy is still being filled
        await conn.execute("UPDATE ragoverlay_vector_copy SET state = 'backfilling'")
        assert await vector_copy.reconcile(conn) is None
    finally:
        await conn.close()
