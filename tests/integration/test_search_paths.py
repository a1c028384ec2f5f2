"""The exact and HNSW paths of the search function against the real PostgreSQL + pgvector.

A small clustered corpus is written through the store (so the file catalogue has chunk counts),
the HNSW index is built, and each path is forced through the plan's threshold. The exact path runs
twice: on rag_api's rows, and ranked on the compact vector copy (`use_copy`), which the triggers
fill as the corpus is written.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.store import chunks as store
from app.store.db import StoreInfo, bootstrap
from app.store.ids import uuid7_batch
from app.store.vector_index import build_index, index_spec
from tests.fixtures.service import Database

DIMS = 384
FILES = 100
PER_FILE = 20
OWNER = "owner-a"
SPEC = index_spec(DIMS)
assert SPEC is not None
FOREIGN = "owner-b"


@dataclass
class Corpus:
    """A collection with FILES files of PER_FILE chunks owned by OWNER, plus one foreign file."""

    info: StoreInfo
    file_ids: list[str]
    foreign_file: str
    queries: np.ndarray


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
async def corpus(database: Database) -> AsyncIterator[Corpus]:
    rng = np.random.default_rng(7)
    info = await bootstrap(database.dsn, f"paths_{uuid.uuid4().hex[:8]}")
    centres = unit(rng.normal(size=(12, DIMS)))
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    file_ids = [f"file-{i:03d}" for i in range(FILES)]
    try:
        for fid in file_ids:
            vecs = unit(centres[rng.integers(0, 12)] + 0.35 * rng.normal(size=(PER_FILE, DIMS)))
            ids = uuid7_batch(PER_FILE)
            new = [
                store.NewChunk(
                    ids[j],
                    vecs[j],
                    f"{fid} chunk {j}",
                    {"file_id": fid, "user_id": OWNER, "digest": f"{fid}-{j}", "source": f"{fid}.txt"},
                )
                for j in range(PER_FILE)
            ]
            record = store.FileRecord(
                fid, OWNER, OWNER, f"{fid}.txt", "text/plain", 1, None, None, PER_FILE, "test", DIMS
            )
            async with conn.transaction():
                await store.replace_file(conn, info, record, new)
        queries = unit(centres[:6] + 0.3 * rng.normal(size=(6, DIMS)))
        # a foreign file whose chunks sit exactly on the query vectors: nearer than anything allowed
        foreign = "file-000"  # same id as an allowed file, other owner
        ids = uuid7_batch(len(queries))
        new = [
            store.NewChunk(
                ids[j],
                queries[j],
                f"FOREIGN {j}",
                {"file_id": foreign, "user_id": FOREIGN, "digest": f"f-{j}", "source": "x"},
            )
            for j in range(len(queries))
        ]
        async with conn.transaction():
            await store.replace_file(
                conn,
                info,
                store.FileRecord(foreign, FOREIGN, FOREIGN, "x", None, 1, None, None, len(new), "test", DIMS),
                new,
            )
        await conn.execute("ANALYZE langchain_pg_embedding")
        spec = index_spec(DIMS)
        assert spec is not None
        assert await build_index(conn, spec, m=16, ef_construction=64, memory="256MB")
    finally:
        await conn.close()
    yield Corpus(info, file_ids, foreign, queries)


async def run(
    database: Database,
    corpus: Corpus,
    q: np.ndarray,
    files: list[str],
    k: int,
    *,
    exact_max: int,
    ef: int = 100,
    use_copy: bool = False,
) -> store.SearchResult:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        # cost_factor 0: above exact_max the index path is taken however small the visible share
        plan = store.SearchPlan(
            exact_max_rows=exact_max,
            estimate=len(set(files)) * PER_FILE,
            index_function=SPEC.function_name,
            index_dims=DIMS,
            cost_factor=0.0,
            ef_search=ef,
            max_scan_tuples=50_000,
            use_copy=use_copy,
        )
        return await store.search(conn, corpus.info, vector=q, file_ids=files, owners=[OWNER], k=k, plan=plan)
    finally:
        await conn.close()


async def reference(database: Database, corpus: Corpus, q: np.ndarray, files: list[str], k: int) -> list[str]:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        hits = await store.search_exact_reference(
            conn, corpus.info, vector=q, file_ids=files, owners=[OWNER], k=k
        )
        return [str(h.id) for h in hits]
    finally:
        await conn.close()


async def test_exact_and_index_paths_agree(database: Database, corpus: Corpus) -> None:
    files = corpus.file_ids[:50]  # 1,000 visible rows
    for q in corpus.queries:
        exact = await run(database, corpus, q, files, 10, exact_max=10**9)
        copy = await run(database, corpus, q, files, 10, exact_max=10**9, use_copy=True)
        index = await run(database, corpus, q, files, 10, exact_max=0, ef=400, use_copy=True)
        assert exact.path == "exact" and copy.path == "exact" and index.path == "index"
        assert exact.visible_estimate == 50 * PER_FILE
        want = await reference(database, corpus, q, files, 10)
        assert [str(h.id) for h in exact.hits] == want
        # the copy ranks in halfvec, but the distances returned are the exact float32 ones
        assert [str(h.id) for h in copy.hits] == want
        assert [h.distance for h in copy.hits] == [h.distance for h in exact.hits]
        # with a generous ef_search the approximate path finds the same ten
        assert {str(h.id) for h in index.hits} == set(want)
        distances = [h.distance for h in index.hits]
        assert distances == sorted(distances)


PATHS = [(0, True), (10**9, False), (10**9, True)]  # index, exact, exact on the copy


@pytest.mark.parametrize(("exact_max", "use_copy"), PATHS)
async def test_k_rows_for_a_one_percent_allow_list(
    database: Database, corpus: Corpus, exact_max: int, use_copy: bool
) -> None:
    files = [corpus.file_ids[37]]  # 20 of ~2,000 rows: 1 %
    for q in corpus.queries:
        result = await run(database, corpus, q, files, 10, exact_max=exact_max, use_copy=use_copy)
        assert len(result.hits) == 10
        assert {h.file_id for h in result.hits} == set(files)
        assert [str(h.id) for h in result.hits] == await reference(database, corpus, q, files, 10)


@pytest.mark.parametrize(("exact_max", "use_copy"), PATHS)
async def test_foreign_nearest_chunks_never_returned(
    database: Database, corpus: Corpus, exact_max: int, use_copy: bool
) -> None:
    files = [corpus.foreign_file, *corpus.file_ids[1:30]]
    for q in corpus.queries:
        result = await run(database, corpus, q, files, 10, exact_max=exact_max, use_copy=use_copy)
        assert len(result.hits) == 10
        assert all(h.metadata["user_id"] == OWNER for h in result.hits)
        assert all(not h.text.startswith("FOREIGN") for h in result.hits)


@pytest.mark.parametrize(("exact_max", "use_copy"), PATHS)
async def test_fewer_visible_than_k(
    database: Database, corpus: Corpus, exact_max: int, use_copy: bool
) -> None:
    q = corpus.queries[0]
    result = await run(database, corpus, q, [corpus.file_ids[5]], 50, exact_max=exact_max, use_copy=use_copy)
    assert len(result.hits) == PER_FILE  # all 20 visible rows, no more


@pytest.mark.parametrize(("exact_max", "use_copy"), PATHS)
async def test_unknown_files_and_dimension_mismatch(
    database: Database, corpus: Corpus, exact_max: int, use_copy: bool
) -> None:
    q = corpus.queries[0]
    assert (await run(database, corpus, q, ["nope"], 10, exact_max=exact_max, use_copy=use_copy)).hits == []
    other_dims = unit(np.ones(8, dtype=np.float32))
    found = await run(
        database, corpus, other_dims, corpus.file_ids, 10, exact_max=exact_max, use_copy=use_copy
    )
    assert found.hits == []


async def index_scans(conn: asyncpg.Connection) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    spec = index_spec(DIMS)
    assert spec is not None
    return int(
        await conn.fetchval(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1", spec.name
        )
    )


async def search_and_flush_stats(
    conn: asyncpg.Connection, corpus: Corpus, plan: store.SearchPlan
) -> store.SearchResult:
    """Search all files, then make this backend publish its index statistics."""
    result = await store.search(
        conn, corpus.info, vector=corpus.queries[1], file_ids=corpus.file_ids, owners=[OWNER], k=10, plan=plan
    )
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT 1")  # the flush happens at the end of the next transaction
    return result


async def test_index_path_really_walks_the_hnsw_index(database: Database, corpus: Corpus) -> None:
    observer = await asyncpg.connect(database.dsn)
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        before = await index_scans(observer)
        plan = store.SearchPlan(
            exact_max_rows=0,
            estimate=FILES * PER_FILE,
            index_function=SPEC.function_name,
            index_dims=DIMS,
            cost_factor=0,
            use_copy=True,
        )
        result = await search_and_flush_stats(conn, corpus, plan)
        assert result.path == "index"
        after = await index_scans(observer)
        assert after > before
        exact_plan = store.SearchPlan(
            exact_max_rows=10**9, index_function=SPEC.function_name, index_dims=DIMS, use_copy=True
        )
        await search_and_flush_stats(conn, corpus, exact_plan)
        assert await index_scans(observer) == after  # the exact path never touches it
    finally:
        await conn.close()
        await observer.close()


async def test_cost_rule_keeps_small_visible_shares_exact(database: Database, corpus: Corpus) -> None:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:

        def plan(files: int) -> store.SearchPlan:
            return store.SearchPlan(
                exact_max_rows=0,
                estimate=files * PER_FILE,
                index_function=SPEC.function_name,
                index_dims=DIMS,
                cost_factor=1.0,
                ef_search=100,
                use_copy=True,
            )

        q = corpus.queries[2]
        # 20 of ~2,000 rows: 20^2 = 400 < 2,000 x 30 candidates, so the exact scan answers
        small = await store.search(
            conn, corpus.info, vector=q, file_ids=corpus.file_ids[:1], owners=[OWNER], k=10, plan=plan(1)
        )
        assert small.path == "exact"
        # 1,600 of ~2,000 rows: 1,600^2 = 2.56M >= 2,000 x 30, so the index walks
        large = await store.search(
            conn, corpus.info, vector=q, file_ids=corpus.file_ids[:80], owners=[OWNER], k=10, plan=plan(80)
        )
        assert large.path == "index"
        # a query vector of another dimension never reaches the index function
        other = unit(np.ones(8, dtype=np.float32))
        mismatch = await store.search(
            conn, corpus.info, vector=other, file_ids=corpus.file_ids, owners=[OWNER], k=10, plan=plan(FILES)
        )
        assert mismatch.hits == []
    finally:
        await conn.close()


async def test_stale_uniform_dimension_is_rechecked(database: Database, corpus: Corpus) -> None:
    """The service skips the per-row dimension check when its statistics say every row matches;
    a row of another dimension (statistics out of date) makes the database recheck, not fail."""
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    odd = "file-odd-dims"
    try:
        async with conn.transaction():
            ids = uuid7_batch(2)
            new = [
                store.NewChunk(
                    ids[j],
                    unit(np.ones(8, dtype=np.float32)),
                    f"odd {j}",
                    {"file_id": odd, "user_id": OWNER, "digest": f"o{j}", "source": "o"},
                )
                for j in range(2)
            ]
            await store.replace_file(
                conn,
                corpus.info,
                store.FileRecord(odd, OWNER, OWNER, "o", None, 1, None, None, 2, "other-model", 8),
                new,
            )
        plan = store.SearchPlan(exact_max_rows=10**9, estimate=60, check_dims=False)
        result = await store.search(
            conn,
            corpus.info,
            vector=corpus.queries[0],
            file_ids=[odd, *corpus.file_ids[:2]],
            owners=[OWNER],
            k=10,
            plan=plan,
        )
        assert len(result.hits) == 10
        assert all(h.file_id != odd for h in result.hits)
    finally:
        async with conn.transaction():
            await store.delete_files(
                conn, corpus.info, file_ids=[odd], owners=[OWNER], uploader=OWNER, any_owner=False
            )
        await conn.close()
