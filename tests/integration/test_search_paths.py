"""The paths of the search function against the real PostgreSQL + pgvector.

A small clustered corpus is written through the store (so the file catalogue has chunk counts),
the HNSW index is built, and each path is forced by handing the SQL a decision of our own. The
exact path runs twice: on rag_api's rows, and ranked on the compact vector copy (`use_copy`), which
the triggers fill as the corpus is written. That nothing foreign ever comes back, on any path, is
tests/integration/test_scope_everywhere.py's business.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.search.planner import (
    CatalogueStats,
    SearchKnowledge,
    SearchSettings,
    VectorSearchDecision,
    candidate_count,
    plan_vector_search,
)
from app.store import chunks as store
from app.store.db import StoreInfo, bootstrap
from app.store.ids import uuid7_batch
from app.store.scope import Scope
from app.store.vector_index import IndexSpec, build_index
from tests.fixtures.service import Database
from tests.integration.reference import exact_top_k

DIMS = 384
FILES = 100
PER_FILE = 20
OWNER = "owner-a"
SPEC = IndexSpec(DIMS)
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
        assert await build_index(conn, SPEC, m=16, ef_construction=64, memory="256MB") == "valid"
    finally:
        await conn.close()
    yield Corpus(info, file_ids, foreign, queries)


def decision(
    path: str,
    k: int,
    *,
    use_copy: bool = True,
    ef: int = 100,
    check_dims: bool = True,
    max_scan: int = 50_000,
) -> VectorSearchDecision:
    """A decision as the planner would send it, for a path the test chooses."""
    candidates = candidate_count(k) if use_copy else k
    if path == "index":
        return VectorSearchDecision(
            "index", True, k, candidates, check_dims, 0, SPEC.function_name, max(ef, candidates), max_scan
        )
    return VectorSearchDecision("exact", use_copy, k, candidates, check_dims, 0)


def scope_of(corpus: Corpus, files: list[str], owners: tuple[str, ...] = (OWNER,)) -> Scope:
    return Scope.of(corpus.info.collection_id, owners, file_ids=files)


async def run(
    database: Database,
    corpus: Corpus,
    q: np.ndarray,
    files: list[str],
    k: int,
    path: str,
    *,
    use_copy: bool = True,
    ef: int = 100,
) -> store.SearchResult:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        call = decision(path, k, use_copy=use_copy, ef=ef).call(q)
        return await store.search(conn, scope_of(corpus, files), call)
    finally:
        await conn.close()


async def reference(database: Database, corpus: Corpus, q: np.ndarray, files: list[str], k: int) -> list[str]:
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        hits = await exact_top_k(conn, corpus.info, vector=q, file_ids=files, owners=[OWNER], k=k)
        return [str(h.id) for h in hits]
    finally:
        await conn.close()


async def test_exact_and_index_paths_agree(database: Database, corpus: Corpus) -> None:
    files = corpus.file_ids[:50]  # 1,000 visible rows
    for q in corpus.queries:
        exact = await run(database, corpus, q, files, 10, "exact", use_copy=False)
        copy = await run(database, corpus, q, files, 10, "exact")
        index = await run(database, corpus, q, files, 10, "index", ef=400)
        assert exact.path == "exact" and copy.path == "exact" and index.path == "index"
        want = await reference(database, corpus, q, files, 10)
        assert [str(h.id) for h in exact.hits] == want
        # the copy ranks in halfvec, but the distances returned are the exact float32 ones
        assert [str(h.id) for h in copy.hits] == want
        assert [h.distance for h in copy.hits] == [h.distance for h in exact.hits]
        # with a generous ef_search the approximate path finds the same ten
        assert {str(h.id) for h in index.hits} == set(want)
        distances = [h.distance for h in index.hits]
        assert distances == sorted(distances)


PATHS = [("index", True), ("exact", False), ("exact", True)]  # index, exact, exact on the copy


@pytest.mark.parametrize(("path", "use_copy"), PATHS)
async def test_k_rows_for_a_one_percent_allow_list(
    database: Database, corpus: Corpus, path: str, use_copy: bool
) -> None:
    files = [corpus.file_ids[37]]  # 20 of ~2,000 rows: 1 %
    for q in corpus.queries:
        result = await run(database, corpus, q, files, 10, path, use_copy=use_copy)
        assert len(result.hits) == 10
        assert {h.file_id for h in result.hits} == set(files)
        assert [str(h.id) for h in result.hits] == await reference(database, corpus, q, files, 10)


@pytest.mark.parametrize(("path", "use_copy"), PATHS)
async def test_fewer_visible_than_k(database: Database, corpus: Corpus, path: str, use_copy: bool) -> None:
    q = corpus.queries[0]
    result = await run(database, corpus, q, [corpus.file_ids[5]], 50, path, use_copy=use_copy)
    assert len(result.hits) == PER_FILE  # all 20 visible rows, no more
    if path == "index":
        assert result.path == "exact-fallback"  # the walk met fewer than k: the exact scan answered


@pytest.mark.parametrize(("path", "use_copy"), PATHS)
async def test_unknown_files_and_dimension_mismatch(
    database: Database, corpus: Corpus, path: str, use_copy: bool
) -> None:
    q = corpus.queries[0]
    assert (await run(database, corpus, q, ["nope"], 10, path, use_copy=use_copy)).hits == []
    assert (await run(database, corpus, q, [], 10, path, use_copy=use_copy)).hits == []
    other_dims = unit(np.ones(8, dtype=np.float32))
    if path == "index":
        return  # the planner never sends a query of another dimension to a walk (see below)
    found = await run(database, corpus, other_dims, corpus.file_ids, 10, path, use_copy=use_copy)
    assert found.hits == []


async def index_scans(conn: asyncpg.Connection) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(
        await conn.fetchval(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1", SPEC.name
        )
    )


async def search_and_flush_stats(
    conn: asyncpg.Connection, corpus: Corpus, choice: VectorSearchDecision
) -> store.SearchResult:
    """Search all files, then make this backend publish its index statistics."""
    result = await store.search(conn, scope_of(corpus, corpus.file_ids), choice.call(corpus.queries[1]))
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT 1")  # the flush happens at the end of the next transaction
    return result


async def test_index_path_really_walks_the_hnsw_index(database: Database, corpus: Corpus) -> None:
    observer = await asyncpg.connect(database.dsn)
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        before = await index_scans(observer)
        result = await search_and_flush_stats(conn, corpus, decision("index", 10))
        assert result.path == "index"
        after = await index_scans(observer)
        assert after > before
        await search_and_flush_stats(conn, corpus, decision("exact", 10))
        assert await index_scans(observer) == after  # the exact path never touches it
    finally:
        await conn.close()
        await observer.close()


async def test_the_planners_decision_reaches_the_sql(database: Database, corpus: Corpus) -> None:
    """The cost rule (unit-tested in tests/unit/test_planner.py) decides; the SQL follows it."""
    stats = CatalogueStats(
        files=FILES + 1,
        chunks=FILES * PER_FILE + 6,
        uniform_dims=DIMS,
        file_chunks={f: {OWNER: PER_FILE} for f in corpus.file_ids},
        table_rows=FILES * PER_FILE + 6,
    )
    knowledge = SearchKnowledge(stats, use_copy=True, walks={DIMS: SPEC.function_name})
    settings = SearchSettings(exact_max_rows=0, cost_factor=1.0)
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        q = corpus.queries[2]
        for files, want in [(corpus.file_ids[:1], "exact"), (corpus.file_ids[:80], "index")]:
            # 20 of ~2,000 rows: 20^2 < 2,000 x 30 candidates; 1,600^2 >= 2,000 x 30
            choice = plan_vector_search(
                dims=DIMS,
                k=10,
                file_ids=files,
                owners=[OWNER],
                uploader=None,
                knowledge=knowledge,
                settings=settings,
            )
            assert choice.path == want
            result = await store.search(conn, scope_of(corpus, files), choice.call(q))
            assert result.path == want and len(result.hits) == 10
        # a query vector of another dimension never reaches the index function
        other = unit(np.ones(8, dtype=np.float32))
        choice = plan_vector_search(
            dims=8,
            k=10,
            file_ids=corpus.file_ids,
            owners=[OWNER],
            uploader=None,
            knowledge=knowledge,
            settings=settings,
        )
        assert choice.path == "exact"
        assert (await store.search(conn, scope_of(corpus, corpus.file_ids), choice.call(other))).hits == []
    finally:
        await conn.close()


async def test_search_settings_never_leak_into_the_callers_transaction(
    database: Database, corpus: Corpus
) -> None:
    """The walk's settings are function-local: whatever the caller had set stays as it was."""
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    names = [
        "enable_sort",
        "enable_bitmapscan",
        "hnsw.ef_search",
        "hnsw.iterative_scan",
        "hnsw.max_scan_tuples",
        "plan_cache_mode",
    ]

    async def settings() -> list[str]:
        return [await conn.fetchval("SELECT current_setting($1, true)", n) for n in names]

    try:
        # load pgvector's library, so its settings exist (with their defaults) before the first search
        await conn.execute("SELECT vector_dims('[1,2]'::vector)")
        for local in ("off", "on"):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL enable_sort = {local}")
                await conn.execute("SET LOCAL hnsw.ef_search = 77")
                before = await settings()
                for choice in (
                    decision("index", 10),
                    decision("exact", 10),
                    decision("exact", 10, use_copy=False),
                ):
                    result = await store.search(
                        conn, scope_of(corpus, corpus.file_ids), choice.call(corpus.queries[0])
                    )
                    assert len(result.hits) == 10
                assert await settings() == before
                assert before[0] == local and before[2] == "77"
    finally:
        await conn.close()


async def test_stale_uniform_dimension_is_rechecked(database: Database, corpus: Corpus) -> None:
    """The planner skips the per-row dimension check when its statistics say every row matches;
    a row of another dimension (statistics out of date) makes the database recheck, not fail, and
    the retry never returns a row twice."""
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
        files = [odd, *corpus.file_ids[:2]]
        for use_copy in (False, True):
            choice = decision("exact", 50, use_copy=use_copy, check_dims=False)
            result = await store.search(conn, scope_of(corpus, files), choice.call(corpus.queries[0]))
            assert len(result.hits) == 2 * PER_FILE
            assert len({h.id for h in result.hits}) == len(result.hits)
            assert all(h.file_id != odd for h in result.hits)
    finally:
        async with conn.transaction():
            await store.delete_files(conn, scope_of(corpus, [odd]))
        await conn.close()


@pytest.mark.parametrize(("path", "use_copy"), PATHS)
async def test_navigation_pages_are_stored_but_never_returned(
    database: Database, corpus: Corpus, path: str, use_copy: bool
) -> None:
    """A table of contents sits exactly on every query vector: no path returns it, /documents does."""
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    nav = f"file-nav-{path}-{use_copy}"
    rng = np.random.default_rng(11)
    pages = [*corpus.queries, *unit(rng.normal(size=(PER_FILE, DIMS)))]
    marks = ["toc"] * len(corpus.queries) + [None] * PER_FILE
    try:
        async with conn.transaction():
            new = [
                store.NewChunk(
                    chunk_id,
                    vector,
                    f"nav {j}",
                    {"file_id": nav, "user_id": OWNER, "digest": f"n{j}", "source": "n"}
                    | ({"navigation": mark} if mark else {}),
                )
                for j, (chunk_id, vector, mark) in enumerate(
                    zip(uuid7_batch(len(pages)), pages, marks, strict=True)
                )
            ]
            record = store.FileRecord(nav, OWNER, OWNER, "n", None, 1, None, None, len(new), "test", DIMS)
            await store.replace_file(conn, corpus.info, record, new)
        files = [nav, *corpus.file_ids[:3]]
        for q in corpus.queries:
            result = await store.search(
                conn, scope_of(corpus, files), decision(path, 10, use_copy=use_copy).call(q)
            )
            assert len(result.hits) == 10
            assert all("navigation" not in h.metadata for h in result.hits)
        stored = await store.documents(conn, scope_of(corpus, [nav]), limit=1000)
        assert sum(1 for c in stored if c.metadata.get("navigation") == "toc") == len(corpus.queries)
    finally:
        async with conn.transaction():
            await store.delete_files(conn, scope_of(corpus, [nav]))
        await conn.close()
