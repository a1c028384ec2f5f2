"""The SQL side of the three /query_v2 retrieval channels over one V2 index run.

    visible(conn, scope, run)                     documents, chunks, mean length the scope may read
    document_frequencies(conn, scope, run, terms) chunks holding each term, over those
    lexical(...)  -> [ChannelHit]                 BM25 (app/evidence/query/bm25.py), then entity look-alikes
    exact(...)    -> [ChannelHit]                 row labels, entities, document numbers, titles, file names
    vector(...)   -> ([ChannelHit], path)         cosine: exact scan or the dimension's HNSW walk
    chunk_details(conn, scope, run, keys)         what a `Candidate` shows, for the hits kept
    neighbour_chunks(conn, scope, keys)           the text around the results (their passages)

/query_v2 itself reads all of it in one statement (app/evidence/store/retrieve.py), which runs
the same SQL bodies; the per-channel functions here measure and test each channel alone.

Every function reads only the chunks of the run's staged documents that the scope may read, checked
with `ragoverlay_in_scope` inside the SQL (`app/evidence/store/sql/60_v2_channels.sql`), and refuses an
any-owner scope. Hits are keyed by (document_id, ordinal). Every SQL function is called with named
arguments (`p_keys => $9`); the channels' own arguments are records (`ExactArgs`, `LexicalArgs`,
`NearestArgs`) that the one statement's call takes too (app/evidence/store/calls.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg
import numpy as np

from app.evidence.settings import ChannelSettings, ExactWeights
from app.evidence.store.calls import named_call
from app.store.scope import SCOPE_SQL, Scope
from app.text.chunk_records import ChunkPlace
from app.text.normalize import normalize

Key = tuple[int, int]  # (document_id, ordinal)
VectorPath = Literal["exact", "hnsw", "hnsw+exact"]  # the path taken, as a result reports it
# the channels, in the order the statement runs them (app/evidence/query/records.CHANNELS names the same)
CHANNEL_NAMES = ("exact", "lexical", "vector")
# the shipped channel settings, for callers that pass none
_CHANNELS = ChannelSettings()


@dataclass(frozen=True)
class ChannelHit:
    """One chunk a channel found, with the channel's own score.

    lexical: the BM25 score (detail "bm25"), or for a look-alike of the trigram text the trigram
    similarity of its best entity in 0..1 (detail "trigram"); exact: the match weight in 0..1 with
    what matched ("row_label", "identifier", "standard", "document_number", "quantity", "title",
    "filename", ...: an entity match names the entity's kind); vector: the cosine similarity,
    1 - cosine distance (detail None).
    """

    document_id: int
    ordinal: int
    score: float
    detail: str | None = None


@dataclass(frozen=True)
class Visible:
    """What the scope may read of a run: documents, chunks and their mean length in terms."""

    documents: int
    chunks: int
    average_length: float


@dataclass(frozen=True, slots=True)
class ChunkDetail:
    """Everything `app.evidence.query.records.Candidate` needs of one chunk, with its document's fields."""

    document_id: int
    ordinal: int
    chunk_id: str
    file_id: str
    place: ChunkPlace
    content: str
    search_text: str
    entity_keys: frozenset[str]  # the normalised forms of the chunk's entities
    filename: str
    title: str
    language: str | None
    publication_date: str | None
    document_number: str | None
    source: str
    metadata: dict[str, Any]  # the document's


@dataclass(frozen=True)
class VectorPlan:
    """How the vector channel runs: the planner's decision (app/search/planner.py), carried out in SQL.

    "exact" scans every visible vector; "index" walks `walk` (the query dimension's HNSW walk) for
    `candidates` rows with `ef_search` and `max_scan_tuples`, re-ranks them exactly, and scans
    exactly instead when the walk met fewer than the limit (path "hnsw+exact").
    """

    path: Literal["exact", "index"] = "exact"
    walk: str | None = None
    candidates: int = 0
    ef_search: int | None = None
    max_scan_tuples: int | None = None


@dataclass(frozen=True, kw_only=True)
class ChannelQuery:
    """What one /query_v2 asks of the channels (see each channel's function for its part).

    A channel with nothing to look up is not asked: exact without keys and phrases, lexical without
    terms and trigram text, vector without a query vector (`query` None). The match weights, the
    document-match chunk count and the trigram similarity are RAG_V2__CHANNELS__*'s.
    """

    keys: Sequence[str] = ()
    phrases: Sequence[str] = ()
    terms: Sequence[str] = ()
    trigram_text: str | None = None
    query: np.ndarray | None = None
    limit: int
    k1: float
    b: float
    vector_plan: VectorPlan = VectorPlan()
    exact_weights: ExactWeights = _CHANNELS.exact
    document_chunks: int = _CHANNELS.document_match_chunks
    trigram_similarity: float = _CHANNELS.trigram_similarity


@dataclass
class ChannelResult:
    """One channel's answer: its hits in rank order, its time, and why it failed (None when it did not)."""

    hits: list[ChannelHit] = field(default_factory=list)
    ms: float = 0.0
    error: str | None = None
    path: VectorPath | None = None  # the vector channel's, once it ran


@dataclass
class Retrieval:
    """Everything one /query_v2 reads of the run, in the scope.

    `document_frequency` is None when the statistics failed; `details` holds each found chunk
    that the scope may read; `stages_ms` the times of the parts that are not channels ("visible",
    "statistics", "details"); `separately` says the statement answered one channel at a time
    (app/evidence/store/retrieve.py `retrieve_per_channel`).
    """

    channels: dict[str, ChannelResult]
    visible: Visible
    document_frequency: dict[str, int] | None
    details: dict[Key, ChunkDetail]
    stages_ms: dict[str, float] = field(default_factory=dict)
    separately: bool = False
    stale: bool = False  # the run checked (`RunCheck`) is no longer the active one: nothing was read

    @property
    def failed(self) -> list[str]:
        """The channels that failed, in order."""
        return [name for name, result in self.channels.items() if result.error is not None]


def label_key(text: str) -> str:
    """The exact channel's key of a row label, title, file name or document number: `normalize(text)`."""
    return normalize(text)


def _distinct(values: Sequence[str]) -> list[str]:
    """The non-empty values, each once, in order."""
    return list(dict.fromkeys(v for v in values if v))


# --- the channels' arguments, as the SQL functions name them -------------------------------------


@dataclass(frozen=True, slots=True)
class ExactArgs:
    """The exact channel's own arguments (p_keys ... p_filename_weight): what it looks up and the weights."""

    keys: list[str]
    phrases: list[str]
    document_chunks: int
    row_label_weight: float
    entity_weight: float
    number_weight: float
    title_weight: float
    filename_weight: float

    @classmethod
    def of(
        cls, keys: Sequence[str], phrases: Sequence[str], weights: ExactWeights, document_chunks: int
    ) -> ExactArgs:
        """The arguments of these keys and phrases (distinct, none empty) with the settings' weights."""
        return cls(
            keys=_distinct(keys),
            phrases=_distinct(phrases),
            document_chunks=document_chunks,
            row_label_weight=weights.row_label,
            entity_weight=weights.entity,
            number_weight=weights.document_number,
            title_weight=weights.title,
            filename_weight=weights.filename,
        )

    @property
    def asked(self) -> bool:
        """Anything to look up."""
        return bool(self.keys or self.phrases)


@dataclass(frozen=True, slots=True)
class LexicalArgs:
    """The lexical channel's own arguments (p_terms ... p_trigram_similarity)."""

    terms: list[str]
    k1: float
    b: float
    trigram: str | None
    trigram_similarity: float

    @classmethod
    def of(
        cls, terms: Sequence[str], k1: float, b: float, trigram: str | None, trigram_similarity: float
    ) -> LexicalArgs:
        """The arguments of these terms (distinct, none empty) and trigram text (None when empty)."""
        return cls(_distinct(terms), float(k1), float(b), trigram or None, float(trigram_similarity))

    @property
    def asked(self) -> bool:
        """Anything to look up."""
        return bool(self.terms or self.trigram)


@dataclass(frozen=True, slots=True)
class NearestArgs:
    """The vector channel's own arguments (p_query, and the plan's p_path ... p_max_scan_tuples)."""

    query: np.ndarray | None
    plan: VectorPlan

    @classmethod
    def of(cls, query: np.ndarray | None, plan: VectorPlan) -> NearestArgs:
        """The arguments of this query vector (as float32) and plan."""
        return cls(None if query is None else np.asarray(query, dtype=np.float32), plan)


def exact_args(ask: ChannelQuery) -> ExactArgs:
    """The exact channel's part of `ask`."""
    return ExactArgs.of(ask.keys, ask.phrases, ask.exact_weights, ask.document_chunks)


def lexical_args(ask: ChannelQuery) -> LexicalArgs:
    """The lexical channel's part of `ask`."""
    return LexicalArgs.of(ask.terms, ask.k1, ask.b, ask.trigram_text, ask.trigram_similarity)


def nearest_args(ask: ChannelQuery) -> NearestArgs:
    """The vector channel's part of `ask`."""
    return NearestArgs.of(ask.query, ask.vector_plan)


@dataclass(frozen=True, slots=True)
class ExactCall:
    """ragoverlay_v2_exact's arguments besides the scope."""

    run: int
    limit: int
    exact: ExactArgs


@dataclass(frozen=True, slots=True)
class LexicalCall:
    """ragoverlay_v2_lexical's arguments besides the scope."""

    run: int
    limit: int
    lexical: LexicalArgs


@dataclass(frozen=True, slots=True)
class NearestCall:
    """ragoverlay_v2_nearest's arguments besides the scope."""

    run: int
    limit: int
    nearest: NearestArgs


# --- statements ----------------------------------------------------------------------------------

EXACT_CALL = named_call("ragoverlay_v2_exact", ExactCall)
LEXICAL_CALL = named_call("ragoverlay_v2_lexical", LexicalCall)
NEAREST_CALL = named_call("ragoverlay_v2_nearest", NearestCall)

VISIBLE = f"""
    SELECT documents, chunks, average_length
    FROM ragoverlay_v2_visible_stats(p_scope => {SCOPE_SQL}, p_run => $7)
"""
DOCUMENT_FREQUENCIES = f"""
    SELECT term, df FROM ragoverlay_v2_visible_term_stats(p_scope => {SCOPE_SQL}, p_run => $7, p_terms => $8)
"""
LEXICAL = f"SELECT document_id, ordinal, score, detail FROM {LEXICAL_CALL.sql} ORDER BY rank"
EXACT = f"SELECT document_id, ordinal, weight, detail FROM {EXACT_CALL.sql}"
NEAREST = f"SELECT document_id, ordinal, distance, path FROM {NEAREST_CALL.sql}"

CHUNK_DETAILS = f"""
    SELECT document_id, ordinal, chunk_id, file_id, kind, page, page_label, section, table_caption,
           table_index, row_index, row_label, headers, row_values, units, footnotes, content, search_text,
           entity_keys, filename, title, language, publication_date, document_number, source,
           metadata::text AS metadata
    FROM ragoverlay_v2_chunk_details(p_scope => {SCOPE_SQL}, p_run => $7, p_documents => $8, p_ordinals => $9)
"""

NEIGHBOURS = f"""
    SELECT document_id, ordinal, kind, page, section, content
    FROM ragoverlay_v2_neighbours(p_scope => {SCOPE_SQL}, p_documents => $7, p_ordinals => $8)
"""


# --- the channels --------------------------------------------------------------------------------


async def visible(conn: asyncpg.Connection, scope: Scope, run_id: int) -> Visible:
    """Documents, chunks and mean chunk length (BM25's N and avgdl) of the run that the scope may read."""
    row = await conn.fetchrow(VISIBLE, *scope.for_reading().sql_args(), run_id)
    return Visible(int(row["documents"]), int(row["chunks"]), float(row["average_length"]))


async def document_frequencies(
    conn: asyncpg.Connection, scope: Scope, run_id: int, terms: Sequence[str]
) -> dict[str, int]:
    """Visible chunks of the run holding each term (0 for a term none holds; empty terms left out)."""
    wanted = list(dict.fromkeys(terms))
    if not wanted:
        return {}
    rows = await conn.fetch(DOCUMENT_FREQUENCIES, *scope.for_reading().sql_args(), run_id, wanted)
    return {r["term"]: int(r["df"]) for r in rows}


async def lexical(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    terms: Sequence[str],
    *,
    k1: float,
    b: float,
    limit: int,
    trigram_text: str | None = None,
    trigram_similarity: float = _CHANNELS.trigram_similarity,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChannelHit]:
    """BM25 over the visible chunks for the distinct normalised `terms`, best first (ties by key).

    With `trigram_text` (a short identifier-like text, normalised), chunks with an entity that looks
    like it (pg_trgm similarity >= `trigram_similarity`, see the SQL for why entities) follow in the
    slots the BM25 hits leave, de-duplicated: at most `limit` rows in all.
    """
    scope.for_reading()
    args = LexicalArgs.of(terms, k1, b, trigram_text, trigram_similarity)
    if limit <= 0 or not args.asked:
        return []
    rows = await conn.fetch(
        LEXICAL, *LEXICAL_CALL.bind(LexicalCall(run_id, limit, args), scope), timeout=timeout
    )
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), float(r["score"]), r["detail"]) for r in rows
    ]


async def exact(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    *,
    keys: Sequence[str],
    phrases: Sequence[str],
    limit: int,
    weights: ExactWeights = _CHANNELS.exact,
    document_chunks: int = _CHANNELS.document_match_chunks,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChannelHit]:
    """Chunks whose stored keys equal a query key or phrase, one per chunk at its best weight.

    `weights` of a row label, an entity equal to a key (detail: its kind), the document number, the
    title and the file name without extension (shipped: 1.0, 0.9, 0.85, 0.7, 0.6); a document-level
    match stands for the document's first `document_chunks` chunks. Ordered by weight, then
    ordinal; at most `limit`.
    """
    scope.for_reading()
    args = ExactArgs.of(keys, phrases, weights, document_chunks)
    if limit <= 0 or not args.asked:
        return []
    rows = await conn.fetch(EXACT, *EXACT_CALL.bind(ExactCall(run_id, limit, args), scope), timeout=timeout)
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), float(r["weight"]), r["detail"]) for r in rows
    ]


async def vector(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    query: np.ndarray,
    *,
    limit: int,
    plan: VectorPlan,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> tuple[list[ChannelHit], VectorPath]:
    """The visible chunks nearest to `query` (cosine, among vectors of its dimension) and the path taken.

    "exact" when `plan` says so; "hnsw" the index walk (re-ranked by exact distance); "hnsw+exact"
    when the walk met fewer than min(limit, visible) rows and an exact scan answered. Score:
    1 - cosine distance.
    """
    scope.for_reading()
    if limit <= 0:
        return [], "exact"
    call = NearestCall(run_id, limit, NearestArgs.of(query, plan))
    rows = await conn.fetch(NEAREST, *NEAREST_CALL.bind(call, scope), timeout=timeout)
    path: VectorPath = rows[0]["path"] if rows else "exact"
    return [
        ChannelHit(int(r["document_id"]), int(r["ordinal"]), 1.0 - float(r["distance"])) for r in rows
    ], path


async def chunk_details(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    keys: Sequence[tuple[int, int]],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[ChunkDetail]:
    """The details of these (document_id, ordinal) chunks of the run that the scope may read, in the
    order of `keys` (each once; a key the scope may not read is left out)."""
    scope.for_reading()
    if not keys:
        return []
    rows = await conn.fetch(
        CHUNK_DETAILS,
        *scope.sql_args(),
        run_id,
        [int(d) for d, _ in keys],
        [int(o) for _, o in keys],
        timeout=timeout,
    )
    parsed: dict[int, Any] = {}
    return [chunk_detail(r, parsed) for r in rows]


async def neighbour_chunks(
    conn: asyncpg.Connection,
    scope: Scope,
    keys: Sequence[tuple[int, int]],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> dict[Key, tuple[str, ChunkPlace]]:
    """The text and place (kind, page, section) of these (document_id, ordinal) chunks that the scope
    may read; a key it may not read, or of no chunk, is left out."""
    scope.for_reading()
    if not keys:
        return {}
    rows = await conn.fetch(
        NEIGHBOURS, *scope.sql_args(), [int(d) for d, _ in keys], [int(o) for _, o in keys], timeout=timeout
    )
    return {
        (r["document_id"], r["ordinal"]): (
            r["content"],
            ChunkPlace(kind=r["kind"], page=r["page"], section=tuple(r["section"])),
        )
        for r in rows
    }


def chunk_detail(row: asyncpg.Record, parsed: dict[int, Any]) -> ChunkDetail:
    """A `ChunkDetail` from a row with ragoverlay_v2_chunk_details_in's columns.

    `parsed`: document metadata already decoded, by document id (filled here). A row may leave
    its document's metadata out (NULL) when an earlier row of the same call carried it, as
    ragoverlay_v2_retrieve does; decoding it once per row was most of a hundred rows' decoding time.
    """
    document_id = int(row["document_id"])
    text = row["metadata"]
    if text and document_id not in parsed:
        parsed[document_id] = json.loads(text)
    metadata: Any = parsed.get(document_id, {})
    return ChunkDetail(
        document_id=document_id,
        ordinal=int(row["ordinal"]),
        chunk_id=str(row["chunk_id"]),
        file_id=row["file_id"],
        place=ChunkPlace.of_row(row),
        content=row["content"],
        search_text=row["search_text"],
        entity_keys=frozenset(row["entity_keys"]),
        filename=row["filename"],
        title=row["title"],
        language=row["language"],
        publication_date=row["publication_date"],
        document_number=row["document_number"],
        source=row["source"],
        metadata=metadata if isinstance(metadata, dict) else {},
    )
