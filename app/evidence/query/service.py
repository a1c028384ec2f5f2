"""`POST /query_v2` as retrieve -> rank -> respond, always inside the caller's `Scope`.

    answer, server_timing = await service.query(request, scope, namespace, debug=admin and request.debug)

1. retrieve (the I/O): the query's embedding, then on one pool connection the namespace's active
   index run (pinned by `index_version`, else the newest; remembered, app/evidence/query/active_runs.py),
   the vector channel's path (V1's planner, app/evidence/query/vectors.py) and ONE statement
   (app/evidence/store/retrieve.py `retrieve`): a check that the run is still the active one (else it
   is looked up again and asked again), the run's documents the `Scope` allows, computed once, the
   exact, lexical and vector channels over them, the BM25 statistics of the query terms, and the
   details of every chunk found. When that statement fails as a whole (a timeout, a lost
   connection), the same statement is asked once per channel on a fresh connection, so that the
   channel at fault fails alone (counted: ragoverlay_v2_retrieve_fallbacks_total). A query holds one
   connection at a time.
2. rank (no I/O but the reranker's): fusion, the reranker over a bounded window (a failing remote
   or local model falls back to the feature reranker) and the refusal decision.
3. respond: the evidence, re-checked against the allow-list, and the response; its debug output,
   Server-Timing and metrics are derived from the same `Answer`.

A failing channel marks the answer `degraded`; only all three failing is an error (503). The vector
channel cannot run when the run's vectors come from another embedding model than the service's
(the run says which): then it counts as failed, with that reason in `debug`. Stored files of the
request that the run lacks (staging waits or failed) degrade it too (`missing_files`, `on_missing`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import asyncpg
import httpx
import numpy as np

from app.clients.embeddings import Embedder, model_identity, query_space
from app.config import Settings
from app.config_sections import SearchSettings
from app.errors import ConfigError, Forbidden, ServiceUnavailable
from app.evidence.query.active_runs import ActiveRunCache
from app.evidence.query.analysis import QueryAnalysis, QueryConfig, analyze_query
from app.evidence.query.candidates import candidate_lists
from app.evidence.query.debug import channel_debug, plan_debug, stage_list
from app.evidence.query.evidence import build_evidence
from app.evidence.query.passages import widen_results
from app.evidence.query.plan import ChannelPlan, plan_channels
from app.evidence.query.ranking import Ranking, rank
from app.evidence.query.records import CHANNELS, Scored
from app.evidence.query.refusal import SAFE_REFUSAL
from app.evidence.query.rerank import FeatureReranker, Reranker
from app.evidence.query.rerank_http import HttpReranker
from app.evidence.query.rerank_onnx import OnnxCrossEncoder
from app.evidence.query.schemas import EvidenceItem, QueryV2Request, QueryV2Response
from app.evidence.query.statistics import Statistics, lexical_statistics
from app.evidence.query.vectors import PlannedVectors, RunVectorCache, plan_vectors
from app.evidence.settings import V2Settings
from app.evidence.store import channels as channels_sql
from app.evidence.store import gaps as v2_gaps
from app.evidence.store import retrieve as retrieve_sql
from app.evidence.store import runs as v2_index
from app.evidence.store.gaps import MissingFile, describe_missing
from app.metrics import V2_CHANNEL_FAILURES, V2_QUERIES, V2_RERANK_FALLBACKS, V2_RETRIEVE_FALLBACKS
from app.store.db import PoolShare, StoreInfo
from app.store.scope import Scope, ScopeError
from app.text.chunk_records import ChunkPlace
from app.text.stems import lexical_keys

logger = logging.getLogger(__name__)
# a question's statement finds its remembered run replaced, looks it up again, and asks again; this
# many times at most (each needs another run activated while it was asking)
RUN_ATTEMPTS = 3
# stopwords and intent words are the language's, not a tuning knob
QUERY_CONFIG = QueryConfig()


def build_reranker(
    tuning: V2Settings,
    http: httpx.AsyncClient | None,
    *,
    api_key: str | None = None,
    redact: Callable[[str], str] | None = None,
) -> Reranker:
    """The configured reranker (RAG_V2__RERANK__BACKEND); ConfigError when its settings cannot work."""
    config = tuning.rerank
    if config.backend == "http":
        if not config.url or http is None:
            raise ConfigError("RAG_V2__RERANK__BACKEND=http needs RAG_V2__RERANK__URL")
        return HttpReranker(
            http,
            config.url,
            flavour=config.flavour,
            model=config.model,
            api_key=api_key,
            timeout=config.timeout_seconds,
            redact=redact,
        )
    if config.backend == "onnx":
        if config.onnx_dir is None:
            raise ConfigError("RAG_V2__RERANK__BACKEND=onnx needs RAG_V2__RERANK__ONNX_DIR")
        return OnnxCrossEncoder(config.onnx_dir, max_tokens=config.onnx_max_tokens)
    return FeatureReranker(config.features)


@dataclass(frozen=True)
class Retrieved:
    """What retrieve read: the run, each channel's result, and the candidates of those that answered."""

    run: v2_index.RunRecord
    retrieval: channels_sql.Retrieval
    lists: dict[str, list[Scored]]  # the channels that did not fail, each in its rank order
    statistics: Statistics
    embed_ms: float = 0.0
    pool_wait_ms: float = 0.0  # time spent waiting for pool connections
    vectors: PlannedVectors | None = None  # the vector channel's plan, when it was asked
    missing: list[MissingFile] = field(default_factory=list)  # stored files of the request the run lacks

    @property
    def failed(self) -> list[str]:
        """The channels that failed, in order."""
        return self.retrieval.failed


@dataclass(frozen=True)
class _Ready:
    """What a query asks of one run: the vector plan, the lexical keys, the channels' question."""

    planned: PlannedVectors | None
    keys: dict[str, tuple[str, ...]]
    ask: channels_sql.ChannelQuery
    vector_error: str | None  # the run's vectors come from another model


@dataclass(frozen=True)
class _Read:
    """What a query read on its connection."""

    run: v2_index.RunRecord
    ready: _Ready
    retrieval: channels_sql.Retrieval
    missing: list[MissingFile]


@dataclass(frozen=True)
class Answer:
    """One query's whole result: the response, its debug output and the metrics derive from it."""

    request: QueryV2Request
    analysis: QueryAnalysis
    plan: ChannelPlan
    retrieved: Retrieved
    ranking: Ranking
    results: list[EvidenceItem]
    timing: dict[str, float]  # ms per Server-Timing stage

    @property
    def degraded(self) -> bool:
        """True when a channel failed or files of the request are not in the run yet."""
        return bool(self.retrieved.failed or self.retrieved.missing)

    @property
    def degraded_detail(self) -> str | None:
        """Why the answer is degraded, in a sentence or two (None when it is not)."""
        parts = []
        if self.retrieved.missing:
            parts.append(describe_missing(self.retrieved.missing))
        if self.retrieved.failed:
            parts.append(f"search channels left out: {', '.join(self.retrieved.failed)}")
        return "; ".join(parts) + "." if parts else None


def respond(answer: Answer, *, debug: bool) -> QueryV2Response:
    """The wire response of `answer` (with its debug output when asked)."""
    return QueryV2Response(
        index_version=answer.retrieved.run.index_version,
        results=answer.results,
        degraded=answer.degraded,
        degraded_detail=answer.degraded_detail,
        missing_files=len(answer.retrieved.missing),
        safe_refusal=None if answer.results else SAFE_REFUSAL,
        debug=debug_body(answer) if debug else None,
    )


def server_timing(timing: Mapping[str, float]) -> str:
    """The Server-Timing header value of the stages' times."""
    return ", ".join(f"{name};dur={value:.2f}" for name, value in timing.items())


def count_channel_failures(retrieved: Retrieved) -> None:
    """The channel failure counters."""
    for name in retrieved.failed:
        V2_CHANNEL_FAILURES.labels(channel=name).inc()


def fallback_reason(exc: BaseException) -> str:
    """Why the one statement failed as a whole, as ragoverlay_v2_retrieve_fallbacks_total's `reason`."""
    if isinstance(exc, TimeoutError | asyncpg.QueryCanceledError):
        return "timeout"
    if isinstance(exc, OSError | asyncpg.InterfaceError | asyncpg.PostgresConnectionError):
        return "connection"
    return "error"


def count_answer(answer: Answer, reranker: str) -> None:
    """The query and reranker fallback counters."""
    if answer.ranking.reranked.fallback_reason is not None:
        V2_RERANK_FALLBACKS.labels(reranker=reranker).inc()
    outcome = "answered" if answer.results else "refused"
    V2_QUERIES.labels(outcome=outcome, degraded=str(answer.degraded).lower()).inc()


def debug_body(answer: Answer) -> dict[str, Any]:
    """The admin's `debug` object: analysis, run, channels, every stage's list, refusal, timings."""
    analysis, plan, k = answer.analysis, answer.plan, answer.request.k
    retrieved, ranking = answer.retrieved, answer.ranking
    stages = {name: stage_list(retrieved.lists.get(name, []), k) for name in CHANNELS}
    stages["fused"] = stage_list(ranking.fused, k)
    stages["reranked"] = stage_list(ranking.items, k)
    return {
        "analysis": {
            "terms": list(analysis.terms),
            "exact_keys": list(plan.exact_keys),
            "phrases": list(analysis.phrases),
            "intents": sorted(analysis.intents),
            "trigram": plan.trigram_text,
            "language": analysis.language,
        },
        "run": {"run_id": retrieved.run.run_id, "index_version": retrieved.run.index_version},
        # stored files of the request the run lacks
        "missing_files": [m.file_id for m in retrieved.missing],
        "channels": {name: channel_debug(r) for name, r in retrieved.retrieval.channels.items()},
        "vector_plan": plan_debug(retrieved.vectors),
        "retrieve": {
            "statement": "per-channel fallback" if retrieved.retrieval.separately else "one",
            "stages_ms": {name: round(ms, 2) for name, ms in retrieved.retrieval.stages_ms.items()},
        },
        "stages": stages,
        "refusal": ranking.decision.as_debug(),
        "rerank": {
            "backend": ranking.reranked.reranker,
            "fell_back": ranking.reranked.fallback_reason is not None,
            "error": ranking.reranked.fallback_reason,
            "ms": round(ranking.rerank_ms, 2),
        },
        "timing_ms": {name: round(value, 2) for name, value in answer.timing.items()},
    }


class V2SearchService:
    """Answers `/query_v2` for one collection, always inside the caller's `Scope`."""

    def __init__(
        self,
        settings: Settings,
        pool: PoolShare,
        info: StoreInfo,
        embedder: Embedder,
        tuning: V2Settings,
        reranker: Reranker,
        on_missing: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.tuning = tuning
        self.reranker = reranker
        self.model = model_identity(settings)
        # V1's planner, with the V2 channel's own exact-scan limit
        self.search_settings = SearchSettings(
            exact_max_rows=tuning.channels.exact_scan_max_chunks,
            cost_factor=settings.hnsw_cost_factor,
            ef_search=settings.hnsw_ef_search,
            max_scan_tuples=settings.hnsw_max_scan_tuples,
        )
        self.run_vectors = RunVectorCache()
        self.active_runs = ActiveRunCache(info.collection_id)
        self.on_missing = on_missing  # told (namespace, file ids) an answer lacks; never blocks, raises

    @property
    def enabled_namespaces(self) -> frozenset[str]:
        """RAG_V2_NAMESPACE_IDS."""
        return frozenset(self.settings.v2_namespace_ids)

    def require_enabled(self, namespace: str) -> None:
        """Refuse a namespace V2 does not serve: 503 when V2 is off entirely (fail closed), else 403."""
        enabled = self.enabled_namespaces
        if not enabled:
            raise ServiceUnavailable(
                "V2 search is not enabled on this service (RAG_V2_NAMESPACE_IDS is empty)"
            )
        if namespace not in enabled:
            raise Forbidden(f"V2 search is not enabled for {namespace} (RAG_V2_NAMESPACE_IDS)")

    @property
    def timeout(self) -> float:
        """Seconds a channel's statement may take (QUERY_TIMEOUT_MS)."""
        return self.settings.query_timeout_ms / 1000

    async def query(
        self, request: QueryV2Request, scope: Scope, namespace: str, *, debug: bool = False
    ) -> tuple[QueryV2Response, str]:
        """The answer and its Server-Timing header value: retrieve -> rank -> respond."""
        t0 = time.perf_counter()
        analysis = analyze_query(request.query, QUERY_CONFIG)
        plan = plan_channels(analysis, QUERY_CONFIG.stopwords)
        t_analysis = time.perf_counter()
        retrieved = await self.retrieve(request, scope, namespace, plan)
        count_channel_failures(retrieved)
        if len(retrieved.failed) == len(CHANNELS):
            channels = retrieved.retrieval.channels
            raise ServiceUnavailable(
                "Every V2 search channel failed ("
                + ", ".join(f"{n}: {channels[n].error}" for n in retrieved.failed)
                + ")"
            )
        t_retrieved = time.perf_counter()
        ranking = await rank(analysis, retrieved.lists, retrieved.statistics, self.tuning, self.reranker)
        passages_ms = 0.0
        results = []
        if not ranking.decision.refuse:
            items, passages_ms = await widen_results(
                ranking.items,
                request.k,
                self.tuning.evidence,
                partial(self.neighbours, scope),
            )
            # build_evidence keeps only items of the request's (allow-listed) files and numbers them
            results = build_evidence(items, request.file_ids, request.k)
        timing = {
            "analysis": (t_analysis - t0) * 1000,
            "embed": retrieved.embed_ms,
            "pool": retrieved.pool_wait_ms,
            "channels": (t_retrieved - t_analysis) * 1000,
            "fuse": ranking.fuse_ms,
            "rerank": ranking.rerank_ms,
            "passages": passages_ms,
            "total": (time.perf_counter() - t0) * 1000,
        }
        answer = Answer(request, analysis, plan, retrieved, ranking, results, timing)
        if retrieved.missing and self.on_missing is not None:
            self.on_missing(namespace, [m.file_id for m in retrieved.missing])
        count_answer(answer, self.reranker.name)
        return respond(answer, debug=debug), server_timing(timing)

    async def retrieve(
        self, request: QueryV2Request, scope: Scope, namespace: str, plan: ChannelPlan
    ) -> Retrieved:
        """The query's vector, then on one connection the run and its channels, statistics and chunks.

        The query is embedded before a connection is taken, so that a slow embedder never holds one
        (and is embedded even when the run turns out to have vectors of another model: rare, and
        then only the vector channel is left out).
        """
        vector, embed_ms, embed_error = await self._embed(request.query)
        t0 = time.perf_counter()
        async with self.pool.acquire(timeout=self.timeout) as conn:
            waited = time.perf_counter() - t0
            try:
                # one snapshot (read-only, repeatable read): a staging that commits between the
                # retrieve and the look-up of missing files would otherwise leave an answer without
                # the file's replaced version that does not say the file is missing
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    found = await self._read(conn, request, scope, namespace, plan, vector)
                    if found is None:
                        raise _StatementFailed  # roll the snapshot back; the fallback below
            except _StatementFailed:
                found = None
        if found is None:
            t1 = time.perf_counter()
            # a fresh connection (the failure may have been this one's) and a run looked up again
            self.active_runs.forget(namespace, request.index_version)
            async with self.pool.acquire(timeout=self.timeout) as conn:
                waited += time.perf_counter() - t1
                found = await self._read(conn, request, scope, namespace, plan, vector, separately=True)
        assert found is not None  # asked once per channel, each channel's failure is caught
        run, ready, retrieval, missing = found.run, found.ready, found.retrieval, found.missing
        vector_error = ready.vector_error or embed_error
        if vector_error is not None:
            retrieval.channels["vector"].error = vector_error
        stats = Statistics()
        if plan.lexical_terms and retrieval.document_frequency is not None:
            own = lexical_keys(plan.lexical_terms, run.extractor_version, parts=False)
            stats = lexical_statistics(retrieval.visible.chunks, own, retrieval.document_frequency)
        lists = candidate_lists(retrieval)
        return Retrieved(run, retrieval, lists, stats, embed_ms, waited * 1000, ready.planned, missing)

    async def _read(
        self,
        conn: asyncpg.Connection,
        request: QueryV2Request,
        scope: Scope,
        namespace: str,
        plan: ChannelPlan,
        vector: np.ndarray | None,
        *,
        separately: bool = False,
    ) -> _Read | None:
        """The run, what was asked of it, its retrieval and missing files; None when the one statement
        failed as a whole (`separately`: the statement once per channel instead, which cannot)."""
        for _ in range(RUN_ATTEMPTS):
            run = await self.active_runs.run(conn, namespace, request.index_version)
            ready = await self._prepare(conn, run, scope, plan, vector)
            check = retrieve_sql.RunCheck(
                namespace, request.index_version, run.embedding_model, run.extractor_version
            )
            if separately:
                retrieval = await retrieve_sql.retrieve_per_channel(
                    conn, scope, run.run_id, ready.ask, timeout=self.timeout, check=check
                )
            else:
                try:
                    retrieval = await retrieve_sql.retrieve(
                        conn, scope, run.run_id, ready.ask, timeout=self.timeout, check=check
                    )
                except ScopeError:
                    raise  # a programming error: a fallback cannot help
                except Exception as exc:  # the statement as a whole: timeout, lost connection, a part
                    logger.warning(
                        "V2 retrieve statement failed (%s); asking it once per channel",
                        exc.__class__.__name__,
                    )
                    V2_RETRIEVE_FALLBACKS.labels(reason=fallback_reason(exc)).inc()
                    return None
            if retrieval.stale:  # another run became the active one since it was remembered
                self.active_runs.forget(namespace, request.index_version)
                continue
            missing = await self._missing(conn, scope, namespace, run.run_id, retrieval)
            return _Read(run, ready, retrieval, missing)
        raise ServiceUnavailable(
            f"The V2 index of {namespace} changed {RUN_ATTEMPTS} times during this question; ask again"
        )

    async def _prepare(
        self,
        conn: asyncpg.Connection,
        run: v2_index.RunRecord,
        scope: Scope,
        plan: ChannelPlan,
        vector: np.ndarray | None,
    ) -> _Ready:
        """What to ask of `run`: the vector channel's plan and the lexical keys of its extractor."""
        vector_error = None
        if vector is not None and query_space(run.embedding_model) != query_space(self.model):
            # vectors of another model are not comparable with this query's: say so, do not guess
            vector = None
            vector_error = f"VectorModelMismatch: {VectorModelMismatch(run.embedding_model, self.model)}"
        planned = None if vector is None else await self._plan_vectors(conn, run.run_id, scope, vector)
        keys = lexical_keys(plan.lexical_terms, run.extractor_version)
        ask = self._ask(plan, vector, planned, tuple(dict.fromkeys(k for ks in keys.values() for k in ks)))
        return _Ready(planned, keys, ask, vector_error)

    async def _missing(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        namespace: str,
        run_id: int,
        retrieval: channels_sql.Retrieval,
    ) -> list[MissingFile]:
        """The request's stored files the run lacks; [] at no cost when it holds one per listed file."""
        if scope.file_ids is not None and retrieval.visible.documents >= len(scope.file_ids):
            return []
        try:  # the scope was checked by the retrieve before
            return await v2_gaps.missing_files(conn, scope, namespace, run_id, timeout=self.timeout)
        except Exception as exc:  # not knowing the gaps must not cost the answer
            logger.warning("V2: the look-up of files not indexed yet failed (%s)", exc.__class__.__name__)
            return []

    async def neighbours(
        self, scope: Scope, keys: list[tuple[int, int]], files: list[str]
    ) -> dict[tuple[int, int], tuple[str, ChunkPlace]]:
        """The text and place of these chunks that the scope, narrowed to `files` (within its own
        allow-list: narrower, never wider), may read; a second, short connection hold."""
        if scope.file_ids is not None:
            allowed = set(scope.file_ids)
            scope = scope.with_files(f for f in files if f in allowed)
        async with self.pool.acquire(timeout=self.timeout) as conn:
            return await channels_sql.neighbour_chunks(conn, scope, keys, timeout=self.timeout)

    async def _plan_vectors(
        self, conn: asyncpg.Connection, run_id: int, scope: Scope, vector: np.ndarray
    ) -> PlannedVectors:
        """The vector channel's path over the run (its planner inputs read on `conn` when stale)."""
        dims = int(vector.shape[0])
        try:
            knowledge = await self.run_vectors.knowledge(conn, run_id, dims)
        except (asyncpg.PostgresError, OSError) as exc:
            # without its inputs the planner cannot weigh the walk: the exact scan is always right
            logger.warning("V2 vector planner inputs unreadable (%s): exact scan", exc.__class__.__name__)
            return PlannedVectors(channels_sql.VectorPlan(), 0)
        return plan_vectors(
            knowledge, dims=dims, limit=self.tuning.channels.limit, scope=scope, settings=self.search_settings
        )

    def _ask(
        self,
        plan: ChannelPlan,
        vector: np.ndarray | None,
        planned: PlannedVectors | None,
        terms: tuple[str, ...],
    ) -> channels_sql.ChannelQuery:
        """What the plan asks of the channels (`terms`: the lexical keys), with the service's limits."""
        return channels_sql.ChannelQuery(
            keys=plan.exact_keys,
            phrases=plan.exact_phrases,
            terms=terms,
            trigram_text=plan.trigram_text,
            query=vector,
            limit=self.tuning.channels.limit,
            k1=self.tuning.channels.bm25_k1,
            b=self.tuning.channels.bm25_b,
            vector_plan=planned.plan if planned is not None else channels_sql.VectorPlan(),
            exact_weights=self.tuning.channels.exact,
            document_chunks=self.tuning.channels.document_match_chunks,
            trigram_similarity=self.tuning.channels.trigram_similarity,
        )

    async def _embed(self, text: str) -> tuple[np.ndarray | None, float, str | None]:
        """The query's vector, its time in ms, and the failure's class name (vector None then)."""
        t0 = time.perf_counter()
        try:
            vector = await self.embedder.embed_query(text)
        except Exception as exc:  # no vector fails the vector channel alone
            logger.warning("V2 channel failed: %s: %s", exc.__class__.__name__, exc)
            return None, (time.perf_counter() - t0) * 1000, exc.__class__.__name__
        return vector, (time.perf_counter() - t0) * 1000, None


class _StatementFailed(Exception):
    """The one retrieve statement failed: its snapshot is rolled back and the caller falls back."""


class VectorModelMismatch(RuntimeError):
    """The run's vectors come from another embedding model than the service's."""

    def __init__(self, stored: str, current: str) -> None:
        super().__init__(f"the index run was embedded with {stored}, the service embeds with {current}")
