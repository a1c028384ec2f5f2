"""What each console page shows, read from the running services (no HTTP round trip to ourselves).

    console = ConsoleService(services)
    await console.overview()                    # knowledge bases, the queue, evidence search's state
    await console.files("agent_x", search=None, sort="name", page=1)
    await console.jobs()                        # running (with progress), recent, parked
    await console.runs()                        # evidence index runs, their files' states, failures
    await console.search("agent_x", "user_7", "How heavy is the K 28?")   # V1 beside V2 with why
    await console.metrics()                     # latency histogram, request rates, refused share,
                                                # ingestion per hour over the last day

Searches run as the chosen user exactly as that user's request would: `Access.read_scope` builds the
scope (LibreChat's allow-list included), V1's `SearchService.search` and evidence search's `query`
answer inside it. The admin's own rights widen nothing but the debug output of V2.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field, replace
from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from app import metrics
from app.access.principal import Principal
from app.errors import RagError
from app.evidence.query.schemas import QueryV2Request, check_query_v2
from app.jobs.schemas import AdminJobOut
from app.services import Services
from app.store import console as store

PAGE_SIZE = 50
SEARCH_FILES = 1000  # as many as one LibreChat request may name
RUNS_SHOWN = 100
INGESTION_HOURS = 24


@dataclass(frozen=True)
class Overview:
    """The first page: every knowledge base, the job queue, evidence search's runs."""

    knowledge_bases: list[store.KnowledgeBase]
    queue: dict[str, int]
    v2_enabled: list[str]
    running_runs: int


@dataclass(frozen=True)
class FilesPage:
    """One page of a knowledge base's files."""

    namespace: str
    rows: list[store.FileRow]
    total: int
    page: int
    pages: int
    search: str | None
    sort: str


@dataclass(frozen=True)
class JobsPage:
    """Jobs running now (with progress), the newest, and the parked ones."""

    running: list[AdminJobOut]
    recent: list[AdminJobOut]
    failed: list[AdminJobOut]


@dataclass(frozen=True)
class SearchResult:
    """V1 and evidence search for one question as one user, side by side."""

    namespace: str
    user: str
    question: str
    files: int
    v1: list[dict[str, Any]] = field(default_factory=list)
    v2: dict[str, Any] | None = None
    v1_error: str | None = None
    v2_error: str | None = None


@dataclass(frozen=True)
class Bar:
    """One bar of a histogram: its label and share of the tallest (0..1), and the count."""

    label: str
    count: float
    share: float


@dataclass(frozen=True)
class MetricsPage:
    """Pictures from the service's own metrics since it started, and ingestion over the last day."""

    latency: list[Bar]
    routes: list[Bar]
    v2_outcomes: dict[str, float]
    uploads: dict[str, float]
    ingestion: list[store.Hour] = field(default_factory=list)

    @property
    def ingestion_top(self) -> int:
        """The tallest hour's chunks (V1 or evidence): the ingestion chart's scale."""
        return max((max(h.v1_chunks, h.evidence_chunks) for h in self.ingestion), default=0)


class ConsoleService:
    """Reads for the console's pages, over the services of the running app."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def overview(self) -> Overview:
        """Every knowledge base with its counts and health; the queue; V2's namespaces."""
        s = self.services
        async with s.pool.acquire() as conn:
            kbs = await store.knowledge_bases(conn, s.info.collection_id)
        stats = await s.jobs.service.queue_stats()
        c = stats.counts
        queue = {"queued": c.queued, "running": c.running, "done": c.done, "failed": c.failed}
        seen = await s.evidence.overview()
        return Overview(kbs, queue, sorted(set(s.settings.v2_namespace_ids)), seen.running_runs)

    async def files(self, namespace: str, *, search: str | None, sort: str, page: int) -> FilesPage:
        """One page of `namespace`'s files, `PAGE_SIZE` a page."""
        s = self.services
        sort_key = cast(store.FileSort, sort if sort in typing.get_args(store.FileSort) else "name")
        page = max(page, 1)
        async with s.pool.acquire() as conn:
            rows, total = await store.files(
                conn,
                s.info.collection_id,
                namespace,
                search=search or None,
                sort=sort_key,
                offset=(page - 1) * PAGE_SIZE,
                limit=PAGE_SIZE,
            )
        return FilesPage(namespace, rows, total, page, max(1, math.ceil(total / PAGE_SIZE)), search, sort_key)

    async def jobs(self) -> JobsPage:
        """Running jobs with their progress, the 50 newest, the parked (failed) ones."""
        service = self.services.jobs.service
        running = await service.list_jobs(status="running", kind=None, before_id=None, limit=100)
        recent = await service.list_jobs(status=None, kind=None, before_id=None, limit=50)
        failed = await service.list_jobs(status="failed", kind=None, before_id=None, limit=50)
        return JobsPage(
            [AdminJobOut.of(r) for r in running],
            [AdminJobOut.of(r) for r in recent],
            [AdminJobOut.of(r) for r in failed],
        )

    async def runs(self, failures: int = store.RUN_FAILURES) -> list[store.RunRow]:
        """The newest evidence index runs, each with its files' states, chunks and first `failures`
        failed files."""
        s = self.services
        async with s.pool.acquire() as conn:
            return await store.runs(conn, s.info.collection_id, RUNS_SHOWN, failures)

    async def retry(self, job_id: int) -> str:
        """Send a parked job back to the queue (as `POST /admin/jobs/{id}/retry`): its outcome word."""
        return await self.services.jobs.service.retry(job_id)

    async def search(self, namespace: str, user: str, question: str, k: int = 5) -> SearchResult:
        """`question` over `namespace`'s files as `user` would ask it: V1 and evidence search."""
        s = self.services
        async with s.pool.acquire() as conn:
            ids = await store.namespace_file_ids(conn, s.info.collection_id, namespace, SEARCH_FILES)
        principal = Principal(user_id=user)
        entity = None if namespace == user else namespace
        out = SearchResult(namespace, user, question, len(ids))
        if not ids:
            return out
        try:
            scope = await s.access.read_scope(principal, entity, ids)
        except RagError as exc:  # the user may not read this namespace: that is the answer
            return SearchResult(namespace, user, question, len(ids), v1_error=exc.detail, v2_error=exc.detail)
        v1, v1_error = await self._v1(question, scope, k)
        v2, v2_error = await self._v2(question, scope, namespace, entity, k)
        return SearchResult(namespace, user, question, len(ids), v1, v2, v1_error, v2_error)

    async def _v1(self, question: str, scope: Any, k: int) -> tuple[list[dict[str, Any]], str | None]:
        try:
            outcome = await self.services.search.search(question, scope, k)
        except RagError as exc:
            return [], exc.detail
        hits = [
            {
                "file_id": h.file_id,
                "score": round(1.0 - float(h.distance), 4),
                "text": h.text,
                "page": h.metadata.get("page"),
            }
            for h in outcome.hits
        ]
        return hits, None

    async def _v2(
        self, question: str, scope: Any, namespace: str, entity: str | None, k: int
    ) -> tuple[dict[str, Any] | None, str | None]:
        evidence = self.services.evidence
        try:
            evidence.require_enabled(namespace)
            request = check_query_v2(
                QueryV2Request(
                    query=question, file_ids=list(scope.file_ids or ()), entity_id=entity, k=k, debug=True
                )
            )
            answer, _ = await evidence.query(request, scope, namespace, debug=True)
        except RagError as exc:
            return None, exc.detail
        return answer.model_dump(mode="json"), None

    async def metrics(self) -> MetricsPage:
        """Latency histogram and request counts per route, V2 outcomes, uploads, from `/metrics`' text."""
        text = (await metrics.render()).decode()
        s = self.services
        async with s.pool.acquire() as conn:
            hours = await store.throughput(conn, s.info.collection_id, INGESTION_HOURS)
        return replace(_metrics_page(text), ingestion=hours)


def page_ranges(pages: list[int] | tuple[int, ...]) -> str:
    """Pages as a reader writes them: [1, 2, 3, 5] -> "pages 1-3, 5"; one page -> "page 5"."""
    spans: list[tuple[int, int]] = []
    for page in sorted(set(pages)):
        if spans and page == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], page)
        else:
            spans.append((page, page))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return ("page " if len(pages) == 1 else "pages ") + text


def _bars(pairs: list[tuple[str, float]]) -> list[Bar]:
    top = max((count for _, count in pairs), default=0.0)
    return [Bar(label, count, count / top if top else 0.0) for label, count in pairs]


def _metrics_page(text: str) -> MetricsPage:
    """The pictures' numbers from the Prometheus text (`metrics.render`)."""
    buckets: dict[float, float] = {}
    routes: dict[str, float] = {}
    v2: dict[str, float] = {}
    uploads: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ragoverlay_http_request_duration_seconds_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
            elif sample.name == "ragoverlay_http_request_duration_seconds_count":
                route = f"{sample.labels.get('method', '')} {sample.labels.get('route', '')}"
                routes[route] = routes.get(route, 0.0) + sample.value
            elif sample.name == "ragoverlay_v2_queries_total":
                key = sample.labels.get("outcome", "?") + (
                    " (degraded)" if sample.labels.get("degraded") == "true" else ""
                )
                v2[key] = v2.get(key, 0.0) + sample.value
            elif sample.name == "ragoverlay_ingest_stage_duration_seconds_count":
                uploads[sample.labels.get("stage", "?")] = sample.value
    # cumulative buckets into counts per bucket
    latency: list[tuple[str, float]] = []
    below = 0.0
    for le in sorted(buckets):
        count = buckets[le] - below
        below = buckets[le]
        label = "more" if math.isinf(le) else (f"≤ {le * 1000:g} ms" if le < 1 else f"≤ {le:g} s")
        latency.append((label, count))
    ranked = sorted(routes.items(), key=lambda kv: -kv[1])[:12]
    return MetricsPage(_bars(latency), _bars(ranked), v2, uploads)
