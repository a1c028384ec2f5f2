"""One concurrent index build at a time per table, against the real PostgreSQL + pgvector.

Two CREATE INDEX CONCURRENTLY on one table can deadlock (each waits for the other's transaction in
its last phase); on a first start the global HNSW build and the namespace builds on
`ragoverlay_vectors` did. Here: a first start with two namespaces over the threshold ends with
every index valid, no task failed, the global index built first and never two builds of the table
at once; a build whose table's lock another session holds waits and says so, then completes once
it is released, while another table's build goes on; a migration's concurrent build waits for its
table's turn, and the migrations leave alone an invalid index whose table another build holds; a
replica starting while another's migration builds an index waits without deadlocking it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.config import Settings
from app.config_sections import VectorIndexSettings
from app.evidence.store.vectors import V2_CHUNK_INDEX
from app.maintenance.namespace_task import NAMESPACE_INDEXES
from app.maintenance.registry import MaintenanceRegistry, TaskStatus
from app.maintenance.tasks import HNSW_PREFIX, Maintenance
from app.search.state import SearchState
from app.store import chunks as store
from app.store.build_lock import TABLE_LOCK_KEY, table_lock_id
from app.store.db import StoreInfo, bootstrap
from app.store.ids import uuid7_batch
from app.store.maintenance import MaintenanceStore
from app.store.migrate import drop_invalid_indexes, execute_outside_transaction, prepare_schema
from app.store.namespace_index import namespace_index_name
from app.store.vector_index import IndexSpec, build_index
from tests.fixtures.patience import ceiling, until
from tests.fixtures.service import Database

# dimensions of this module's own: their global indexes hold this module's rows only
FIRST_START_DIMS = 36
LOCKED_DIMS = 44
MIN_ROWS = 2000
NAMESPACES = ("agent-one", "agent-two")
VECTORS = "ragoverlay_vectors"
PROBE = "ragoverlay_build_lock_probe"  # a scratch table for the migrations' side


def settings() -> Settings:
    values = {"HNSW_NAMESPACE_MIN_ROWS": MIN_ROWS, "HNSW_M": 8, "HNSW_EF_CONSTRUCTION": 32}
    return Settings(_env_file=None, **values)  # type: ignore[call-arg,arg-type]


async def write_namespace(
    conn: asyncpg.Connection, info: StoreInfo, owner: str, dims: int, rows: int, seed: int
) -> None:
    """`rows` chunks of `dims` dimensions in ten files of `owner`, catalogued like an upload's."""
    rng = np.random.default_rng(seed)
    per_file = rows // 10
    for i in range(10):
        vecs = rng.normal(size=(per_file, dims)).astype(np.float32)
        ids = uuid7_batch(per_file)
        fid = f"{owner}-{i}"
        new = [
            store.NewChunk(ids[j], vecs[j], f"{fid} {j}", {"file_id": fid, "user_id": owner, "source": fid})
            for j in range(per_file)
        ]
        record = store.FileRecord(
            fid, owner, owner, f"{fid}.txt", "text/plain", 1, None, None, per_file, "test", dims
        )
        async with conn.transaction():
            await store.replace_file(conn, info, record, new)


async def index_validity(conn: asyncpg.Connection, names: list[str]) -> dict[str, bool]:
    rows = await conn.fetch(
        "SELECT c.relname, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
        "WHERE c.relname = ANY($1::text[])",
        names,
    )
    return {r["relname"]: bool(r["indisvalid"]) for r in rows}


@pytest.fixture
async def observer(database: Database) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database.dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def test_a_first_start_builds_the_global_and_two_namespace_indexes_one_at_a_time(
    database: Database, observer: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    info = await bootstrap(database.dsn, f"buildlock_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        for seed, owner in enumerate(NAMESPACES):
            await write_namespace(conn, info, owner, FIRST_START_DIMS, MIN_ROWS + 500, seed)
        await conn.execute("ANALYZE ragoverlay_vectors")
    finally:
        await conn.close()
    global_name = IndexSpec(FIRST_START_DIMS).name
    names = [
        global_name,
        *(namespace_index_name(info.collection_id, o, FIRST_START_DIMS) for o in NAMESPACES),
    ]

    indexes = VectorIndexSettings.from_settings(settings())
    maintenance = Maintenance(
        indexes, MaintenanceStore(database.dsn, info), SearchState(), MaintenanceRegistry()
    )
    most_at_once = 0

    async def all_built() -> bool:
        nonlocal most_at_once
        # builds in progress on the table right now (CREATE INDEX CONCURRENTLY's progress view)
        at_once = await observer.fetchval(
            "SELECT count(*) FROM pg_stat_progress_create_index WHERE relid = 'ragoverlay_vectors'::regclass"
        )
        most_at_once = max(most_at_once, int(at_once))
        namespaces = maintenance.registry.status(NAMESPACE_INDEXES).progress
        return maintenance.registry.status(
            f"{HNSW_PREFIX}{FIRST_START_DIMS}"
        ).state == "done" and namespaces.startswith("2 namespace indexes valid, 0 to build")

    with caplog.at_level(logging.INFO, logger="app.store"):
        maintenance.start(FIRST_START_DIMS)  # what a first start does: every task at once
        try:
            await until(all_built, what="the global index and both namespace indexes", within_s=300)
            statuses: list[TaskStatus] = maintenance.registry.statuses()
        finally:
            await maintenance.close()

    assert await index_validity(observer, names) == dict.fromkeys(names, True)
    # no pass failed (a deadlock would be one: PostgreSQL cancels one of the two builds)
    assert [(s.name, s.failures, s.last_error) for s in statuses if s.failures or s.last_error] == []
    assert most_at_once <= 1
    # the global index, which every search of the dimension uses, was built first
    building = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Building ")]
    ours = [m for m in building if any(name in m for name in names)]
    assert len(ours) == 3 and global_name in ours[0]
    ns = maintenance.state.knowledge().namespaces
    assert set(ns) == {(o, FIRST_START_DIMS) for o in NAMESPACES}


async def test_a_build_waits_while_its_tables_lock_is_held_and_completes_after(
    database: Database, observer: asyncpg.Connection
) -> None:
    info = await bootstrap(database.dsn, f"buildlock_{uuid.uuid4().hex[:8]}")
    spec = IndexSpec(LOCKED_DIMS)
    name = f"{HNSW_PREFIX}{LOCKED_DIMS}"
    indexes = VectorIndexSettings.from_settings(settings())
    maintenance = Maintenance(
        indexes, MaintenanceStore(database.dsn, info), SearchState(), MaintenanceRegistry()
    )
    holder = await asyncpg.connect(database.dsn)  # another session's build of the table, as far as locks go
    try:
        await holder.execute("SELECT pg_advisory_lock($1, $2)", TABLE_LOCK_KEY, table_lock_id(VECTORS))
        maintenance.start(LOCKED_DIMS)

        async def told_to_wait() -> bool:
            status = maintenance.registry.status(name)
            return (
                status.runs >= 2
                and "waiting for another index build on ragoverlay_vectors" in status.progress
            )

        await until(told_to_wait, what="the build to say it waits for the table", within_s=60)
        status = maintenance.registry.status(name)
        assert status.state == "idle" and status.failures == 0
        assert await index_validity(observer, [spec.name]) == {}  # not started: nothing half-built

        # another table's build is not held up by this one's lock (V2's chunks)
        v2 = IndexSpec(LOCKED_DIMS, V2_CHUNK_INDEX)
        own = await asyncpg.connect(database.dsn)
        try:
            assert await build_index(own, v2, m=8, ef_construction=32, memory="64MB") == "valid"
            # ... and with the V2 table's lock held, its build waits its turn too
            await holder.execute(
                "SELECT pg_advisory_lock($1, $2)", TABLE_LOCK_KEY, table_lock_id(V2_CHUNK_INDEX.table)
            )
            await own.execute(f"DROP INDEX CONCURRENTLY {v2.name}")
            assert await build_index(own, v2, m=8, ef_construction=32, memory="64MB") == "table-busy"
        finally:
            await own.close()

        await holder.execute("SELECT pg_advisory_unlock_all()")

        async def built() -> bool:
            return maintenance.registry.status(name).state == "done"

        await until(built, what="the build after the lock was released", within_s=120)
        assert await index_validity(observer, [spec.name]) == {spec.name: True}
        assert maintenance.registry.status(name).failures == 0
        assert maintenance.state.walk(LOCKED_DIMS) == spec.function_name
    finally:
        await maintenance.close()
        await holder.close()


@pytest.fixture
async def probe(database: Database) -> AsyncIterator[asyncpg.Connection]:
    """A scratch table with duplicate values, on a connection of its own."""
    conn = await asyncpg.connect(database.dsn)
    await conn.execute(f"DROP TABLE IF EXISTS {PROBE}")
    await conn.execute(f"CREATE TABLE {PROBE} (x integer)")
    await conn.execute(f"INSERT INTO {PROBE} SELECT g % 10 FROM generate_series(1, 100) g")
    try:
        yield conn
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {PROBE}")
        await conn.close()


async def test_a_migrations_concurrent_build_waits_for_its_tables_turn(
    database: Database, probe: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    holder = await asyncpg.connect(database.dsn)
    statement = f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {PROBE}_x ON {PROBE} (x)"
    try:
        await holder.execute("SELECT pg_advisory_lock($1, $2)", TABLE_LOCK_KEY, table_lock_id(PROBE))
        with caplog.at_level(logging.INFO, logger="app.store.build_lock"):
            running = asyncio.create_task(execute_outside_transaction(probe, statement))

            async def waiting() -> bool:
                return any("waiting for it to end" in r.getMessage() for r in caplog.records)

            await until(waiting, what="the migration to wait for the table", within_s=30)
            assert not running.done()
            assert await index_validity(holder, [f"{PROBE}_x"]) == {}
            await holder.execute("SELECT pg_advisory_unlock_all()")
            await asyncio.wait_for(running, ceiling(60))
        assert await index_validity(holder, [f"{PROBE}_x"]) == {f"{PROBE}_x": True}
    finally:
        await holder.close()


async def test_the_migrations_leave_an_invalid_index_alone_while_its_table_is_being_built(
    database: Database, probe: asyncpg.Connection
) -> None:
    index = f"{PROBE}_unique"
    # a failed CREATE INDEX CONCURRENTLY leaves its index invalid, as a build in progress has it
    with pytest.raises(asyncpg.UniqueViolationError):
        await probe.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {index} ON {PROBE} (x)")
    assert await index_validity(probe, [index]) == {index: False}
    holder = await asyncpg.connect(database.dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1, $2)", TABLE_LOCK_KEY, table_lock_id(PROBE))
        await drop_invalid_indexes(probe)
        assert await index_validity(probe, [index]) == {index: False}  # maybe another session's build
        await holder.execute("SELECT pg_advisory_unlock_all()")
        await drop_invalid_indexes(probe)
        assert await index_validity(probe, [index]) == {}  # nobody builds on the table: a leftover
    finally:
        await holder.close()


async def test_a_replica_waiting_for_the_migrations_never_deadlocks_their_concurrent_build(
    database: Database, probe: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """A session blocked in pg_advisory_lock holds a snapshot that a CREATE INDEX CONCURRENTLY of
    the lock's holder waits for, while it waits for the lock: PostgreSQL cancels one of them (with
    prepare_schema's former pg_advisory_lock this test fails so). The schema lock is polled for."""
    migrating = await asyncpg.connect(database.dsn)  # one replica, in its migrations
    starting = await asyncpg.connect(database.dsn)  # another, starting beside it
    try:
        await prepare_schema(migrating)  # the schema current: the second replica finds nothing to apply
        await migrating.execute("SELECT pg_advisory_lock($1)", 0x7261676F)  # prepare_schema's lock
        with caplog.at_level(logging.INFO, logger="app.store.build_lock"):
            waiting = asyncio.create_task(prepare_schema(starting))
            pid = starting.get_server_pid()

            async def asked() -> bool:
                # the second replica has asked for the lock (however it waits for it)
                query = await probe.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
                return "advisory_lock" in (query or "")

            await until(asked, what="the second replica to ask for the schema lock", within_s=30)
            await probe.execute(f"INSERT INTO {PROBE} VALUES (1)")  # a transaction after its snapshot
            await migrating.execute(f"CREATE INDEX CONCURRENTLY {PROBE}_y ON {PROBE} (x)")
            assert not waiting.done()
            await migrating.execute("SELECT pg_advisory_unlock_all()")
            changes = await asyncio.wait_for(waiting, ceiling(60))
        assert any("schema preparation is running" in r.getMessage() for r in caplog.records)
        assert changes.migrations == []  # the session's schema is current: nothing to apply
        assert await index_validity(probe, [f"{PROBE}_y"]) == {f"{PROBE}_y": True}
    finally:
        await migrating.close()
        await starting.close()
