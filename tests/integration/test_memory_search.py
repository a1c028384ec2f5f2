"""V1's exact search on vectors held in memory, against the real PostgreSQL + pgvector.

The revisions (migration 0016, triggers in sql/41_vector_files.sql) follow every write of the
compact copy; the memory scan answers what the database's exact scan answers; it never returns a
row the scope does not show, whatever the cache holds; a changed file is loaded again; a candidate
that vanished sends the search back to the database.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import asyncpg
import httpx
import numpy as np
import pytest

from app.config import Settings
from app.config_sections import SearchSettings
from app.search.planner import CatalogueStats, VectorSearchDecision, candidate_count
from app.search.service import INLINE_LOAD_FILES, SearchService
from app.search.vector_cache import Nearest
from app.store import chunks as store
from app.store import memory_search
from app.store.db import StoreInfo, bootstrap
from app.store.scope import Scope
from tests.contract.helpers import agent_id, upload
from tests.contract.test_query import FACTS, paragraphs
from tests.fixtures.patience import ceiling
from tests.fixtures.service import auth, new_id
from tests.integration.reference import exact_top_k
from tests.integration.test_vector_copy import COLUMNS, connect, fresh_dsn, rag_api_row

__all__ = ["fresh_dsn"]  # the fixture, imported for this module's tests

DIMS = 8
K = 5


def decision(k: int = K) -> VectorSearchDecision:
    return VectorSearchDecision("exact", True, k, candidate_count(k), True, 0, in_memory=True)


async def revisions(conn: asyncpg.Connection) -> dict[tuple[str, str], int]:
    rows = await conn.fetch("SELECT owner, file_id, revision FROM ragoverlay_vector_files")
    return {(r["owner"], r["file_id"]): r["revision"] for r in rows}


async def test_every_write_of_the_copy_gives_the_files_it_touched_a_new_revision(fresh_dsn: str) -> None:
    info = await bootstrap(fresh_dsn, "vf")
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(1)
        a = [rag_api_row(info, "fa", "u1", rng.normal(size=DIMS)) for _ in range(3)]
        b = [rag_api_row(info, "fb", "u1", rng.normal(size=DIMS)) for _ in range(2)]
        legacy = [rag_api_row(info, "fl", None, rng.normal(size=DIMS))]
        await conn.copy_records_to_table("langchain_pg_embedding", records=a + b + legacy, columns=COLUMNS)
        first = await revisions(conn)
        assert set(first) == {("u1", "fa"), ("u1", "fb")}  # legacy rows are not tracked

        await conn.execute("DELETE FROM langchain_pg_embedding WHERE uuid = $1", a[0][0])
        second = await revisions(conn)
        assert second[("u1", "fa")] > first[("u1", "fa")]
        assert second[("u1", "fb")] == first[("u1", "fb")]

        # an owner change: the file under both owners changes
        await conn.execute(
            "UPDATE langchain_pg_embedding SET cmetadata = "
            "replace(cmetadata::text, '\"u1\"', '\"u2\"')::json WHERE uuid = $1",
            b[0][0],
        )
        third = await revisions(conn)
        assert third[("u1", "fb")] > second[("u1", "fb")]
        assert ("u2", "fb") in third
        assert third[("u1", "fa")] == second[("u1", "fa")]

        # every row of a file gone: the file stays, at a new revision, with nothing to load
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE custom_id = 'fa'")
        fourth = await revisions(conn)
        assert fourth[("u1", "fa")] > third[("u1", "fa")]

        await conn.execute("TRUNCATE langchain_pg_embedding")
        assert await revisions(conn) == {}
    finally:
        await conn.close()


async def test_files_copied_before_the_triggers_get_a_revision_when_the_code_is_applied(
    fresh_dsn: str,
) -> None:
    info = await bootstrap(fresh_dsn, "vf")
    conn = await connect(fresh_dsn)
    try:
        rng = np.random.default_rng(2)
        await conn.execute("ALTER TABLE ragoverlay_vectors DISABLE TRIGGER USER")
        rows = [rag_api_row(info, f"f{i}", "u1", rng.normal(size=DIMS)) for i in range(4)]
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        await conn.execute("ALTER TABLE ragoverlay_vectors ENABLE TRIGGER USER")
        assert await revisions(conn) == {}
        from app.store.migrate import load_code

        (code,) = [c for c in load_code() if c.name == "41_vector_files.sql"]
        await conn.execute(code.sql)
        assert set(await revisions(conn)) == {("u1", f"f{i}") for i in range(4)}
    finally:
        await conn.close()


@pytest.fixture
async def service(
    fresh_dsn: str, settings_factory: Callable[..., Settings]
) -> AsyncIterator[tuple[SearchService, StoreInfo, asyncpg.Pool]]:
    info = await bootstrap(fresh_dsn, "mem")
    settings = settings_factory(database_url=fresh_dsn, collection_name="mem")

    async def init(conn: asyncpg.Connection) -> None:
        from pgvector.asyncpg import register_vector

        await register_vector(conn)

    pool = await asyncpg.create_pool(fresh_dsn, min_size=1, max_size=2, init=init)
    try:
        search = SearchService(SearchSettings.from_settings(settings), pool, info, embedder=None)  # type: ignore[arg-type]
        yield search, info, pool
    finally:
        await pool.close()


async def test_the_memory_scan_answers_as_the_database_does_and_never_leaks(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool],
) -> None:
    search, info, pool = service
    rng = np.random.default_rng(3)
    q = rng.normal(size=DIMS).astype(np.float32)
    files = [f"f{i}" for i in range(12)]
    mine = [rag_api_row(info, f, "me", rng.normal(size=DIMS), f"{f} {j}") for f in files for j in range(4)]
    # another namespace holds the same file ids, nearest to the query of all
    theirs = [rag_api_row(info, f, "them", q + 0.01 * rng.normal(size=DIMS), f"theirs {f}") for f in files]
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=mine + theirs, columns=COLUMNS)

        # they search first: their rows are now held in memory too
        theirs_scope = Scope.of(info.collection_id, ["them"], file_ids=files)
        got = await search.search_in_memory(conn, theirs_scope, decision(), q, 10)
        assert got is not None and got.path == "memory"
        assert {h.text for h in got.hits} <= {f"theirs {f}" for f in files}

        for visible in (files, files[:3], files[5:6], ["nothing-here"]):
            scope = Scope.of(info.collection_id, ["me"], file_ids=visible)
            got = await search.search_in_memory(conn, scope, decision(), q, 10)
            want = await exact_top_k(conn, info, vector=q, file_ids=visible, owners=["me"], k=K)
            assert got is not None
            assert [h.id for h in got.hits] == [h.id for h in want]
            assert all(not h.text.startswith("theirs") for h in got.hits)
            for hit, ref in zip(got.hits, want, strict=True):
                assert hit.distance == pytest.approx(ref.distance, abs=1e-6)

        # their Agent's files, listed by me without its namespace: nothing, in memory or not
        scope = Scope.of(info.collection_id, ["me"], file_ids=["theirs-only"])
        got = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert got is not None and got.hits == []


async def test_a_changed_file_is_loaded_again_and_a_deleted_one_is_gone(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool],
) -> None:
    search, info, pool = service
    rng = np.random.default_rng(4)
    q = rng.normal(size=DIMS).astype(np.float32)
    files = ["a", "b", "c"]
    rows = [rag_api_row(info, f, "me", rng.normal(size=DIMS), f"{f} old") for f in files for _ in range(3)]
    scope = Scope.of(info.collection_id, ["me"], file_ids=files)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        first = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert first is not None and len(first.hits) == K
        loads = search.vector_cache.loads
        again = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert again is not None and search.vector_cache.loads == loads  # nothing loaded twice

        # file a re-embedded (rag_api: delete, then insert), with a row nearest to the query
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE custom_id = 'a'")
        new = rag_api_row(info, "a", "me", q.copy(), "a new")
        await conn.copy_records_to_table("langchain_pg_embedding", records=[new], columns=COLUMNS)
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE custom_id = 'c'")
        got = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert got is not None
        assert got.hits[0].id == new[0]
        assert not any(h.text in ("a old", "c old") for h in got.hits)
        want = await exact_top_k(conn, info, vector=q, file_ids=files, owners=["me"], k=K)
        assert [h.id for h in got.hits] == [h.id for h in want]


async def test_a_candidate_gone_behind_the_cache_sends_the_search_to_the_database(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    search, info, pool = service
    rng = np.random.default_rng(5)
    q = rng.normal(size=DIMS).astype(np.float32)
    rows = [rag_api_row(info, "a", "me", rng.normal(size=DIMS), f"a {i}") for i in range(8)]
    scope = Scope.of(info.collection_id, ["me"], file_ids=["a"])
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        # the cache answers with rows that no longer exist (as if deleted between two statements)
        gone = [uuid.uuid4() for _ in range(K)]
        monkeypatch.setattr(search.vector_cache, "nearest", lambda *a, **kw: Nearest(gone, ["a"], 8))
        assert await search.search_in_memory(conn, scope, decision(), q, 10) is None
        result = await store.search(conn, scope, decision().call(q))
        assert result.path == "exact" and len(result.hits) == K


async def test_a_knowledge_base_search_over_http_takes_the_memory_path(client: httpx.AsyncClient) -> None:
    """LibreChat's batch of 1,000 ids (most of them not stored yet): scanned in memory, same answer."""
    state = client.app.state.services.search.state  # type: ignore[attr-defined]
    await asyncio.wait_for(state.copy_ready.wait(), ceiling(60))  # the memory scan reads the vector copy
    user, agent = new_id("user"), agent_id()
    stored = [new_id() for _ in range(3)]
    for i, fid in enumerate(stored):
        r = await upload(client, fid, f"f{i}.txt", paragraphs(*FACTS[i::3]), auth(user), entity_id=agent)
        assert r.status_code == 200, r.text
    files = [*stored, *(new_id() for _ in range(997))]
    body = {"query": "What does photosynthesis produce?", "file_ids": files, "k": 3, "entity_id": agent}
    r = await client.post("/query_multiple", json=body, headers=auth(user))
    assert r.status_code == 200, r.text
    assert 'desc="memory"' in r.headers["server-timing"]
    got = [(p[0]["metadata"]["file_id"], p[0]["page_content"]) for p in r.json()]
    assert got and {f for f, _ in got} <= set(stored)
    # the same question scanned in the database (a short list: one statement) agrees
    r = await client.post("/query_multiple", json={**body, "file_ids": stored}, headers=auth(user))
    assert 'desc="exact"' in r.headers["server-timing"]
    assert [(p[0]["metadata"]["file_id"], p[0]["page_content"]) for p in r.json()] == got
    # another user, the same 1,000 ids without the Agent: nothing
    r = await client.post("/query_multiple", json={**body, "entity_id": None}, headers=auth(new_id("user")))
    assert r.status_code == 404 and 'desc="memory"' in r.headers["server-timing"]


async def test_a_namespace_not_held_is_answered_by_the_database_and_loaded_beside_it(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool],
) -> None:
    search, info, pool = service
    rng = np.random.default_rng(6)
    q = rng.normal(size=DIMS).astype(np.float32)
    files = [f"kb-{i}" for i in range(INLINE_LOAD_FILES + 8)]
    rows = [rag_api_row(info, f, "agent", rng.normal(size=DIMS), f"{f} {j}") for f in files for j in range(2)]
    scope = Scope.of(info.collection_id, ["me", "agent"], file_ids=files)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        assert await search.search_in_memory(conn, scope, decision(), q, 10) is None
        # asked again at once: the database again while the load runs (or memory, once done), and
        # never a second load of the same namespace
        again = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert again is None or again.path == "memory"
    await search.settle()
    assert search.vector_cache.loads == len(files)
    async with pool.acquire() as conn:
        got = await search.search_in_memory(conn, scope, decision(), q, 10)
        want = await exact_top_k(conn, info, vector=q, file_ids=files, owners=["agent"], k=K)
    assert got is not None and got.path == "memory"
    assert [h.id for h in got.hits] == [h.id for h in want]


async def test_a_held_knowledge_base_is_answered_in_one_statement(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files held already: ranked first, then one statement confirms the visible files and re-reads."""
    search, info, pool = service
    rng = np.random.default_rng(8)
    q = rng.normal(size=DIMS).astype(np.float32)
    files = [f"kb-{i}" for i in range(10)]
    rows = [rag_api_row(info, f, "agent", rng.normal(size=DIMS), f"{f} {j}") for f in files for j in range(3)]
    # the caller's own upload into the Agent's namespace, listed without naming the Agent
    mine = [rag_api_row(info, "upload", "agent", q + 0.01 * rng.normal(size=DIMS), "my upload")]
    scope = Scope.of(info.collection_id, ["me", "agent"], uploader="me", file_ids=files)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows + mine, columns=COLUMNS)
        await conn.execute(
            "INSERT INTO ragoverlay_files (collection_id, file_id, owner, uploader, filename, chunk_count) "
            "VALUES ($1, 'upload', 'agent', 'me', 'upload.txt', 1)",
            info.collection_id,
        )
        first = await search.search_in_memory(conn, scope, decision(), q, 10)  # loads them
        assert first is not None and first.path == "memory"

        calls: list[int] = []
        real = memory_search.visible_files

        async def counted(*args: object, **kwargs: object) -> list[memory_search.VisibleRevision]:
            calls.append(1)
            return await real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(memory_search, "visible_files", counted)
        got = await search.search_in_memory(conn, scope, decision(), q, 10)
        want = await exact_top_k(conn, info, vector=q, file_ids=files, owners=["agent"], k=K)
        assert got is not None and [h.id for h in got.hits] == [h.id for h in want]
        assert calls == []  # no separate read of the visible files

        # a file re-embedded behind the cache's back: the guess is refused, the three steps answer
        await conn.execute("DELETE FROM langchain_pg_embedding WHERE custom_id = 'kb-3'")
        near = rag_api_row(info, "kb-3", "agent", q.copy(), "kb-3 new")
        await conn.copy_records_to_table("langchain_pg_embedding", records=[near], columns=COLUMNS)
        got = await search.search_in_memory(conn, scope, decision(), q, 10)
        assert got is not None and got.hits[0].id == near[0] and calls == [1]

        # an upload of the caller's into the Agent's namespace, listed without the Agent: the
        # catalogue's delegated uploads name the namespace to guess in
        upload_scope = Scope.of(info.collection_id, ["me"], uploader="me", file_ids=[*files, "upload"])
        search.state.set_stats(CatalogueStats(delegated={"upload": {"agent": "me"}}))
        await search.search_in_memory(conn, upload_scope, decision(), q, 10)  # loads "upload"
        calls.clear()
        got = await search.search_in_memory(conn, upload_scope, decision(), q, 10)
        assert got is not None and [h.text for h in got.hits] == ["my upload"] and calls == []


async def test_a_guess_the_database_does_not_confirm_returns_no_row(
    service: tuple[SearchService, StoreInfo, asyncpg.Pool],
) -> None:
    _, info, pool = service
    rng = np.random.default_rng(9)
    q = rng.normal(size=DIMS).astype(np.float32)
    rows = [
        rag_api_row(info, f, "me", rng.normal(size=DIMS), f"{f} {j}") for f in ("a", "b") for j in range(4)
    ]
    ids = [r[0] for r in rows]
    scope = Scope.of(info.collection_id, ["me"], file_ids=["a", "b"])
    async with pool.acquire() as conn:
        await conn.copy_records_to_table("langchain_pg_embedding", records=rows, columns=COLUMNS)
        visible = await memory_search.visible_files(conn, scope)
        right = [f.revision for f in visible]
        ok = await store.search(conn, scope, memory_search.answer_call(q, K, ids, right))
        want = await exact_top_k(conn, info, vector=q, file_ids=["a", "b"], owners=["me"], k=K)
        assert [h.id for h in ok.hits] == [h.id for h in want]
        # one file fewer, one revision off, one more, or another caller's scope: no row
        for wrong in (right[:1], [right[0], right[1] + 1000], [*right, max(right) + 1]):
            assert (await store.search(conn, scope, memory_search.answer_call(q, K, ids, wrong))).hits == []
        other = Scope.of(info.collection_id, ["someone"], file_ids=["a", "b"])
        assert (await store.search(conn, other, memory_search.answer_call(q, K, ids, right))).hits == []
