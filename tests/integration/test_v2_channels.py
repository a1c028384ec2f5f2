"""The /query_v2 channels' SQL (app/evidence/store/channels.py) on the real PostgreSQL: BM25 equal to the
reference, the scope and allow-list around every channel and statistic, exact matches and their
ranking, both vector paths with the exact refill, the postings table (insert, delete) and how a
chunk is stored (its vector in the row, its terms once)."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from app.config_sections import SearchSettings
from app.evidence.index.chunker import chunk_document
from app.evidence.query import bm25
from app.evidence.query.vectors import RunVectorCache, plan_vectors, run_knowledge
from app.evidence.settings import ChannelSettings, ExactWeights
from app.evidence.store import channels as search
from app.evidence.store import documents as document_store
from app.evidence.store import reads as read_store
from app.evidence.store import retrieve as retrieve_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.evidence.store.channels import ChannelHit, VectorPlan
from app.store.db import vector_array
from app.store.migrate import load_migrations, split_statements
from app.store.scope import SCOPE_SQL, Scope, ScopeError
from app.store.vector_index import build_index, ensure_walk, index_spec
from app.text.chunk_records import ChunkPlace, ChunkRecord
from app.text.normalize import normalize
from app.text.stems import COMPOUNDS_MARKER, STEMS_MARKER, lexical_keys
from app.text.tokens import SimpleTokenCounter
from tests.fixtures import v2_corpus
from tests.fixtures.service import Database, new_id

# a dimension no other test module uses: this module builds its HNSW index
DIMS = 12
K1, B = 1.2, 0.75
WALK = f"ragoverlay_v2_vec_walk_{DIMS}"


def walk_plan(limit: int, *, ef_search: int = 40, max_scan_tuples: int = 1000) -> VectorPlan:
    """The planner's decision to walk this module's HNSW index for `limit` hits."""
    candidates = 2 * limit + 10
    return VectorPlan("index", WALK, candidates, max(ef_search, candidates), max_scan_tuples)


def unit(*weights: float) -> np.ndarray:
    """A DIMS vector with the given leading components, the rest small noise-free zeros."""
    vector = np.zeros(DIMS, dtype=np.float32)
    vector[: len(weights)] = weights
    return vector


@dataclass(frozen=True)
class Doc:
    """A document as stored: its chunks, and their vectors (random ones when None)."""

    file_id: str
    owner: str
    filename: str
    title: str
    chunks: tuple[ChunkRecord, ...]
    document_number: str | None = None
    vectors: tuple[np.ndarray, ...] | None = None


def corpus_doc(owner: str, document: v2_corpus.CorpusDocument) -> Doc:
    """A document of the test corpus, chunked as the index chunks it."""
    file_id = new_id(document.filename.split(".")[0])
    chunked = chunk_document(
        document.loaded(), title=document.title, document_key=file_id, counter=SimpleTokenCounter()
    )
    return Doc(
        file_id, owner, document.filename, document.title, tuple(chunked.chunks), document.document_number
    )


def plain_doc(
    owner: str, name: str, texts: Sequence[str], vectors: Sequence[np.ndarray] | None = None
) -> Doc:
    """A document of one-line prose chunks with the given vectors (random ones when None)."""
    chunks = tuple(
        ChunkRecord(
            ordinal=i, id=str(uuid.uuid4()), place=ChunkPlace(page=1), content=text, embed_text=text,
            search_text=normalize(text), tokens=len(text.split()),
        )
        for i, text in enumerate(texts)
    )  # fmt: skip
    return Doc(
        new_id(name), owner, f"{name}.pdf", name, chunks, vectors=None if vectors is None else tuple(vectors)
    )


@dataclass
class World:
    conn: asyncpg.Connection
    collection_id: uuid.UUID
    owner: str
    run_id: int
    docs: dict[str, Doc]  # file id -> what was stored
    document_ids: dict[str, int]  # file id -> document id
    foreign: str  # a file of another owner, linked into the run
    foreign_owner: str
    foreign_chunks: int

    def scope(self, *file_ids: str, owner: str | None = None) -> Scope:
        return Scope.of(self.collection_id, [owner or self.owner], file_ids=file_ids or list(self.docs))

    async def lexical(
        self,
        terms: Sequence[str],
        *,
        scope: Scope | None = None,
        limit: int = 50,
        trigram: str | None = None,
        similarity: float = ChannelSettings().trigram_similarity,
    ) -> list[ChannelHit]:
        return await search.lexical(
            self.conn,
            scope or self.scope(),
            self.run_id,
            terms,
            k1=K1,
            b=B,
            limit=limit,
            trigram_text=trigram,
            trigram_similarity=similarity,
        )

    async def exact(
        self,
        keys: Sequence[str],
        phrases: Sequence[str],
        *,
        scope: Scope | None = None,
        limit: int = 20,
        document_chunks: int = ChannelSettings().document_match_chunks,
        weights: ExactWeights | None = None,
    ) -> list[ChannelHit]:
        return await search.exact(
            self.conn,
            scope or self.scope(),
            self.run_id,
            keys=keys,
            phrases=phrases,
            limit=limit,
            document_chunks=document_chunks,
            weights=weights or ExactWeights(),
        )

    async def vector(
        self,
        query: np.ndarray,
        *,
        limit: int,
        walk: bool,
        scope: Scope | None = None,
        run_id: int | None = None,
        ef_search: int = 40,
        max_scan_tuples: int = 1000,
    ) -> tuple[list[ChannelHit], str]:
        plan = (
            walk_plan(limit, ef_search=ef_search, max_scan_tuples=max_scan_tuples) if walk else VectorPlan()
        )
        return await search.vector(
            self.conn, scope or self.scope(), run_id or self.run_id, query, limit=limit, plan=plan
        )

    async def retrieve(self, ask: search.ChannelQuery, *, scope: Scope | None = None) -> search.Retrieval:
        return await retrieve_store.retrieve(self.conn, scope or self.scope(), self.run_id, ask)

    async def separately(self, ask: search.ChannelQuery, *, scope: Scope | None = None) -> search.Retrieval:
        return await retrieve_store.retrieve_per_channel(self.conn, scope or self.scope(), self.run_id, ask)

    def search_texts(self, file_ids: Sequence[str]) -> dict[tuple[int, int], list[str]]:
        """(document_id, ordinal) -> terms of the chunks of these files (the reference's corpus)."""
        return {
            (self.document_ids[f], c.ordinal): c.search_text.split()
            for f in file_ids
            for c in self.docs[f].chunks
        }

    def key(self, file_id: str, text: str, kind: str | None = None) -> tuple[int, int]:
        """(document_id, ordinal) of the one chunk of the file whose content holds `text` (of `kind`)."""
        (ordinal,) = [
            c.ordinal
            for c in self.docs[file_id].chunks
            if text in c.content and (kind is None or c.place.kind == kind)
        ]
        return (self.document_ids[file_id], ordinal)


async def store_document(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    run_id: int,
    doc: Doc,
    rng: np.random.Generator,
    *,
    extractor_version: str = "test-1",
    language: str = "en",
) -> int:
    vectors = doc.vectors or tuple(rng.normal(size=DIMS).astype(np.float32) for _ in doc.chunks)
    rows = [document_store.ChunkRow(c, v) for c, v in zip(doc.chunks, vectors, strict=True)]
    document = document_store.DocumentRow(
        file_id=doc.file_id,
        owner=doc.owner,
        checksum=uuid.uuid4().hex * 2,
        extractor_version=extractor_version,
        embedding_model="test:channels",
        source="original",
        filename=doc.filename,
        title=doc.title,
        language=language,
        document_number=doc.document_number,
        publication_date="2024-01-05",
        metadata={"origin": doc.file_id},
    )
    async with conn.transaction():
        document_id = await document_store.insert_document(conn, collection_id, document, rows)
        await conn.execute(
            "INSERT INTO ragoverlay_v2_run_files (run_id, file_id) VALUES ($1, $2)", run_id, doc.file_id
        )
        await run_store.link_file(
            conn, run_id, doc.file_id, document_id=document_id, source="original", linked=False,
            chunks=len(rows), fingerprints=(),
        )  # fmt: skip
    return document_id


@pytest.fixture
async def world(database: Database) -> AsyncIterator[World]:
    from app.store.db import bootstrap

    info = await bootstrap(database.dsn, f"v2chan_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    owner = new_id("owner")
    rng = np.random.default_rng(11)
    try:
        run = await run_store.create_run(
            conn,
            info.collection_id,
            namespace=owner,
            index_version="v2",
            extractor_version="test-1",
            embedding_model="test:channels",
            embedding_dim=DIMS,
            file_ids=[],
        )
        # the corpus's three documents of the Agent: prose on pumps, the datasheet, the sensor note
        docs = {d.file_id: d for d in (corpus_doc(owner, doc) for doc in v2_corpus.AGENT_DOCUMENTS)}
        ids = {f: await store_document(conn, info.collection_id, run.run_id, d, rng) for f, d in docs.items()}
        # the other owner's file linked into the run: words, labels and entities of its own, and the
        # very terms of the Agent's documents, so that any leak would show in the statistics
        foreign = corpus_doc(new_id("other"), v2_corpus.foreign_document())
        ids[foreign.file_id] = await store_document(conn, info.collection_id, run.run_id, foreign, rng)
        yield World(
            conn,
            info.collection_id,
            owner,
            run.run_id,
            docs,
            ids,
            foreign.file_id,
            foreign.owner,
            len(foreign.chunks),
        )
    finally:
        await conn.close()


def ask(
    *,
    terms: Sequence[str] = (),
    keys: Sequence[str] = (),
    phrases: Sequence[str] = (),
    trigram: str | None = None,
    query: np.ndarray | None = None,
    limit: int = 50,
    walk: bool = False,
) -> search.ChannelQuery:
    """What /query_v2 would ask of the channels, with this module's BM25 parameters."""
    return search.ChannelQuery(
        keys=keys, phrases=phrases, terms=terms, trigram_text=trigram, query=query, limit=limit, k1=K1, b=B,
        vector_plan=walk_plan(limit) if walk else VectorPlan(),
    )  # fmt: skip


def reference(world: World, terms: Sequence[str], file_ids: Sequence[str]) -> dict[tuple[int, int], float]:
    return dict(bm25.rank(list(terms), world.search_texts(file_ids), k1=K1, b=B))  # type: ignore[arg-type]


def keys_of(hits: Sequence[ChannelHit]) -> list[tuple[int, int]]:
    return [(h.document_id, h.ordinal) for h in hits]


async def test_bm25_equals_the_reference_on_the_visible_chunks(world: World) -> None:
    conn, files = world.conn, list(world.docs)
    for terms in (["pump", "valve"], ["water"], ["k", "28"], ["pump", "pressure", "1.5", "bar"], ["absent"]):
        hits = await world.lexical(terms)
        expected = reference(world, terms, files)
        assert keys_of(hits) == sorted(expected, key=lambda k: (-expected[k], k)), terms
        for hit in hits:
            assert hit.score == pytest.approx(expected[(hit.document_id, hit.ordinal)], abs=1e-9, rel=0)
            assert hit.detail == "bm25"
    # statistics of the same chunks
    texts = list(world.search_texts(files).values())
    stats = bm25.corpus_stats(texts)
    seen = await search.visible(conn, world.scope(), world.run_id)
    assert (seen.documents, seen.chunks) == (3, stats.documents)
    assert seen.average_length == pytest.approx(stats.average_length, abs=1e-12)
    df = await search.document_frequencies(
        conn, world.scope(), world.run_id, ["pump", "zebra", "k", "absent"]
    )
    assert df == {t: stats.document_frequency.get(t, 0) for t in ("pump", "zebra", "k", "absent")}
    # a limit keeps the best
    assert keys_of(await world.lexical(["pump"], limit=2)) == keys_of(await world.lexical(["pump"]))[:2]


async def test_the_allow_list_narrows_every_statistic(world: World) -> None:
    conn = world.conn
    fa, fb, _ = world.docs
    narrow = world.scope(fa, fb)
    texts = world.search_texts([fa, fb])
    stats = bm25.corpus_stats(texts.values())
    seen = await search.visible(conn, narrow, world.run_id)
    assert (seen.documents, seen.chunks) == (2, stats.documents)
    assert seen.average_length == pytest.approx(stats.average_length, abs=1e-12)
    assert await search.document_frequencies(conn, narrow, world.run_id, ["water", "sensor"]) == {
        "water": stats.document_frequency.get("water", 0),
        "sensor": 0,
    }
    terms = ["water", "pump"]
    hits = await world.lexical(terms, scope=narrow)
    expected = reference(world, terms, [fa, fb])
    assert {(h.document_id, h.ordinal): h.score for h in hits} == pytest.approx(expected, abs=1e-9, rel=0)
    # the same chunk scores differently once a third document joins the statistics
    wide = await world.lexical(terms)
    first = (world.document_ids[fa], 0)
    assert dict(zip(keys_of(wide), [h.score for h in wide], strict=True))[first] != pytest.approx(
        expected[first]
    )


async def test_foreign_files_and_other_owners_never_appear(world: World) -> None:
    conn, run = world.conn, world.run_id
    # both vector paths: the walk needs this dimension's index
    spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
    assert (
        spec is not None and await build_index(conn, spec, m=8, ef_construction=32, memory="64MB") == "valid"
    )
    foreign_doc = world.document_ids[world.foreign]
    # the foreign file in the allow-list changes nothing: it is another owner's
    listed = world.scope(*world.docs, world.foreign)
    stranger = world.scope(owner=new_id("stranger"))
    for scope in (listed, stranger):
        hits: list[ChannelHit] = []
        hits += await world.lexical(["zebra", "pump", "secret"], scope=scope, trigram="zebra secret")
        hits += await world.lexical([], scope=scope, trigram="k 28")
        hits += await world.exact(["k 28"], ["k 28", "secret pump parts", "secret"], scope=scope)
        hits += (await world.vector(unit(1.0), limit=50, walk=False, scope=scope))[0]
        hits += (await world.vector(unit(1.0), limit=50, walk=True, scope=scope))[0]
        assert foreign_doc not in {h.document_id for h in hits}
        assert await search.document_frequencies(conn, scope, run, ["zebra", "secret"]) == {
            "zebra": 0,
            "secret": 0,
        }
        every = [(foreign_doc, 0), (foreign_doc, 1), *world.search_texts(list(world.docs))]
        details = await search.chunk_details(conn, scope, run, every)
        assert foreign_doc not in {d.document_id for d in details}
        # the passages' neighbour read: the same rule, row by row
        neighbours = await search.neighbour_chunks(conn, scope, every)
        assert foreign_doc not in {d for d, _ in neighbours}
        if scope is listed:
            assert set(neighbours) == {(d.document_id, d.ordinal) for d in details}
        if scope is stranger:
            assert hits == [] and details == [] and neighbours == {}
            assert await search.visible(conn, scope, run) == search.Visible(0, 0, 0.0)
    # in its own owner's scope the same questions find the foreign file: what was kept out was there
    theirs = world.scope(world.foreign, owner=world.foreign_owner)
    assert await world.lexical(["zebra", "secret"], scope=theirs)
    found = await world.exact(["k 28"], ["k 28", "secret pump parts", "secret"], scope=theirs)
    assert {h.detail for h in found} >= {"row_label", "title"}
    # the foreign chunks' terms count nowhere: "pump" has the df of the owner's chunks only
    stats = bm25.corpus_stats(world.search_texts(list(world.docs)).values())
    df = await search.document_frequencies(conn, listed, run, ["pump"])
    assert df == {"pump": stats.document_frequency["pump"]}
    # a scope for deletes is refused by every read, in Python and in SQL
    deleting = Scope.of(world.collection_id, [world.owner], any_owner=True)
    with pytest.raises(ScopeError):
        await world.lexical(["pump"], scope=deleting)
    with pytest.raises(ScopeError):
        await world.vector(unit(1.0), limit=5, walk=True, scope=deleting)
    with pytest.raises(ScopeError):
        await search.neighbour_chunks(conn, deleting, [(foreign_doc, 0)])
    with pytest.raises(asyncpg.RaiseError, match="any-owner"):
        await conn.fetch(
            f"SELECT * FROM ragoverlay_v2_neighbours({SCOPE_SQL}, '{{1}}', '{{0}}')", *deleting.sql_args()
        )
    with pytest.raises(asyncpg.RaiseError, match="any-owner"):
        await conn.fetch(
            f"SELECT * FROM ragoverlay_v2_visible_documents({SCOPE_SQL}, $7)", *deleting.sql_args(), run
        )
    with pytest.raises(asyncpg.RaiseError, match="any-owner"):
        await conn.fetch(
            f"SELECT * FROM ragoverlay_v2_nearest({SCOPE_SQL}, $7, $8::vector, 5, 'exact', NULL, 20, 10, 10)",
            *deleting.sql_args(),
            run,
            unit(1.0),
        )


async def test_exact_matches_and_their_ranking(world: World) -> None:
    fa, fb, fc = world.docs
    doc_a, doc_b, doc_c = (world.document_ids[f] for f in (fa, fb, fc))
    row_k28, row_k25 = world.key(fb, "K 28", "table_row"), world.key(fb, "K 25", "table_row")
    mention = world.key(fb, "The pump of type K 28")
    # "Which pump fits K 28?": the key and the n-grams the caller makes
    hits = await world.exact(["k 28"], ["pump", "fits", "k", "28", "k 28", "pump fits"])
    by_key = {(h.document_id, h.ordinal): h for h in hits}
    assert ((hits[0].document_id, hits[0].ordinal), hits[0].score, hits[0].detail) == (
        row_k28,
        1.0,
        "row_label",
    )
    assert (by_key[mention].score, by_key[mention].detail) == (pytest.approx(0.9), "identifier")
    # the title "K 28" stands for the first three chunks of its document, below the row and the entity
    assert [by_key[(doc_c, i)].detail for i in range(3)] == ["title"] * 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert by_key[(doc_c, 0)].score == pytest.approx(0.7)
    assert row_k25 not in by_key  # K 25 is another row
    assert all(h.document_id != doc_a for h in hits)
    # a standard and an identifier by their keys; a document by its number and by its file name
    hits = await world.exact(["iso 9001", "b detection plus"], [], limit=5)
    assert {(h.document_id, h.ordinal, h.detail) for h in hits} == {
        (*world.key(fc, "ISO 9001"), "standard"),
        (*world.key(fc, "B-DETECTION_PLUS"), "identifier"),
        (*world.key(fb, "B-DETECTION_PLUS"), "identifier"),
    }
    hits = await world.exact(["ab 1234"], ["datasheet x 1"])
    assert [(h.document_id, h.ordinal, h.detail) for h in hits] == [
        (doc_b, i, "document_number") for i in range(3)
    ]
    assert [h.score for h in hits] == pytest.approx([0.85] * 3)
    hits = await world.exact([], ["pump guide"])
    assert {(h.document_id, h.detail) for h in hits} == {(doc_a, "title")}
    assert keys_of(await world.exact([], ["pump guide"], limit=2, document_chunks=1)) == [(doc_a, 0)]
    hits = await world.exact([], ["sensor"])
    assert {(h.document_id, h.detail) for h in hits} == {(doc_c, "filename")}
    assert await world.exact([], []) == []


async def test_the_exact_weights_are_the_settings(world: World) -> None:
    _, fb, fc = world.docs
    doc_c = world.document_ids[fc]
    row, mention = world.key(fb, "K 28", "table_row"), world.key(fb, "The pump of type K 28")
    keys, phrases = ["k 28"], ["k 28"]
    # shipped: the row labelled K 28 (1.0), then the chunk naming it (0.9), then the document titled
    # K 28 (0.7, its first three chunks)
    shipped = await world.exact(keys, phrases)
    assert [(h.document_id, h.ordinal, h.score) for h in shipped] == [
        (*row, 1.0), (*mention, pytest.approx(0.9)),
        (doc_c, 0, pytest.approx(0.7)), (doc_c, 1, pytest.approx(0.7)), (doc_c, 2, pytest.approx(0.7)),
    ]  # fmt: skip
    # a title weighing more than a row label puts the titled document's chunks first
    titles_first = ExactWeights(row_label=0.5, entity=0.4, title=0.95)
    reordered = await world.exact(keys, phrases, weights=titles_first)
    assert [(h.document_id, h.ordinal, h.detail) for h in reordered] == [
        (doc_c, 0, "title"), (doc_c, 1, "title"), (doc_c, 2, "title"),
        (*row, "row_label"), (*mention, "identifier"),
    ]  # fmt: skip
    assert [h.score for h in reordered] == pytest.approx([0.95, 0.95, 0.95, 0.5, 0.4])
    # the same through the one statement, with one chunk per document-level match
    one = await world.retrieve(
        dataclasses.replace(ask(keys=keys, phrases=phrases), exact_weights=titles_first, document_chunks=1)
    )
    assert keys_of(one.channels["exact"].hits) == [(doc_c, 0), row, mention]


async def test_trigram_look_alikes_follow_the_bm25_hits(world: World) -> None:
    conn = world.conn
    fb, fc = list(world.docs)[1:]
    naming = {world.key(fb, "B-DETECTION_PLUS"), world.key(fc, "B-DETECTION_PLUS")}
    # written together, or one letter off: BM25 finds nothing, the trigram test finds the two chunks
    # naming the sensor mode (their identifier entity "b detection plus")
    for text, terms in (("bdetection plus", ["bdetection"]), ("b detecton plus", ["detecton"])):
        hits = await world.lexical(terms, limit=5, trigram=text)
        assert set(keys_of(hits)) == naming and {h.detail for h in hits} == {"trigram"}, text
        assert all(0.6 <= h.score < 1.0 for h in hits)
    # a BM25 hit is not repeated, and a code with another number is no look-alike
    # the sensor note's chunk is a BM25 hit for "sensor" and a look-alike: listed once, as BM25; the
    # datasheet's chunk naming the mode holds no "sensor" and follows as the one look-alike
    hits = await world.lexical(["sensor"], limit=10, trigram="b detection plus")
    assert len(keys_of(hits)) == len(set(keys_of(hits)))
    assert [h.detail for h in hits] == ["bm25"] * (len(hits) - 1) + ["trigram"]
    assert keys_of(hits)[-1] == world.key(fb, "B-DETECTION_PLUS")
    assert world.key(fc, "B-DETECTION_PLUS") in keys_of(hits)[:-1]
    assert await world.lexical([], trigram="k 29") == []
    # the threshold is RAG_V2__CHANNELS__TRIGRAM_SIMILARITY's: at 0.4, "k 29" looks like "k 28" (0.43)
    lenient = await world.lexical([], trigram="k 29", similarity=0.4)
    assert lenient and {h.detail for h in lenient} == {"trigram"}
    assert all(0.4 <= h.score < 0.6 for h in lenient)
    # pg_trgm's threshold, raised for the look-up, is back where it was for the rest of the transaction
    async with conn.transaction():
        await world.lexical([], trigram="k 28")
        assert await conn.fetchval("SELECT current_setting('pg_trgm.similarity_threshold')") == "0.3"


async def test_chunk_details_carry_what_a_candidate_needs(world: World) -> None:
    conn = world.conn
    fb = list(world.docs)[1]
    row_key, first = world.key(fb, "K 28", "table_row"), world.key(fb, "Mount the unit")
    details = await search.chunk_details(
        conn, world.scope(), world.run_id, [row_key, first, row_key, (row_key[0], 99)]
    )
    assert [(d.document_id, d.ordinal) for d in details] == [row_key, first]
    row = details[0]
    stored = world.docs[fb].chunks[row_key[1]]
    assert row.file_id == fb and row.chunk_id == stored.id
    assert row.place == stored.place == ChunkPlace(
        kind="table_row", page=2, section=("Dimensions",), table_caption="Table 2: Sizes", table_index=0,
        row_index=1, row_label="K 28", headers=("Type", "Length (mm)", "Weight (kg)"),
        row_values=("K 28", "14", "4"), units=(None, "mm", "kg"),
    )  # fmt: skip
    assert row.entity_keys == frozenset({"k 28", "14 mm", "4 kg"})
    document = (row.filename, row.title, row.document_number, row.language, row.publication_date, row.source)
    assert document == ("datasheet-x1.pdf", "Sizes", "AB-1234", "en", "2024-01-05", "original")
    assert row.metadata == {"origin": fb}
    assert (row.content, row.search_text) == (stored.content, stored.search_text)
    assert row.search_text.endswith("k 28 length mm 14 weight kg 4 14 mm 4 kg")
    # the allow-list applies here too
    narrow = world.scope(next(iter(world.docs)))
    assert await search.chunk_details(conn, narrow, world.run_id, [row_key]) == []


async def test_vector_paths_return_as_many_rows_as_are_visible(world: World) -> None:
    conn = world.conn
    files = list(world.docs)
    visible = sum(len(d.chunks) for d in world.docs.values())
    query = np.random.default_rng(3).normal(size=DIMS).astype(np.float32)
    stored = {
        (r["document_id"], r["ordinal"]): vector_array(r["embedding"]).astype(np.float64)
        for r in await conn.fetch(
            "SELECT document_id, ordinal, embedding FROM ragoverlay_v2_chunks "
            "WHERE document_id = ANY ($1::bigint[])",
            [world.document_ids[f] for f in files],
        )
    }
    q = query.astype(np.float64)
    cosine = {k: float(v @ q / np.linalg.norm(v) / np.linalg.norm(q)) for k, v in stored.items()}
    best = sorted(cosine, key=lambda k: (-cosine[k], k))
    hits, path = await world.vector(query, limit=5, walk=False)
    assert path == "exact" and keys_of(hits) == best[:5]
    for hit in hits:
        assert hit.score == pytest.approx(cosine[(hit.document_id, hit.ordinal)], abs=1e-6)
    # the planner (any size walks: no exact limit, no cost factor) with what it reads of the run:
    # no index of this dimension yet, so still exact
    walk_anything = SearchSettings(exact_max_rows=0, cost_factor=0.0)

    async def planned(limit: int) -> VectorPlan:
        vectors = await vector_store.run_vectors(conn, world.run_id, DIMS)
        # the owner's files and the foreign one, each staged file's vectors under its owner
        assert {f: sum(o.values()) for f, o in vectors.files.items()} == {
            f: len(d.chunks) for f, d in world.docs.items()
        } | {world.foreign: world.foreign_chunks}
        knowledge = run_knowledge(vectors, DIMS)
        return plan_vectors(
            knowledge, dims=DIMS, limit=limit, scope=world.scope(), settings=walk_anything
        ).plan

    spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
    assert spec is not None
    await conn.execute(f"DROP INDEX IF EXISTS {spec.name}")
    assert (await vector_store.run_vectors(conn, world.run_id, DIMS)).walk is None
    plan = await planned(50)
    assert plan == VectorPlan("exact", None, 110)
    hits, path = await search.vector(conn, world.scope(), world.run_id, query, limit=50, plan=plan)
    assert path == "exact" and keys_of(hits) == best  # all of them, fewer than the limit
    assert await build_index(conn, spec, m=8, ef_construction=32, memory="64MB") == "valid"
    plan = await planned(5)
    assert (plan.path, plan.walk, plan.candidates) == ("index", WALK, 20)
    hits, path = await search.vector(conn, world.scope(), world.run_id, query, limit=5, plan=plan)
    assert path == "hnsw" and keys_of(hits) == best[:5]
    hits, path = await world.vector(query, limit=100, walk=True)
    assert path == "hnsw" and len(hits) == visible
    # a walk of another dimension is refused, not run
    wrong = VectorPlan("index", "ragoverlay_v2_vec_walk_13", 20, 40, 1000)
    with pytest.raises(asyncpg.RaiseError, match="walk of dimension 12"):
        await search.vector(conn, world.scope(), world.run_id, query, limit=5, plan=wrong)


async def test_a_filtered_walk_that_under_returns_is_refilled_exactly(world: World) -> None:
    conn = world.conn
    rng = np.random.default_rng(7)
    # a crowd of another owner's vectors right at the query, the visible ones far from it
    crowd_run = await run_store.create_run(
        conn, world.collection_id, namespace="crowd", index_version="v2", extractor_version="test-1",
        embedding_model="test:channels", embedding_dim=DIMS, file_ids=[],
    )  # fmt: skip
    near = [unit(1.0, *(rng.normal(size=3) * 0.01)) for _ in range(400)]
    crowd = plain_doc("crowd", "crowd", [f"crowd {i}" for i in range(400)], near)
    await store_document(conn, world.collection_id, crowd_run.run_id, crowd, rng)
    far_run = await run_store.create_run(
        conn, world.collection_id, namespace=world.owner, index_version="v2-far", extractor_version="test-1",
        embedding_model="test:channels", embedding_dim=DIMS, file_ids=[],
    )  # fmt: skip
    far = [unit(-1.0, *(rng.normal(size=3))) for _ in range(30)]
    far_doc = plain_doc(world.owner, "far", [f"far {i}" for i in range(30)], far)
    await store_document(conn, world.collection_id, far_run.run_id, far_doc, rng)
    spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
    assert spec is not None
    assert await build_index(conn, spec, m=8, ef_construction=32, memory="64MB") == "valid"
    scope = Scope.of(world.collection_id, [world.owner], file_ids=[far_doc.file_id])

    async def far_walk(limit: int, walk: bool) -> tuple[list[ChannelHit], str]:
        return await world.vector(
            unit(1.0),
            limit=limit,
            walk=walk,
            scope=scope,
            run_id=far_run.run_id,
            ef_search=10,
            max_scan_tuples=1,
        )

    exact, path = await far_walk(10, False)
    assert path == "exact" and len(exact) == 10
    hits, path = await far_walk(10, True)
    assert path == "hnsw+exact" and hits == exact
    hits, path = await far_walk(100, True)
    assert len(hits) == 30 and path in ("hnsw", "hnsw+exact")


async def test_postings_follow_inserts_and_deletes(world: World) -> None:
    conn = world.conn
    fa = next(iter(world.docs))
    document_id = world.document_ids[fa]
    rows = await conn.fetch(
        "SELECT ordinal, term, tf, term_count FROM ragoverlay_v2_postings WHERE document_id = $1", document_id
    )
    expected = {
        (c.ordinal, term, tf, len(c.search_text.split()))
        for c in world.docs[fa].chunks
        for term, tf in Counter(c.search_text.split()).items()
    }
    assert {tuple(r) for r in rows} == expected
    assert any(r["tf"] > 1 for r in rows)  # "pump" twice in the first chunk
    mine = Scope.of(world.collection_id, [world.owner], file_ids=[fa])
    async with conn.transaction():
        assert await read_store.delete_files(conn, mine) == {fa}
    assert (
        await conn.fetchval("SELECT count(*) FROM ragoverlay_v2_postings WHERE document_id = $1", document_id)
        == 0
    )
    # the keys of the exact channel were stored with the rows
    keys = await conn.fetchrow(
        "SELECT title_key, filename_key, number_key FROM ragoverlay_v2_documents WHERE document_id = $1",
        world.document_ids[list(world.docs)[1]],
    )
    assert tuple(keys) == ("sizes", "datasheet x 1", "ab 1234")


async def test_vectors_stay_in_their_rows_and_no_dead_storage_is_left(world: World) -> None:
    conn = world.conn
    # migration 0015: what no statement read is gone
    dropped = [
        "ragoverlay_v2_chunks_search_vector_gin", "ragoverlay_v2_chunks_search_text_trgm",
        "ragoverlay_v2_documents_filename_trgm", "ragoverlay_v2_documents_title_trgm",
        "ragoverlay_v2_document_terms",
    ]  # fmt: skip
    assert await conn.fetchval("SELECT count(to_regclass(x)) FROM unnest($1::text[]) x", dropped) == 0
    columns = {
        r["attname"]
        for r in await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'ragoverlay_v2_chunks'::regclass "
            "AND attnum > 0 AND NOT attisdropped"
        )
    }
    assert {"search_text", "term_count", "embedding"} <= columns and not {"terms", "search_vector"} & columns
    # a chunk whose texts are far too long for one row: they leave it, its 700-d vector (2.8 KB) stays
    where = "SELECT {} FROM ragoverlay_v2_chunks WHERE document_id = $1"
    out_of_line = where.format(
        "pg_column_toast_chunk_id(embedding) IS NOT NULL AS vector, "
        "pg_column_toast_chunk_id(embed_text) IS NOT NULL AS text, embedding"
    )
    rng = np.random.default_rng(5)
    vector = rng.normal(size=700).astype(np.float32)
    text = " ".join(f"word{i} pump" for i in range(2000))
    doc = plain_doc(world.owner, "long", [text], [vector])
    document_id = await store_document(conn, world.collection_id, world.run_id, doc, rng)
    row = await conn.fetchrow(out_of_line, document_id)
    assert (row["vector"], row["text"]) == (False, True)
    # a row stored under the old rule (vector out of line) is moved into the row by the migration's
    # rewrite, unchanged
    (rewrite,) = [
        s for m in load_migrations() if m.name == "v2_chunk_storage" for s in split_statements(m.sql)
        if s.startswith("UPDATE ragoverlay_v2_chunks")
    ]  # fmt: skip
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute("ALTER TABLE ragoverlay_v2_chunks ALTER COLUMN embedding SET STORAGE EXTERNAL")
        await conn.execute("UPDATE ragoverlay_v2_chunks SET embedding = $2 WHERE document_id = $1",
                           document_id, vector)  # fmt: skip
        assert (await conn.fetchrow(out_of_line, document_id))["vector"] is True
        await conn.execute("ALTER TABLE ragoverlay_v2_chunks ALTER COLUMN embedding SET STORAGE MAIN")
        await conn.execute(rewrite)
        row = await conn.fetchrow(out_of_line, document_id)
        assert row["vector"] is False
        assert np.array_equal(vector_array(row["embedding"]), vector)
    finally:
        await transaction.rollback()


def answered(retrieval: search.Retrieval) -> dict[str, tuple[list[ChannelHit], str | None, str | None]]:
    """Each channel's hits, path and error: what must not depend on how the retrieval ran."""
    return {name: (r.hits, r.path, r.error) for name, r in retrieval.channels.items()}


async def each_channel(
    world: World, question: search.ChannelQuery, scope: Scope
) -> dict[str, list[ChannelHit]]:
    """Each asked channel's hits from its own SQL function (ragoverlay_v2_exact, _lexical, _nearest)."""
    hits = {
        "exact": await search.exact(
            world.conn,
            scope,
            world.run_id,
            keys=question.keys,
            phrases=question.phrases,
            limit=question.limit,
        ),
        "lexical": await world.lexical(
            question.terms, scope=scope, limit=question.limit, trigram=question.trigram_text
        ),
    }
    if question.query is not None:
        hits["vector"], _ = await search.vector(
            world.conn, scope, world.run_id, question.query, limit=question.limit, plan=question.vector_plan
        )
    return hits


async def test_the_one_statement_returns_what_each_channel_returns(world: World) -> None:
    """The statement, the statement asked once per channel (the service's fallback) and each
    channel's own SQL function give the same hits, statistics and details on the same data."""
    conn, run = world.conn, world.run_id
    query = np.random.default_rng(5).normal(size=DIMS).astype(np.float32)
    # the walk's function, which an earlier test's index build would otherwise have to leave behind
    walk_spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
    assert walk_spec is not None
    await ensure_walk(conn, walk_spec)
    asks = [
        ask(terms=["pump", "valve", "water"], keys=["k 28"], phrases=["k 28", "pump", "sensor"], query=query),
        ask(terms=["bdetection"], trigram="bdetection plus", query=query, limit=5),
        ask(terms=["pump"], limit=2),  # the vector channel not asked
        ask(keys=["ab 1234"], phrases=["datasheet x 1"], query=query, walk=True),  # the HNSW walk
        ask(terms=["absent"]),
    ]
    for scope in (world.scope(), world.scope(*list(world.docs)[:2])):
        for question in asks:
            one = await world.retrieve(question, scope=scope)
            apart = await world.separately(question, scope=scope)
            assert not one.separately and apart.separately
            assert answered(one) == answered(apart), question
            assert one.visible == apart.visible == await search.visible(conn, scope, run)
            assert one.document_frequency == apart.document_frequency
            assert one.document_frequency == await search.document_frequencies(
                conn, scope, run, question.terms
            )
            assert one.details == apart.details
            own = await each_channel(world, question, scope)
            assert {name: one.channels[name].hits for name in own} == own, question
            keys = {(h.document_id, h.ordinal) for r in one.channels.values() for h in r.hits}
            assert set(one.details) == keys
            # each chunk's details and each document's metadata are sent once, yet every chunk has them
            alone = await search.chunk_details(conn, scope, run, sorted(keys))
            assert one.details == {(d.document_id, d.ordinal): d for d in alone}
            args = retrieve_store.retrieve_args(run, question)
            rows = await conn.fetch(retrieve_store.RETRIEVE, *retrieve_store.RETRIEVE_CALL.bind(args, scope))
            sent = [
                (r["document_id"], r["ordinal"], r["metadata"]) for r in rows if r["chunk_id"] is not None
            ]
            assert sorted(key[:2] for key in sent) == sorted(keys)
            assert sorted(d for d, _, meta in sent if meta is not None) == sorted({d for d, _ in keys})
            assert set(one.stages_ms) >= {"visible", "statistics", "details"}
            assert all(r.ms >= 0 for r in one.channels.values())
    # the same scores as the reference, through the statement, narrowed by the allow-list
    fa, fb, _ = world.docs
    narrow = await world.retrieve(ask(terms=["water", "pump"]), scope=world.scope(fa, fb))
    expected = reference(world, ["water", "pump"], [fa, fb])
    lexical = narrow.channels["lexical"].hits
    assert {(h.document_id, h.ordinal): h.score for h in lexical} == pytest.approx(expected, abs=1e-9, rel=0)
    stats = bm25.corpus_stats(world.search_texts([fa, fb]).values())
    assert (narrow.visible.documents, narrow.visible.chunks) == (2, stats.documents)
    assert narrow.document_frequency == {t: stats.document_frequency.get(t, 0) for t in ("water", "pump")}
    # both vector paths through the statement: the exact scan, and the walk once the index exists
    spec = index_spec(DIMS, vector_store.V2_CHUNK_INDEX)
    assert spec is not None
    await conn.execute(f"DROP INDEX IF EXISTS {spec.name}")
    scan = await world.retrieve(ask(query=query))
    visible = sum(len(d.chunks) for d in world.docs.values())
    assert scan.channels["vector"].path == "exact" and len(scan.channels["vector"].hits) == visible == 13
    assert await build_index(conn, spec, m=8, ef_construction=32, memory="64MB") == "valid"
    walk = await world.retrieve(ask(query=query, walk=True, limit=5))
    assert walk.channels["vector"].path == "hnsw"
    assert walk.channels["vector"].hits == scan.channels["vector"].hits[:5]
    assert walk.channels["exact"].hits == [] and walk.channels["lexical"].hits == []


async def test_the_one_statement_keeps_foreign_rows_out(world: World) -> None:
    foreign_doc = world.document_ids[world.foreign]
    question = ask(
        terms=["zebra", "pump", "secret"], keys=["k 28"], phrases=["k 28", "secret pump parts", "secret"],
        trigram="zebra secret", query=unit(1.0),
    )  # fmt: skip
    listed = world.scope(*world.docs, world.foreign)
    stranger = world.scope(owner=new_id("stranger"))
    for scope in (listed, stranger):
        got = await world.retrieve(question, scope=scope)
        assert foreign_doc not in {h.document_id for r in got.channels.values() for h in r.hits}
        assert foreign_doc not in {key[0] for key in got.details}
        assert got.document_frequency is not None
        assert got.document_frequency["zebra"] == 0 and got.document_frequency["secret"] == 0
    got = await world.retrieve(question, scope=stranger)
    assert got.visible == search.Visible(0, 0, 0.0) and got.details == {}
    assert all(r.hits == [] and r.error is None for r in got.channels.values())
    deleting = Scope.of(world.collection_id, [world.owner], any_owner=True)
    with pytest.raises(ScopeError):
        await world.retrieve(question, scope=deleting)
    with pytest.raises(asyncpg.RaiseError, match="any-owner"):
        args = retrieve_store.retrieve_args(world.run_id, ask(terms=["pump"], limit=5))
        await world.conn.fetch(retrieve_store.RETRIEVE, *retrieve_store.RETRIEVE_CALL.bind(args, deleting))


async def test_a_channel_failing_inside_the_statement_fails_alone(world: World) -> None:
    conn = world.conn
    question = ask(terms=["pump", "water"], keys=["k 28"], phrases=["k 28"], query=unit(1.0))
    before = await world.retrieve(question)
    assert before.channels["exact"].hits and before.failed == []
    transaction = conn.transaction()
    await transaction.start()
    try:
        # the exact channel's core broken inside this transaction only (rolled back below)
        await conn.execute(
            """
            CREATE OR REPLACE FUNCTION ragoverlay_v2_exact_in(
                p_scope ragoverlay_scope, p_docs bigint[], p_keys text[], p_phrases text[], p_limit integer,
                p_document_chunks integer, p_row_label_weight double precision,
                p_entity_weight double precision, p_number_weight double precision,
                p_title_weight double precision, p_filename_weight double precision)
            RETURNS TABLE (document_id bigint, ordinal integer, weight double precision, detail text)
            LANGUAGE plpgsql STABLE AS $$ BEGIN RAISE division_by_zero; END; $$
            """
        )
        broken = await world.retrieve(question)
        assert broken.failed == ["exact"] and not broken.separately
        assert broken.channels["exact"].error == "DivisionByZeroError" and broken.channels["exact"].hits == []
        for name in ("lexical", "vector"):
            assert broken.channels[name].hits == before.channels[name].hits
        assert broken.document_frequency == before.document_frequency
        # the details of the other channels' hits, and no others
        others = {(h.document_id, h.ordinal) for n in ("lexical", "vector") for h in before.channels[n].hits}
        assert set(broken.details) == others
        # the per-channel fallback reports the same failure by the same name
        apart = await world.separately(question)
        assert apart.failed == ["exact"] and apart.channels["exact"].error == "DivisionByZeroError"
    finally:
        await transaction.rollback()
    assert answered(await world.retrieve(question)) == answered(before)
    # the statistics come with the lexical channel's postings: when it fails, they are read apart
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(
            """
            CREATE OR REPLACE FUNCTION ragoverlay_v2_bm25_in(
                p_docs bigint[], p_n double precision, p_avgdl double precision, p_terms text[],
                p_k1 double precision, p_b double precision, p_limit integer,
                OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
                OUT terms text[], OUT dfs bigint[])
            LANGUAGE plpgsql STABLE AS $$ BEGIN RAISE division_by_zero; END; $$
            """
        )
        broken = await world.retrieve(question)
        assert broken.failed == ["lexical"] and broken.channels["lexical"].hits == []
        assert broken.document_frequency == before.document_frequency == {"pump": 5, "water": 4}
        for name in ("exact", "vector"):
            assert broken.channels[name].hits == before.channels[name].hits
    finally:
        await transaction.rollback()


async def test_a_channel_too_slow_for_the_timeout_fails_alone_once_asked_per_channel(world: World) -> None:
    """The statement timeout fails the one statement as a whole; asked once per channel (the service's
    fallback), the slow channel fails alone and the others answer as before."""
    conn = world.conn
    question = ask(terms=["pump", "water"], keys=["k 28"], phrases=["k 28"], query=unit(1.0))
    before = await world.retrieve(question)
    assert before.failed == [] and all(r.hits for r in before.channels.values())
    transaction = conn.transaction()
    await transaction.start()
    try:
        # the vector channel's core made slow inside this transaction only (rolled back below)
        await conn.execute(
            """
            CREATE OR REPLACE FUNCTION ragoverlay_v2_nearest_in(
                p_scope ragoverlay_scope, p_run bigint, p_docs bigint[], p_visible bigint, p_query vector,
                p_limit integer, p_path text, p_walk text, p_candidates integer, p_ef_search integer,
                p_max_scan_tuples integer)
            RETURNS TABLE (document_id bigint, ordinal integer, distance double precision, path text)
            LANGUAGE plpgsql STABLE AS $$ BEGIN PERFORM pg_sleep(5); END; $$
            """
        )
        await conn.execute("SET LOCAL statement_timeout = '300ms'")
        with pytest.raises(asyncpg.QueryCanceledError):
            async with conn.transaction():
                await world.retrieve(question)
        apart = await world.separately(question)
        assert apart.separately and apart.failed == ["vector"]
        assert apart.channels["vector"].error == "QueryCanceledError" and apart.channels["vector"].hits == []
        for name in ("exact", "lexical"):
            assert apart.channels[name].hits == before.channels[name].hits
        assert apart.visible == before.visible and apart.document_frequency == before.document_frequency
        found = {(h.document_id, h.ordinal) for n in ("exact", "lexical") for h in before.channels[n].hits}
        assert set(apart.details) == found
    finally:
        await transaction.rollback()


async def test_the_one_statement_reads_nothing_of_a_remembered_run_no_longer_active(world: World) -> None:
    conn = world.conn
    question = ask(terms=["pump", "water"], keys=["k 28"], phrases=["k 28"], query=unit(1.0))

    async def checked(
        namespace: str = world.owner,
        index_version: str | None = None,
        model: str = "test:channels",
        extractor: str = "test-1",
    ) -> search.Retrieval:
        check = retrieve_store.RunCheck(namespace, index_version, model, extractor)
        return await retrieve_store.retrieve(conn, world.scope(), world.run_id, question, check=check)

    transaction = conn.transaction()
    await transaction.start()
    try:
        assert (await checked()).stale  # the run is not active yet
        # (the fixture links its files by hand, so the run is made active by hand too)
        await conn.execute(
            "UPDATE ragoverlay_v2_runs SET status = 'active', activated_at = now() WHERE run_id = $1",
            world.run_id,
        )
        current = await checked()
        assert not current.stale and answered(current) == answered(await world.retrieve(question))
        assert current.details and current.document_frequency
        assert not (await checked(index_version="v2")).stale
        for other in (
            {"index_version": "v3"},
            {"namespace": new_id("owner")},
            {"model": "test:another-model"},
            {"extractor": "test-2"},
        ):
            stale = await checked(**other)
            assert stale.stale and stale.details == {} and stale.document_frequency is None, other
            assert all(r.hits == [] and r.error is None for r in stale.channels.values())
        # a newer run of the namespace, activated: the remembered one is stale for the newest ...
        newer = await run_store.create_run(
            conn, world.collection_id, namespace=world.owner, index_version="v3",
            extractor_version="test-1", embedding_model="test:channels", embedding_dim=DIMS, file_ids=[],
        )  # fmt: skip
        await run_store.activate_run(conn, world.collection_id, newer.run_id)
        assert (await checked()).stale
        assert not (await checked(index_version="v2")).stale  # ... and still the active one of its version
        # the namespace's runs removed: stale whatever was remembered
        await conn.execute("DELETE FROM ragoverlay_v2_runs WHERE run_id = $1", newer.run_id)
        assert not (await checked()).stale
        await conn.execute(
            "UPDATE ragoverlay_v2_runs SET status = 'abandoned' WHERE run_id = $1", world.run_id
        )
        assert (await checked()).stale and (await checked(index_version="v2")).stale
    finally:
        await transaction.rollback()


async def test_the_planner_inputs_of_a_run_are_read_again_after_their_time(world: World) -> None:
    conn = world.conn
    now = [0.0]
    cache = RunVectorCache(ttl=30.0, clock=lambda: now[0])
    first = await cache.knowledge(conn, world.run_id, DIMS)
    staged = {f: sum(o.values()) for f, o in (first.stats.file_chunks or {}).items()}
    assert staged == {f: len(d.chunks) for f, d in world.docs.items()} | {world.foreign: world.foreign_chunks}
    # a file staged since: within the time the planner keeps what it read (the file counts the
    # average), after it the file is known
    later = plain_doc(world.owner, "late", ["late one", "late two"])
    await store_document(conn, world.collection_id, world.run_id, later, np.random.default_rng(1))
    now[0] = 29.0
    assert await cache.knowledge(conn, world.run_id, DIMS) is first
    now[0] = 31.0
    again = await cache.knowledge(conn, world.run_id, DIMS)
    assert again is not first and (again.stats.file_chunks or {})[later.file_id] == {world.owner: 2}


async def test_a_document_indexed_with_stems_meets_other_inflections(world: World) -> None:
    """RAG_V2__INDEX__STEMS: a document's words under its language's stems, asked in both languages."""
    rng = np.random.default_rng(7)
    german = plain_doc(world.owner, "ventile", ["Die Ventile der Heizung prüfen.", "Der Brenner startet."])
    english = plain_doc(world.owner, "valves", ["Check the valves of the heater.", "The burner starts."])
    version = f"v2.2{STEMS_MARKER}-test"
    ids = {}
    for doc, language in ((german, "de"), (english, "en")):
        ids[doc.file_id] = await store_document(
            world.conn,
            world.collection_id,
            world.run_id,
            doc,
            rng,
            extractor_version=version,
            language=language,
        )
    scope = world.scope(german.file_id, english.file_id)
    for question in ("Ventil", "valve checked"):
        keys = lexical_keys(normalize(question).split(), f"v2.2{STEMS_MARKER}-x")
        asked = list(dict.fromkeys(k for ks in keys.values() for k in ks))
        hits = await world.lexical(asked, scope=scope)
        assert hits and hits[0].ordinal == 0, question
    assert {h.document_id for h in await world.lexical(["ventil"], scope=scope)} == {ids[german.file_id]}
    # the other documents keep their words as written: a stem finds nothing there
    assert await world.lexical(["valv"], scope=world.scope(*world.docs)) == []


async def test_a_german_compound_meets_its_words(world: World) -> None:
    """RAG_V2__INDEX__COMPOUNDS: a German document's compounds are held with their words, and a
    question's compound asks for its words too; English documents keep their words as written."""
    rng = np.random.default_rng(8)
    compound = plain_doc(
        world.owner, "pakete", ["Die Paketverwaltung installiert Software.", "Sonst nichts."]
    )
    apart = plain_doc(world.owner, "verwaltung", ["Die Verwaltung der Pakete übernimmt apt.", "Nichts."])
    english = plain_doc(
        world.owner,
        "managers",
        [
            "A packagemanager installs software.",
            # a German passage in an English document: keyed as German, by its own language
            "Die Netzwerkkarte wird in der Konfiguration von dem System erkannt.",
        ],
    )
    version = f"v2.4{COMPOUNDS_MARKER}-test"
    ids = {}
    for doc, language in ((compound, "de"), (apart, "de"), (english, "en")):
        ids[doc.file_id] = await store_document(
            world.conn,
            world.collection_id,
            world.run_id,
            doc,
            rng,
            extractor_version=version,
            language=language,
        )
    scope = world.scope(compound.file_id, apart.file_id, english.file_id)
    # the document's compound is found by a question that writes its words apart ...
    hits = await world.lexical(["verwaltung"], scope=scope)
    assert {h.document_id for h in hits} == {ids[compound.file_id], ids[apart.file_id]}
    # ... and a question's compound finds the text that writes them apart
    keys = lexical_keys(["paketverwaltung"], f"v2.4{COMPOUNDS_MARKER}-x")
    assert set(keys["paketverwaltung"]) == {"paketverwaltung", "paket", "verwaltung"}
    hits = await world.lexical(list(keys["paketverwaltung"]), scope=scope)
    assert hits[0].document_id == ids[compound.file_id]  # whole word and both words
    assert ids[apart.file_id] in {h.document_id for h in hits}
    # an English document's English text is not split, its German passage is
    assert await world.lexical(["manager"], scope=scope) == []
    [hit] = await world.lexical(["karte"], scope=scope)
    assert (hit.document_id, hit.ordinal) == (ids[english.file_id], 1)
