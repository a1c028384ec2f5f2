"""`POST /query_v2`: three channels through the scope predicate, fusion, bounded reranking, refusal.

    answer = await service.query(request, scope, namespace, debug=admin and request.debug)

1. the namespace's active index run (pinned by `index_version`, else the newest active one);
2. the exact, lexical and vector channels run concurrently, each on its own connection and each
   reading only the run's documents that the caller's `Scope` allows (app/store/v2_search.py);
3. one read of the found chunks' details (scope-checked again), then fusion, the reranker over a
   bounded window (a failing remote or local model falls back to the feature reranker), the
   refusal decision from the evidence, and the evidence itself, re-checked against the allow-list.

A failing channel marks the answer `degraded`; only all three failing is an error (503). The vector
channel cannot run when the run's vectors come from another embedding model than the service's
(the run says which): then it counts as failed, with that reason in `debug`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import httpx

from app.clients.embeddings import Embedder
from app.config import Settings
from app.errors import BadRequest, ConfigError, ServiceUnavailable
from app.ingest.v2.runs import model_identity
from app.metrics import V2_CHANNEL_FAILURES, V2_QUERIES, V2_RERANK_FALLBACKS
from app.search.v2.analysis import QueryAnalysis, QueryConfig, analyze_query
from app.search.v2.evidence import build_evidence, display_page
from app.search.v2.fusion import fuse
from app.search.v2.plan import ChannelPlan, plan_channels
from app.search.v2.records import CHANNELS, Candidate, Fused, Scored
from app.search.v2.refusal import SAFE_REFUSAL, decide_refusal
from app.search.v2.rerank import FeatureReranker, Reranker, rerank_window
from app.search.v2.rerank_http import HttpReranker
from app.search.v2.rerank_onnx import OnnxCrossEncoder
from app.search.v2.schemas import QueryV2Request, QueryV2Response
from app.store import v2_index
from app.store import v2_search as channels_sql
from app.store.db import StoreInfo
from app.store.scope import Scope
from app.v2_settings import V2Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[int, int]  # (document_id, ordinal)
# stopwords and intent words are the language's, not a tuning knob
QUERY_CONFIG = QueryConfig()


def build_reranker(
    tuning: V2Settings, http: httpx.AsyncClient | None, *, api_key: str | None = None
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
        )
    if config.backend == "onnx":
        if config.onnx_dir is None:
            raise ConfigError("RAG_V2__RERANK__BACKEND=onnx needs RAG_V2__RERANK__ONNX_DIR")
        return OnnxCrossEncoder(config.onnx_dir, max_tokens=config.onnx_max_tokens)
    return FeatureReranker(config.features)


@dataclass
class ChannelReport:
    """How one channel went: its hits, its time, and why it failed (None when it did not)."""

    hits: list[channels_sql.ChannelHit] = field(default_factory=list)
    ms: float = 0.0
    error: str | None = None
    path: str | None = None

    def as_debug(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"hits": len(self.hits), "ms": round(self.ms, 2), "error": self.error, "path": self.path}


@dataclass
class Statistics:
    """What the refusal decision reads about the visible part of the run."""

    chunks: int = 0
    document_frequency: dict[str, int] = field(default_factory=dict)


def _stage(items: Sequence[Fused] | Sequence[Scored], k: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items[:k]:
        c = item.candidate
        if isinstance(item, Fused):
            score = item.rerank if item.rerank is not None else item.score
        else:
            score = item.score
        out.append(
            {
                "chunk_id": c.chunk_id,
                "file_id": c.file_id,
                "page": display_page(c.page),
                "score": round(float(score), 6),
                "content": c.content,
            }
        )
    return out


# Of a V2 document's metadata, what a result carries: its indexing statistics and warnings stay in
# its row and in the log, not in every passage sent to a model.
RESULT_METADATA = ("kind", "content_type", "page_count", "unreadable_pages")


def _candidate(detail: channels_sql.ChunkDetail) -> Candidate:
    suffix = detail.filename.rsplit(".", 1)[-1].lower() if "." in detail.filename else None
    metadata: dict[str, Any] = {k: detail.metadata[k] for k in RESULT_METADATA if k in detail.metadata}
    metadata.setdefault("index_source", detail.source)
    if detail.document_number:
        metadata.setdefault("document_number", detail.document_number)
    return Candidate(
        chunk_id=detail.chunk_id,
        file_id=detail.file_id,
        content=detail.content,
        search_text=detail.search_text,
        kind=detail.kind,
        filename=detail.filename,
        title=detail.title or None,
        page=detail.page,
        page_label=detail.page_label,
        section=tuple(detail.section),
        table_caption=detail.table_caption,
        table_index=detail.table_index,
        row_index=detail.row_index,
        row_label=detail.row_label,
        headers=tuple(detail.headers),
        row_values=tuple(detail.row_values),
        units=tuple(detail.units),
        footnotes=tuple(detail.footnotes),
        entity_keys=detail.entity_keys,
        language=detail.language,
        publication_date=detail.publication_date,
        source_type=suffix,
        metadata=metadata,
    )


class V2SearchService:
    """Answers `/query_v2` for one collection, always inside the caller's `Scope`."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        info: StoreInfo,
        embedder: Embedder,
        tuning: V2Settings,
        reranker: Reranker,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.tuning = tuning
        self.reranker = reranker
        self.fallback = FeatureReranker(tuning.rerank.features)
        self.model = model_identity(settings)

    @property
    def enabled_namespaces(self) -> frozenset[str]:
        """RAG_V2_NAMESPACE_IDS."""
        return frozenset(self.settings.v2_namespace_ids)

    @property
    def timeout(self) -> float:
        """Seconds a channel's statement may take (QUERY_TIMEOUT_MS)."""
        return self.settings.query_timeout_ms / 1000

    async def _run(self, namespace: str, index_version: str | None) -> v2_index.RunRecord:
        async with self.pool.acquire(timeout=self.timeout) as conn:
            run = await v2_index.active_run(conn, self.info.collection_id, namespace, index_version)
            if run is None and index_version is not None:
                others = await v2_index.active_runs(conn, self.info.collection_id, namespace)
        if run is None and index_version is not None:
            # a pinned version that does not exist is the request's mistake, not a passing state
            known = ", ".join(sorted({r.index_version for r in others})) or "none"
            raise BadRequest(
                f"The V2 index of {namespace} has no active run of index version {index_version!r} "
                f"(active: {known}); leave index_version out for the newest"
            )
        if run is None:
            raise ServiceUnavailable(
                f"The V2 index of {namespace} has no active run yet: its first upload queues one, or "
                "build one with POST /v2/backfill (or scripts/v2-backfill)"
            )
        return run

    async def _timed(self, report: ChannelReport, work: Callable[[], Awaitable[None]]) -> None:
        t0 = time.perf_counter()
        try:
            await work()
        except Exception as exc:  # a failing channel degrades the answer; it never fails it alone
            report.error = exc.__class__.__name__ + (
                f": {exc}" if isinstance(exc, VectorModelMismatch) else ""
            )
            logger.warning("V2 channel failed: %s: %s", exc.__class__.__name__, exc)
        finally:
            report.ms = (time.perf_counter() - t0) * 1000

    async def _exact(self, report: ChannelReport, scope: Scope, run: int, plan: ChannelPlan) -> None:
        async def work() -> None:
            if not plan.exact_keys and not plan.exact_phrases:
                return
            async with self.pool.acquire(timeout=self.timeout) as conn:
                report.hits = await channels_sql.exact(
                    conn,
                    scope,
                    run,
                    keys=plan.exact_keys,
                    phrases=plan.exact_phrases,
                    limit=self.tuning.channels.limit,
                    timeout=self.timeout,
                )

        await self._timed(report, work)

    async def _lexical(self, report: ChannelReport, scope: Scope, run: int, plan: ChannelPlan) -> None:
        async def work() -> None:
            if not plan.lexical_terms and plan.trigram_text is None:
                return
            async with self.pool.acquire(timeout=self.timeout) as conn:
                report.hits = await channels_sql.lexical(
                    conn,
                    scope,
                    run,
                    plan.lexical_terms,
                    k1=self.tuning.channels.bm25_k1,
                    b=self.tuning.channels.bm25_b,
                    limit=self.tuning.channels.limit,
                    trigram_text=plan.trigram_text,
                    timeout=self.timeout,
                )

        await self._timed(report, work)

    async def _statistics(self, stats: Statistics, scope: Scope, run: int, plan: ChannelPlan) -> None:
        """The refusal's "rare terms" read the same visible statistics BM25 uses (never fatal)."""
        if not plan.lexical_terms:
            return
        try:
            async with self.pool.acquire(timeout=self.timeout) as conn:
                visible = await channels_sql.visible(conn, scope, run)
                stats.document_frequency = await channels_sql.document_frequencies(
                    conn, scope, run, plan.lexical_terms
                )
                stats.chunks = visible.chunks
        except Exception as exc:  # without statistics the refusal simply skips that signal
            logger.warning("V2 statistics failed: %s: %s", exc.__class__.__name__, exc)

    async def _vector(
        self, report: ChannelReport, scope: Scope, run: v2_index.RunRecord, query: str, embed_ms: list[float]
    ) -> None:
        async def work() -> None:
            if run.embedding_model != self.model:
                # vectors of another model are not comparable with this query's: say so, do not guess
                raise VectorModelMismatch(run.embedding_model, self.model)
            t0 = time.perf_counter()
            vector = await self.embedder.embed_query(query)
            embed_ms.append((time.perf_counter() - t0) * 1000)
            async with self.pool.acquire(timeout=self.timeout) as conn:
                report.hits, report.path = await channels_sql.vector(
                    conn,
                    scope,
                    run.run_id,
                    vector,
                    limit=self.tuning.channels.limit,
                    exact_max_chunks=self.tuning.channels.exact_scan_max_chunks,
                    ef_search=self.settings.hnsw_ef_search,
                    max_scan_tuples=self.settings.hnsw_max_scan_tuples,
                    timeout=self.timeout,
                )

        await self._timed(report, work)

    async def query(
        self, request: QueryV2Request, scope: Scope, namespace: str, *, debug: bool = False
    ) -> tuple[QueryV2Response, str]:
        """The answer and its Server-Timing header value."""
        t0 = time.perf_counter()
        analysis = analyze_query(request.query, QUERY_CONFIG)
        plan = plan_channels(analysis, QUERY_CONFIG.stopwords)
        t_analysis = time.perf_counter()
        run = await self._run(namespace, request.index_version)
        reports = {name: ChannelReport() for name in CHANNELS}
        stats = Statistics()
        embed_ms: list[float] = []
        await asyncio.gather(
            self._exact(reports["exact"], scope, run.run_id, plan),
            self._lexical(reports["lexical"], scope, run.run_id, plan),
            self._statistics(stats, scope, run.run_id, plan),
            self._vector(reports["vector"], scope, run, request.query, embed_ms),
        )
        t_channels = time.perf_counter()
        failed = [name for name, report in reports.items() if report.error is not None]
        for name in failed:
            V2_CHANNEL_FAILURES.labels(channel=name).inc()
        if len(failed) == len(CHANNELS):
            raise ServiceUnavailable(
                "Every V2 search channel failed ("
                + ", ".join(f"{n}: {reports[n].error}" for n in failed)
                + ")"
            )

        keys: dict[Key, None] = {}
        for report in reports.values():
            for hit in report.hits:
                keys.setdefault((hit.document_id, hit.ordinal), None)
        details: dict[Key, Candidate] = {}
        if keys:
            async with self.pool.acquire(timeout=self.timeout) as conn:
                for detail in await channels_sql.chunk_details(conn, scope, run.run_id, list(keys)):
                    details[(detail.document_id, detail.ordinal)] = _candidate(detail)
        scored: dict[str, list[Scored]] = {
            name: [
                Scored(details[(h.document_id, h.ordinal)], h.score)
                for h in report.hits
                if (h.document_id, h.ordinal) in details
            ]
            for name, report in reports.items()
            if report.error is None
        }
        fused = fuse(scored, self.tuning.fusion)
        t_fuse = time.perf_counter()
        outcome = await rerank_window(
            analysis,
            fused,
            self.reranker,
            window=self.tuning.rerank.window,
            per_file_cap=self.tuning.fusion.per_file_cap,
            per_page_cap=self.tuning.fusion.per_page_cap,
            fallback=self.fallback,
        )
        if outcome.fallback_reason is not None:
            V2_RERANK_FALLBACKS.labels(reranker=self.reranker.name).inc()
        t_rerank = time.perf_counter()
        decision = decide_refusal(
            analysis,
            outcome.items,
            self.tuning.refusal,
            document_frequency=stats.document_frequency if stats.chunks else None,
            documents=stats.chunks,
            channels_run=len(CHANNELS) - len(failed),
        )
        # build_evidence keeps only items of the request's (allow-listed) files and numbers them
        results = [] if decision.refuse else build_evidence(outcome.items, request.file_ids, request.k)
        degraded = bool(failed)
        V2_QUERIES.labels(outcome="answered" if results else "refused", degraded=str(degraded).lower()).inc()
        t_end = time.perf_counter()
        timing = {
            "analysis": (t_analysis - t0) * 1000,
            "embed": embed_ms[0] if embed_ms else 0.0,
            "channels": (t_channels - t_analysis) * 1000,
            "fuse": (t_fuse - t_channels) * 1000,
            "rerank": (t_rerank - t_fuse) * 1000,
            "total": (t_end - t0) * 1000,
        }
        body: dict[str, Any] | None = None
        if debug:
            body = self._debug(analysis, plan, run, reports, scored, fused, outcome.items, request.k, timing)
            body["refusal"] = decision.as_debug()
            body["rerank"] = {
                "backend": outcome.reranker,
                "fell_back": outcome.fallback_reason is not None,
                "error": outcome.fallback_reason,
                "ms": round(timing["rerank"], 2),
            }
        response = QueryV2Response(
            index_version=run.index_version,
            results=results,
            degraded=degraded,
            safe_refusal=None if results else SAFE_REFUSAL,
            debug=body,
        )
        server_timing = ", ".join(f"{name};dur={value:.2f}" for name, value in timing.items())
        return response, server_timing

    def _debug(
        self,
        analysis: QueryAnalysis,
        plan: ChannelPlan,
        run: v2_index.RunRecord,
        reports: dict[str, ChannelReport],
        scored: dict[str, list[Scored]],
        fused: Sequence[Fused],
        reranked: Sequence[Fused],
        k: int,
        timing: dict[str, float],
    ) -> dict[str, Any]:
        stages: dict[str, list[dict[str, Any]]] = {name: _stage(scored.get(name, []), k) for name in CHANNELS}
        stages["fused"] = _stage(fused, k)
        stages["reranked"] = _stage(reranked, k)
        return {
            "analysis": {
                "terms": list(analysis.terms),
                "exact_keys": list(plan.exact_keys),
                "phrases": list(analysis.phrases),
                "intents": sorted(analysis.intents),
                "trigram": plan.trigram_text,
                "language": analysis.language,
            },
            "run": {"run_id": run.run_id, "index_version": run.index_version},
            "channels": {name: report.as_debug() for name, report in reports.items()},
            "stages": stages,
            "timing_ms": {name: round(value, 2) for name, value in timing.items()},
        }


class VectorModelMismatch(RuntimeError):
    """The run's vectors come from another embedding model than the service's."""

    def __init__(self, stored: str, current: str) -> None:
        super().__init__(f"the index run was embedded with {stored}, the service embeds with {current}")
