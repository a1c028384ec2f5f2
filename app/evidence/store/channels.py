"""The SQL side of the three /query_v2 retrieval channels over one V2 index run.

    retrieve(conn, scope, run, ask) -> Retrieval  /query_v2's one statement: every channel, the
                                                  statistics and the found chunks' details
    retrieve_separately(...)     -> Retrieval     the same from the per-channel functions below,
                                                  one after another (the fallback)
    visible(conn, scope, run)                     documents, chunks, mean length the scope may read
    document_frequencies(conn, scope, run, terms) chunks holding each term, over those
    lexical(...)  -> [ChannelHit]                 BM25 (app/evidence/query/bm25.py), then entity look-alikes
    exact(...)    -> [ChannelHit]                 row labels, entities, document numbers, titles, file names
    vector(...)   -> ([ChannelHit], path)         cosine: exact scan or the dimension's HNSW walk
    chunk_details(conn, scope, run, keys)         what a `Candidate` shows, for the hits kept

Every function reads only the chunks of the run's staged documents that the scope may read, checked
with `ragoverlay_in_scope` inside the SQL (`app/evidence/store/sql/60_v2_channels.sql`), and refuses an
any-owner scope. Hits are keyed by (document_id, ordinal).

`retrieve` computes the visible documents once and runs each channel in its own exception block: a
failing channel comes back with `error` set (the name of asyncpg's exception class for its SQLSTATE)
and the others still answer. When the statement fails as a whole (a timeout, a lost connection, an
error outside the channels), the caller may run `retrieve_separately`, which catches each channel's
failure in Python instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

import asyncpg
import numpy as np

from app.evidence.settings import ChannelSettings, ExactWeights
from app.store.scope import SCOPE_SQL, Scope
from app.text.chunks import ChunkPlace
from app.text.normalize import normalize

logger = logging.getLogger(__name__)

T = TypeVar("T")
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


class RunCheck(NamedTuple):
    """The run a query planned with: still the namespace's active one (of `index_version`, None: newest)?"""

    namespace: str
    index_version: str | None
    embedding_model: str
    extractor_version: str


@dataclass
class Retrieval:
    """Everything one /query_v2 reads of the run, in the scope.

    `document_frequency` is None when the statistics failed; `details` holds each found chunk
    that the scope may read; `stages_ms` the times of the parts that are not channels ("visible",
    "statistics", "details"); `separately` says the per-channel fallback answered.
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


# --- statements ----------------------------------------------------------------------------------

VISIBLE = f"SELECT documents, chunks, average_length FROM ragoverlay_v2_visible_stats({SCOPE_SQL}, $7)"
DOCUMENT_FREQUENCIES = f"SELECT term, df FROM ragoverlay_v2_visible_term_stats({SCOPE_SQL}, $7, $8::text[])"
LEXICAL = f"""
    SELECT document_id, ordinal, score, detail
    FROM ragoverlay_v2_lexical({SCOPE_SQL}, $7, $8::text[], $9, $10, $11, $12, $13)
    ORDER BY rank
"""
EXACT = f"""
    SELECT document_id, ordinal, weight, detail
    FROM ragoverlay_v2_exact({SCOPE_SQL}, $7, $8::text[], $9::text[], $10, $11, $12, $13, $14, $15, $16)
"""
NEAREST = f"""
    SELECT document_id, ordinal, distance, path
    FROM ragoverlay_v2_nearest({SCOPE_SQL}, $7, $8::vector, $9, $10, $11, $12, $13, $14)
"""

CHUNK_DETAILS = f"""
    SELECT document_id, ordinal, chunk_id, file_id, kind, page, page_label, section, table_caption,
           table_index, row_index, row_label, headers, row_values, units, footnotes, content, search_text,
           entity_keys, filename, title, language, publication_date, document_number, source,
           metadata::text AS metadata
    FROM ragoverlay_v2_chunk_details({SCOPE_SQL}, $7, $8::bigint[], $9::integer[])
"""

NEIGHBOURS = f"""
    SELECT document_id, ordinal, kind, page, section, content
    FROM ragoverlay_v2_neighbours({SCOPE_SQL}, $7::bigint[], $8::integer[])
"""


RETRIEVE = f"""
    SELECT *
    FROM ragoverlay_v2_retrieve({SCOPE_SQL}, $7, $8, $9::text[], $10::text[], $11, $12, $13, $14, $15, $16,
                                $17::text[], $18, $19, $20, $21, $22::vector, $23, $24, $25, $26, $27,
                                $28, $29, $30, $31)
"""


def _weights(weights: ExactWeights) -> tuple[float, ...]:
    """The exact channel's weights in the order the SQL functions take them."""
    return (weights.row_label, weights.entity, weights.document_number, weights.title, weights.filename)


def _vector_args(plan: VectorPlan) -> tuple[Any, ...]:
    """The vector plan in the order the SQL functions take it."""
    return (plan.path, plan.walk, plan.candidates, plan.ef_search, plan.max_scan_tuples)


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
    wanted = list(dict.fromkeys(t for t in terms if t))
    if limit <= 0 or not (wanted or trigram_text):
        return []
    rows = await conn.fetch(
        LEXICAL,
        *scope.for_reading().sql_args(),
        run_id,
        wanted,
        float(k1),
        float(b),
        limit,
        trigram_text or None,
        float(trigram_similarity),
        timeout=timeout,
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
    key_list = list(dict.fromkeys(k for k in keys if k))
    phrase_list = list(dict.fromkeys(p for p in phrases if p))
    if limit <= 0 or not (key_list or phrase_list):
        return []
    rows = await conn.fetch(
        EXACT,
        *scope.for_reading().sql_args(),
        run_id,
        key_list,
        phrase_list,
        limit,
        document_chunks,
        *_weights(weights),
        timeout=timeout,
    )
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
    rows = await conn.fetch(
        NEAREST,
        *scope.sql_args(),
        run_id,
        np.asarray(query, dtype=np.float32),
        limit,
        *_vector_args(plan),
        timeout=timeout,
    )
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
    return [_detail(r) for r in rows]


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


# --- /query_v2's one statement, and its fallback ---------------------------------------------------


def _distinct(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


# asyncpg's exception class of each SQLSTATE: a channel failing inside the statement is reported
# by the same name as one failing on its own ("57014" -> "QueryCanceledError")
_SQLSTATE_NAMES: dict[str, str] = {
    str(getattr(cls, "sqlstate", "")): cls.__name__
    for cls in vars(asyncpg.exceptions).values()
    if isinstance(cls, type) and issubclass(cls, asyncpg.PostgresError) and getattr(cls, "sqlstate", None)
}


def _sqlstate_name(code: str) -> str:
    """asyncpg's exception class name for a SQLSTATE."""
    return _SQLSTATE_NAMES.get(code, f"PostgresError {code}")


async def retrieve(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    ask: ChannelQuery,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
    check: RunCheck | None = None,
) -> Retrieval:
    """Every channel, the statistics and the found chunks' details in one statement (module docstring);
    with `check`, nothing is read (`stale`) unless `run_id` is still that active run."""
    scope.for_reading()
    rows = await conn.fetch(
        RETRIEVE,
        *scope.sql_args(),
        run_id,
        ask.limit,
        _distinct(ask.keys),
        _distinct(ask.phrases),
        ask.document_chunks,
        *_weights(ask.exact_weights),
        _distinct(ask.terms),
        float(ask.k1),
        float(ask.b),
        ask.trigram_text or None,
        float(ask.trigram_similarity),
        None if ask.query is None else np.asarray(ask.query, dtype=np.float32),
        *_vector_args(ask.vector_plan),
        *(check if check is not None else (None,) * len(RunCheck._fields)),
        timeout=timeout,
    )
    return _retrieval(rows)


def _retrieval(rows: Sequence[asyncpg.Record]) -> Retrieval:
    """The statement's rows (four kinds, see ragoverlay_v2_retrieve) as a `Retrieval`."""
    channels = {name: ChannelResult() for name in CHANNEL_NAMES}
    details: dict[Key, ChunkDetail] = {}
    frequencies: dict[str, int] = {}
    visible_stats = Visible(0, 0, 0.0)
    stages: dict[str, float] = {}
    statistics_failed = False
    for r in rows:
        part = r["part"]
        if part == "stale":
            return Retrieval(channels, visible_stats, None, details, stale=True)
        if part == "hit":
            key = (int(r["document_id"]), int(r["ordinal"]))
            channels[r["channel"]].hits.append(ChannelHit(*key, float(r["score"]), r["detail"]))
            if r["chunk_id"] is not None and key not in details:
                details[key] = _detail(r)
        elif part == "df":
            frequencies[r["term"]] = int(r["df"])
        elif part == "visible":
            visible_stats = Visible(int(r["documents"]), int(r["chunks"]), float(r["average_length"]))
            stages["visible"] = float(r["ms"])
        elif part == "stage" and r["channel"] in channels:
            result = channels[r["channel"]]
            result.ms, result.path = float(r["ms"]), r["detail"]
            result.error = None if r["error"] is None else _sqlstate_name(r["error"])
        elif part == "stage":
            stages[r["channel"]] = float(r["ms"])
            statistics_failed |= r["channel"] == "statistics" and r["error"] is not None
    for name, result in channels.items():
        if result.error is not None:
            logger.warning("V2 channel %s failed in the retrieve statement: %s", name, result.error)
    return Retrieval(channels, visible_stats, None if statistics_failed else frequencies, details, stages)


async def _timed(
    conn: asyncpg.Connection, call: Callable[[], Awaitable[T]]
) -> tuple[T | None, float, str | None]:
    """The call's result, its time in ms, and the failure's class name (result None then).

    The call runs in a transaction of its own (a savepoint inside the caller's), so that a failure
    cannot abort the transaction the next call needs.
    """
    started = time.perf_counter()
    try:
        async with conn.transaction():
            value: T | None = await call()
        error = None
    except Exception as exc:  # one channel's failure is the caller's to weigh, never fatal here
        value, error = None, exc.__class__.__name__
        logger.warning("V2 channel failed: %s: %s", exc.__class__.__name__, exc)
    return value, (time.perf_counter() - started) * 1000, error


async def retrieve_separately(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    ask: ChannelQuery,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> Retrieval:
    """What `retrieve` returns, from the per-channel functions one after another on `conn`.

    Each channel's failure is caught (its `error`, no hits); a failing details read raises.
    """
    scope.for_reading()
    limit, channels = ask.limit, {}
    hits, ms, error = await _timed(
        conn,
        lambda: exact(conn, scope, run_id, keys=ask.keys, phrases=ask.phrases, limit=limit,
                      weights=ask.exact_weights, document_chunks=ask.document_chunks, timeout=timeout)
    )  # fmt: skip
    channels["exact"] = ChannelResult(hits or [], ms, error)
    hits, ms, error = await _timed(
        conn,
        lambda: lexical(conn, scope, run_id, ask.terms, k1=ask.k1, b=ask.b, limit=limit,
                        trigram_text=ask.trigram_text, trigram_similarity=ask.trigram_similarity,
                        timeout=timeout)
    )  # fmt: skip
    channels["lexical"] = ChannelResult(hits or [], ms, error)
    channels["vector"] = ChannelResult()
    if ask.query is not None:
        query = ask.query
        found, ms, error = await _timed(
            conn,
            lambda: vector(conn, scope, run_id, query, limit=limit, plan=ask.vector_plan, timeout=timeout)
        )  # fmt: skip
        hits, path = found if found is not None else ([], None)
        channels["vector"] = ChannelResult(hits, ms, error, path)
    started = time.perf_counter()
    seen, _, failed = await _timed(conn, lambda: visible(conn, scope, run_id))
    frequencies, _, failed_df = await _timed(
        conn, lambda: document_frequencies(conn, scope, run_id, ask.terms)
    )
    stages = {"statistics": (time.perf_counter() - started) * 1000}
    keys = list(dict.fromkeys((h.document_id, h.ordinal) for c in channels.values() for h in c.hits))
    started = time.perf_counter()
    found_details = await chunk_details(conn, scope, run_id, keys, timeout=timeout)
    stages["details"] = (time.perf_counter() - started) * 1000
    return Retrieval(
        channels,
        seen or Visible(0, 0, 0.0),
        None if failed or failed_df else frequencies,
        {(d.document_id, d.ordinal): d for d in found_details},
        stages,
        separately=True,
    )


def _detail(row: asyncpg.Record) -> ChunkDetail:
    metadata = json.loads(row["metadata"]) if row["metadata"] else {}
    return ChunkDetail(
        document_id=int(row["document_id"]),
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
