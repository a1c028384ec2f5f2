"""Namespace indexes against the real PostgreSQL + pgvector: built, walked, scoped, dropped.

A collection of its own holds a large Agent namespace, a small one, the caller's own files and a
foreign namespace whose rows sit exactly on the questions. The maintenance pass (with a low
threshold) builds an index for the large namespace only; the planner sends a whole-KB search to
its walk; the answer is the exact one over exactly the visible rows (the caller's own file
included, which the walk never meets); the walk really uses the partial index; a namespace that
shrinks loses its index.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.config import Settings
from app.config_sections import SearchSettings, VectorIndexSettings
from app.maintenance.namespace_task import NamespaceIndexTask
from app.search.planner import CatalogueStats, SearchKnowledge, plan_vector_search
from app.search.state import SearchState
from app.store import chunks as store
from app.store.catalogue import read_catalogue
from app.store.db import StoreInfo, bootstrap
from app.store.ids import uuid7_batch
from app.store.maintenance import MaintenanceStore
from app.store.namespace_index import namespace_index_name
from app.store.scope import Scope
from tests.fixtures.service import Database
from tests.integration.reference import exact_top_k

DIMS = 48
PER_FILE = 25
# quotes, a backslash and non-ASCII: the index predicate is quoted by the server, never by us
BIG = "agent-big'; DROP TABLE ragoverlay_vectors; -- \\ ü"
SMALL = "agent-small"
USER = "user-1"
FOREIGN = "agent-foreign"
MIN_ROWS = 1000


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class Corpus:
    info: StoreInfo
    big_files: list[str]
    user_file: str
    queries: np.ndarray


async def write_file(
    conn: asyncpg.Connection,
    info: StoreInfo,
    fid: str,
    owner: str,
    vecs: np.ndarray,
    uploader: str | None = None,
) -> None:
    ids = uuid7_batch(len(vecs))
    new = [
        store.NewChunk(
            ids[j], vecs[j], f"{owner} {fid} {j}", {"file_id": fid, "user_id": owner, "source": fid}
        )
        for j in range(len(vecs))
    ]
    record = store.FileRecord(
        fid, owner, uploader or owner, f"{fid}.txt", "text/plain", 1, None, None, len(vecs), "test", DIMS
    )
    async with conn.transaction():
        await store.replace_file(conn, info, record, new)


@pytest.fixture(scope="module")
async def corpus(database: Database) -> AsyncIterator[Corpus]:
    rng = np.random.default_rng(11)
    info = await bootstrap(database.dsn, f"ns_{uuid.uuid4().hex[:8]}")
    centres = unit(rng.normal(size=(8, DIMS)))
    queries = unit(centres[:4] + 0.3 * rng.normal(size=(4, DIMS)))
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    big_files = [f"kb-{i:03d}" for i in range(60)]  # 1,500 rows
    try:
        for fid in big_files:
            vecs = unit(centres[rng.integers(0, 8)] + 0.4 * rng.normal(size=(PER_FILE, DIMS)))
            await write_file(conn, info, fid, BIG, vecs)
        for i in range(8):  # 200 rows: below the threshold
            await write_file(conn, info, f"small-{i}", SMALL, unit(rng.normal(size=(PER_FILE, DIMS))))
        # the caller's own attachment, nearer to every question than anything in the KB
        await write_file(conn, info, "mine", USER, unit(queries + 0.01 * rng.normal(size=queries.shape)))
        # a foreign namespace reusing a KB file id, its rows exactly on the questions
        await write_file(conn, info, big_files[0], FOREIGN, queries)
        await conn.execute("ANALYZE ragoverlay_vectors")
    finally:
        await conn.close()
    yield Corpus(info, big_files, "mine", queries)


def settings(**extra: object) -> Settings:
    values = {"HNSW_NAMESPACE_MIN_ROWS": MIN_ROWS, "HNSW_M": 8, "HNSW_EF_CONSTRUCTION": 32, **extra}
    return Settings(_env_file=None, **values)  # type: ignore[call-arg,arg-type]


async def one_pass(database: Database, corpus: Corpus, **extra: object) -> SearchState:
    state = SearchState()
    state.set_copy_state("ready")
    indexes = VectorIndexSettings.from_settings(settings(**extra))
    task = NamespaceIndexTask(indexes, MaintenanceStore(database.dsn, corpus.info), state)
    await task(lambda _: None)
    return state


async def index_scans(conn: asyncpg.Connection, name: str) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    value = await conn.fetchval(
        "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1", name
    )
    return int(value)


async def test_a_large_namespace_gets_its_own_index_and_answers_exactly(
    database: Database, corpus: Corpus
) -> None:
    state = await one_pass(database, corpus)
    walks = state.knowledge().namespaces
    assert set(walks) == {(BIG, DIMS)}  # the small namespace and the caller's stay on the global path
    assert walks[(BIG, DIMS)].rows == 60 * PER_FILE
    name = namespace_index_name(corpus.info.collection_id, BIG, DIMS)

    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    observer = await asyncpg.connect(database.dsn)
    try:
        stats = CatalogueStats.from_snapshot(await read_catalogue(conn, corpus.info.collection_id))
        knowledge = SearchKnowledge(stats, use_copy=True, walks={}, namespaces=walks)
        files = [*corpus.big_files, corpus.user_file]
        owners = (BIG, USER)
        plan_settings = SearchSettings(exact_max_rows=100, ef_search=400)
        for q in corpus.queries:
            decision = plan_vector_search(
                dims=DIMS,
                k=10,
                file_ids=files,
                owners=owners,
                uploader=USER,
                knowledge=knowledge,
                settings=plan_settings,
            )
            assert decision.path == "index" and decision.namespace == BIG
            before = await index_scans(observer, name)
            scope = Scope.of(corpus.info.collection_id, owners, uploader=USER, file_ids=files)
            result = await store.search(conn, scope, decision.call(q))
            await conn.execute("SELECT pg_stat_force_next_flush()")
            await conn.execute("SELECT 1")
            assert await index_scans(observer, name) > before  # the partial index, not the global one
            assert result.path == "namespace-index"
            want = await exact_top_k(conn, corpus.info, vector=q, file_ids=files, owners=owners, k=10)
            assert [h.id for h in result.hits] == [h.id for h in want]
            # the caller's own row (outside the namespace) is found; the foreign twin never is
            owners_seen = {h.metadata["user_id"] for h in result.hits}
            assert USER in owners_seen and owners_seen <= set(owners)
    finally:
        await conn.close()
        await observer.close()


async def test_the_walk_never_returns_what_the_allow_list_leaves_out(
    database: Database, corpus: Corpus
) -> None:
    state = await one_pass(database, corpus)
    walk = state.knowledge().namespaces[(BIG, DIMS)]
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        files = corpus.big_files[:40]  # two thirds of the namespace
        scope = Scope.of(corpus.info.collection_id, (BIG,), file_ids=files)
        stats = CatalogueStats.from_snapshot(await read_catalogue(conn, corpus.info.collection_id))
        knowledge = SearchKnowledge(stats, use_copy=True, namespaces={(BIG, DIMS): walk})
        decision = plan_vector_search(
            dims=DIMS,
            k=10,
            file_ids=files,
            owners=(BIG,),
            uploader=None,
            knowledge=knowledge,
            settings=SearchSettings(exact_max_rows=100, ef_search=400),
        )
        assert decision.namespace == BIG
        for q in corpus.queries:
            result = await store.search(conn, scope, decision.call(q))
            assert {h.file_id for h in result.hits} <= set(files)
            want = await exact_top_k(conn, corpus.info, vector=q, file_ids=files, owners=(BIG,), k=10)
            assert [h.id for h in result.hits] == [h.id for h in want]
    finally:
        await conn.close()


async def test_a_namespace_that_shrinks_loses_its_index(database: Database) -> None:
    rng = np.random.default_rng(3)
    info = await bootstrap(database.dsn, f"ns_shrink_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        for i in range(44):  # 1,100 rows
            await write_file(conn, info, f"f{i}", BIG, unit(rng.normal(size=(PER_FILE, DIMS))))
        corpus = Corpus(info, [], "", np.zeros((0, DIMS)))
        assert set((await one_pass(database, corpus)).knowledge().namespaces) == {(BIG, DIMS)}
        name = namespace_index_name(info.collection_id, BIG, DIMS)
        present = "SELECT count(*) FROM pg_class WHERE relname = $1"
        assert await conn.fetchval(present, name) == 1
        # 700 rows: below the threshold but above half of it: kept (no rebuild near the line)
        await store.delete_files(
            conn, Scope.of(info.collection_id, (BIG,), file_ids=[f"f{i}" for i in range(16)])
        )
        assert set((await one_pass(database, corpus)).knowledge().namespaces) == {(BIG, DIMS)}
        # 450 rows: dropped
        await store.delete_files(
            conn, Scope.of(info.collection_id, (BIG,), file_ids=[f"f{i}" for i in range(16, 26)])
        )
        assert (await one_pass(database, corpus)).knowledge().namespaces == {}
        assert await conn.fetchval(present, name) == 0
        # another collection's namespace indexes are none of this pass's business (shared database)
    finally:
        await conn.close()


async def test_no_index_when_turned_off(database: Database, corpus: Corpus) -> None:
    state = await one_pass(database, corpus, HNSW_NAMESPACE_MAX=0)
    assert state.knowledge().namespaces == {}
    # ... and the index built by the tests above is gone: turning it off drops what exists
    conn = await asyncpg.connect(database.dsn)
    try:
        name = namespace_index_name(corpus.info.collection_id, BIG, DIMS)
        assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", name) == 0
    finally:
        await conn.close()
