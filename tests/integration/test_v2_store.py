"""The V2 index tables on the real PostgreSQL: a staged run is readable by plain SQL through the scope
predicate, its lexical terms and statistics match the BM25 reference, and the database holds the rules
(one active run per namespace and index version, activation only of complete runs, scoped deletes)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.evidence.index.chunker import chunk_document
from app.evidence.query import bm25
from app.evidence.store import documents as document_store
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.store.db import StoreInfo, bootstrap
from app.store.scope import SCOPE_SQL, Scope
from app.text.chunk_records import ChunkRecord
from app.text.tokens import SimpleTokenCounter
from tests.fixtures import v2_corpus
from tests.fixtures.service import Database, new_id

DIMS = 8


def rows_of(chunks: list[ChunkRecord], *, vectors: bool = True) -> list[document_store.ChunkRow]:
    rng = np.random.default_rng(5)
    return [
        document_store.ChunkRow(c, rng.normal(size=DIMS).astype(np.float32) if vectors else None)
        for c in chunks
    ]


@dataclass
class Staged:
    conn: asyncpg.Connection
    info: StoreInfo
    owner: str
    file_id: str
    run: run_store.RunRecord
    chunks: list[ChunkRecord]


async def stage(
    conn: asyncpg.Connection, info: StoreInfo, owner: str, file_ids: list[str]
) -> run_store.RunRecord:
    """A run of `owner` with every file staged (the same manual under each id); not activated."""
    run = await run_store.create_run(
        conn,
        info.collection_id,
        namespace=owner,
        index_version="v2",
        extractor_version="test-1",
        embedding_model="test:model",
        embedding_dim=DIMS,
        file_ids=file_ids,
    )
    chunked = chunk_document(
        v2_corpus.DATASHEET.loaded(),
        title=v2_corpus.DATASHEET.title,
        document_key="k",
        counter=SimpleTokenCounter(),
    )
    for file_id in file_ids:
        document = document_store.DocumentRow(
            file_id=file_id,
            owner=owner,
            checksum="0" * 64,
            extractor_version="test-1",
            embedding_model="test:model",
            source="original",
            filename=v2_corpus.DATASHEET.filename,
            title=v2_corpus.DATASHEET.title,
        )
        async with conn.transaction():
            document_id = await document_store.insert_document(
                conn, info.collection_id, document, rows_of(chunked.chunks)
            )
            await run_store.link_file(
                conn,
                run.run_id,
                file_id,
                document_id=document_id,
                source="original",
                linked=False,
                chunks=len(chunked.chunks),
                fingerprints=(),
            )
    return run


@pytest.fixture
async def staged(database: Database) -> AsyncIterator[Staged]:
    info = await bootstrap(database.dsn, f"v2store_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    owner, file_id = new_id("owner"), new_id("file")
    try:
        run = await stage(conn, info, owner, [file_id])
        chunks = chunk_document(
            v2_corpus.DATASHEET.loaded(),
            title=v2_corpus.DATASHEET.title,
            document_key="k",
            counter=SimpleTokenCounter(),
        ).chunks
        yield Staged(conn, info, owner, file_id, run, chunks)
    finally:
        await conn.close()


PLAIN_SQL = f"""
    SELECT c.kind, c.page, c.section, c.table_caption, c.headers, c.row_values, c.units, c.content
    FROM ragoverlay_v2_runs r
    JOIN ragoverlay_v2_run_files rf ON rf.run_id = r.run_id AND rf.state = 'staged'
    JOIN ragoverlay_v2_chunks c ON c.document_id = rf.document_id
    WHERE r.collection_id = $1 AND r.namespace = $7 AND r.status = 'active'
      AND ragoverlay_in_scope({SCOPE_SQL}, c.collection_id, c.file_id, c.owner)
    ORDER BY c.ordinal
"""


async def test_an_active_run_is_readable_by_plain_sql_through_the_scope_predicate(staged: Staged) -> None:
    conn, info = staged.conn, staged.info
    mine = Scope.of(info.collection_id, [staged.owner], file_ids=[staged.file_id])
    # running: nothing is active yet, so a query for the active run finds nothing
    assert await conn.fetch(PLAIN_SQL, *mine.sql_args(), staged.owner) == []
    await run_store.activate_run(conn, info.collection_id, staged.run.run_id)
    rows = await conn.fetch(PLAIN_SQL, *mine.sql_args(), staged.owner)
    assert len(rows) == len(staged.chunks) > 0
    assert not any("Products" in r["content"] for r in rows)  # navigation reached no chunk
    table_rows = [r for r in rows if r["kind"] == "table_row"]
    assert [r["row_values"][0] for r in table_rows] == ["K 25", "K 28", "K 32"]
    assert all(r["table_caption"] == "Table 2: Sizes" and r["page"] == 2 for r in table_rows)
    assert table_rows[0]["headers"] == ["Type", "Length (mm)", "Weight (kg)"]
    assert table_rows[0]["units"] == [None, "mm", "kg"]
    assert [r["page"] for r in rows if r["kind"] == "prose" and r["section"] == ["Installation"]] == [1]
    # another caller, or the right caller without the file in its allow-list, reads nothing
    stranger = Scope.of(info.collection_id, [new_id("stranger")], file_ids=[staged.file_id])
    assert await conn.fetch(PLAIN_SQL, *stranger.sql_args(), staged.owner) == []
    other_file = Scope.of(info.collection_id, [staged.owner], file_ids=["another"])
    assert await conn.fetch(PLAIN_SQL, *other_file.sql_args(), staged.owner) == []
    # the store's own read gives the same rows
    read = await read_store.run_chunks(conn, mine, staged.run.run_id, limit=100)
    assert [c.content for c in read] == [r["content"] for r in rows]
    assert [c.place for c in read] == [c.place for c in staged.chunks]  # every place field round-trips
    assert all(c.has_vector for c in read)


async def test_terms_and_statistics_match_the_bm25_reference(staged: Staged) -> None:
    conn, run_id = staged.conn, staged.run.run_id
    documents = [c.search_text.split() for c in staged.chunks]
    reference = bm25.corpus_stats(documents)
    chunks, average = await read_store.run_stats(conn, run_id)
    assert chunks == reference.documents
    assert average == pytest.approx(reference.average_length)
    # one posting per chunk and distinct term: each term finds exactly the chunks holding it, kept as
    # split (the "%" that to_tsvector would drop included)
    for term in ("%", "28", "1.5", "mm", "installation", "absent"):
        found = await conn.fetchval(
            "SELECT count(*) FROM ragoverlay_v2_postings p JOIN ragoverlay_v2_run_files rf "
            "ON rf.document_id = p.document_id WHERE rf.run_id = $1 AND p.term = $2",
            run_id,
            term,
        )
        assert found == reference.document_frequency.get(term, 0) == sum(1 for d in documents if term in d)
    # each chunk's terms are stored once, as its postings: their frequencies add up to its length
    stored = await conn.fetch(
        "SELECT c.term_count, c.search_text, (SELECT sum(p.tf) FROM ragoverlay_v2_postings p "
        "WHERE p.document_id = c.document_id AND p.ordinal = c.ordinal) AS posted "
        "FROM ragoverlay_v2_chunks c "
        "JOIN ragoverlay_v2_run_files rf ON rf.document_id = c.document_id WHERE rf.run_id = $1",
        run_id,
    )
    assert stored
    assert all(r["term_count"] == len(r["search_text"].split()) == r["posted"] for r in stored)


async def test_activation_refuses_a_partial_run_and_one_run_is_active(staged: Staged) -> None:
    conn, info = staged.conn, staged.info
    partial = await run_store.create_run(
        conn,
        info.collection_id,
        namespace=staged.owner,
        index_version="v2",
        extractor_version="test-1",
        embedding_model="test:model",
        embedding_dim=DIMS,
        file_ids=[staged.file_id, "not-yet"],
    )
    (done,) = await run_store.run_files(conn, staged.run.run_id)
    assert done.document_id is not None
    await run_store.link_file(
        conn, partial.run_id, staged.file_id, document_id=done.document_id, source="original", linked=True,
        chunks=len(staged.chunks), fingerprints=(),
    )  # fmt: skip
    with pytest.raises(run_store.RunIncomplete, match="1 pending"):
        await run_store.activate_run(conn, info.collection_id, partial.run_id)
    first = await run_store.activate_run(conn, info.collection_id, staged.run.run_id)
    assert first.status == "active"
    # a second complete run replaces it; the first is abandoned in the same transaction
    second = await stage(conn, info, staged.owner, [staged.file_id])
    await run_store.activate_run(conn, info.collection_id, second.run_id)
    statuses = {
        r.run_id: r.status
        for r in await run_store.list_runs(conn, info.collection_id, namespace=staged.owner)
    }
    assert statuses == {staged.run.run_id: "abandoned", partial.run_id: "running", second.run_id: "active"}
    # the database itself refuses two active runs of one namespace and index version
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute("UPDATE ragoverlay_v2_runs SET status = 'active' WHERE run_id = $1", first.run_id)
    with pytest.raises(run_store.RunStateError):
        await run_store.activate_run(conn, info.collection_id, first.run_id)
    # documents no running or active run links are pruned (the partial run links the first one)
    assert await document_store.prune_documents(conn, info.collection_id) == 0
    failed = await run_store.fail_run(conn, info.collection_id, partial.run_id, "given up")
    assert failed.status == "failed" and failed.error == "given up"
    assert await document_store.prune_documents(conn, info.collection_id) == 1
    assert len(
        await read_store.run_chunks(
            conn, Scope.of(info.collection_id, [staged.owner]), second.run_id, limit=99
        )
    )


async def test_missing_vectors_are_listed_and_filled(staged: Staged) -> None:
    conn, info = staged.conn, staged.info
    owner, file_id = staged.owner, new_id("novec")
    run = await run_store.create_run(
        conn,
        info.collection_id,
        namespace=owner,
        index_version="v2b",
        extractor_version="test-1",
        embedding_model="test:other-model",
        embedding_dim=DIMS,
        file_ids=[file_id],
    )
    rows = rows_of(staged.chunks, vectors=False)
    document = document_store.DocumentRow(
        file_id, owner, "1" * 64, "test-1", "test:other-model", "original", "m.pdf", "M"
    )
    document_id = await document_store.insert_document(conn, info.collection_id, document, rows)
    await run_store.link_file(
        conn, run.run_id, file_id, document_id=document_id, source="original", linked=False, chunks=len(rows),
        fingerprints=(),
    )  # fmt: skip
    missing = await vector_store.chunks_missing_vectors(
        conn, info.collection_id, embedding_model="test:other-model"
    )
    assert [(m.document_id, m.ordinal) for m in missing] == [(document_id, r.chunk.ordinal) for r in rows]
    assert [m.embed_text for m in missing] == [r.chunk.embed_text for r in rows]
    filled = await vector_store.set_chunk_vectors(
        conn, [(m.document_id, m.ordinal, np.ones(DIMS)) for m in missing]
    )
    assert filled == len(rows)
    assert (
        await vector_store.chunks_missing_vectors(
            conn, info.collection_id, embedding_model="test:other-model"
        )
        == []
    )
    assert (
        await conn.fetchval(
            "SELECT vectors_missing FROM ragoverlay_v2_documents WHERE document_id = $1", document_id
        )
        == 0
    )


async def test_delete_goes_through_the_scope(staged: Staged) -> None:
    conn, info = staged.conn, staged.info
    await run_store.activate_run(conn, info.collection_id, staged.run.run_id)
    stranger = Scope.of(info.collection_id, [new_id("stranger")], file_ids=[staged.file_id])
    async with conn.transaction():
        assert await read_store.delete_files(conn, stranger) == set()
    mine = Scope.of(info.collection_id, [staged.owner], file_ids=[staged.file_id])
    assert await read_store.run_chunks(conn, mine, staged.run.run_id, limit=10)
    async with conn.transaction():
        assert await read_store.delete_files(conn, mine) == {staged.file_id}
    assert await read_store.run_chunks(conn, mine, staged.run.run_id, limit=10) == []
    run = await run_store.get_run(conn, info.collection_id, staged.run.run_id)
    assert run is not None and run.expected_files == 0
    for table in ("ragoverlay_v2_chunks", "ragoverlay_v2_entities", "ragoverlay_v2_documents"):
        n = await conn.fetchval(
            f"SELECT count(*) FROM {table} WHERE collection_id = $1 AND file_id = $2",
            info.collection_id,
            staged.file_id,
        )
        assert n == 0, table
