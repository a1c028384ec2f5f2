"""Prometheus metrics (prometheus-client): what the service measures, and the API to add more.

Everything lives in one registry of our own (`REGISTRY`, rendered by `GET /metrics`), created once
per process: several apps in one process (the tests) share it, so counters only grow. With several
worker processes (RAG_WORKERS, app/runtime/workers.py) each writes its values to a folder they share
(prometheus-client's multiprocess mode, `PROMETHEUS_MULTIPROC_DIR`), and whichever worker answers
renders them all: counters and histograms summed, per-process gauges one series per `pid`.

What is measured:
- every HTTP request: `ragoverlay_http_request_duration_seconds{route, method, status}` (a
  histogram; `_count` is the request count). `route` is the route's template (`/documents/{file_id}
  /context`), never the raw path, so ids cannot blow up the label set; unknown paths are `unmatched`;
- stages of a request, from its `Server-Timing` header (`embed`, `db` of a search ...):
  `ragoverlay_request_stage_duration_seconds{route, stage}`;
- ingestion stages: `ragoverlay_ingest_stage_duration_seconds{stage}` (`parse` = parse and chunk,
  `embed`, `store` = original and transaction, `total`);
- embedding calls: `ragoverlay_embedding_calls_total{provider, kind, outcome}` (`kind` documents or
  query, `outcome` ok or error), `ragoverlay_embedding_call_duration_seconds{provider, kind}` and
  each HTTP attempt `ragoverlay_embedding_http_attempts_total{provider, outcome}` (`ok`,
  `http_4xx`, `http_429`, `http_5xx`, `timeout`, `transport_error`);
- the database: `ragoverlay_database_up`, `ragoverlay_database_outages_total`,
  `ragoverlay_database_restarts_total`, `ragoverlay_database_last_outage_seconds`, pool size and
  idle connections;
- refused by a rate limit: `ragoverlay_rate_limited_total{limit}`;
- with read standbys (app/store/standby.py): where reads went, `ragoverlay_standby_reads_total{outcome}`,
  and the time spent choosing, `ragoverlay_standby_check_seconds`;
- the process (RSS, CPU, open files) from prometheus-client's own collectors.

Adding gauges (the job queue does this):

    from app import metrics
    JOBS = metrics.gauge("ragoverlay_jobs", "Jobs by status", ("status",))
    JOBS.labels(status="queued").set(3)                # whenever you know

    async def refresh() -> None:                      # or: computed at each scrape
        for status, count in (await store.count_jobs_by_status()).items():
            JOBS.labels(status=status).set(count)
    forget = metrics.on_scrape(refresh)               # in the lifespan; call forget() on shutdown

`gauge` returns the same Gauge when asked twice for one name (apps are created more than once per
process). `on_scrape` hooks run before each `/metrics` answer, at most `SCRAPE_HOOK_TIMEOUT_S` each;
one that fails or times out is logged and the last values are served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE_LATEST
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# request latencies from 5 ms (a cached search) to 5 min (a large upload)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SCRAPE_HOOK_TIMEOUT_S = 5.0
UNMATCHED_ROUTE = "unmatched"
MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client reads it when first imported

HTTP_DURATION = Histogram(
    "ragoverlay_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by route template, method and status",
    ("route", "method", "status"),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REQUEST_STAGE = Histogram(
    "ragoverlay_request_stage_duration_seconds",
    "Stages of a request as its Server-Timing header reports them (a search: embed, db)",
    ("route", "stage"),
    buckets=STAGE_BUCKETS,
    registry=REGISTRY,
)
INGEST_STAGE = Histogram(
    "ragoverlay_ingest_stage_duration_seconds",
    "Stages of an upload: parse (and chunk), embed, store (original and transaction), total",
    ("stage",),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
EMBEDDING_CALLS = Counter(
    "ragoverlay_embedding_calls_total",
    "Embedding calls (one per document batch set or query), by outcome",
    ("provider", "kind", "outcome"),
    registry=REGISTRY,
)
EMBEDDING_DURATION = Histogram(
    "ragoverlay_embedding_call_duration_seconds",
    "Time of an embedding call, retries included",
    ("provider", "kind"),
    buckets=(*STAGE_BUCKETS, 30.0, 60.0, 120.0),
    registry=REGISTRY,
)
EMBEDDING_ATTEMPTS = Counter(
    "ragoverlay_embedding_http_attempts_total",
    "HTTP requests to the embedding provider, by outcome (each retry counts)",
    ("provider", "outcome"),
    registry=REGISTRY,
)
PII_REDACTED = Counter(
    "ragoverlay_pii_redacted_total",
    "Pieces of personal data replaced by a placeholder before text left the service (PII_REDACT), "
    "by destination (embeddings, reranker, contextual) and kind (EMAIL, PHONE, IBAN, ...)",
    ("destination", "kind"),
    registry=REGISTRY,
)
CONTEXTUAL_CHUNKS = Counter(
    "ragoverlay_contextual_chunks_total",
    "Chunks contextual chunking was to situate, by outcome: situated, failed (timeout, error, garbage), "
    "stopped (after failures in a row), over_budget (the document's time budget was spent)",
    ("outcome",),
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "ragoverlay_rate_limited_total",
    "Requests refused with 429 by a per-client rate limit",
    ("limit",),
    registry=REGISTRY,
)

MCP_TOOL_CALLS = Counter(
    "ragoverlay_mcp_tool_calls_total",
    "MCP tool calls by tool and outcome: ok, invalid (bad arguments), refused (scope, auth, V2 off), "
    "limited (rate limit), error",
    ("tool", "outcome"),
    registry=REGISTRY,
)
MCP_SESSIONS_REFUSED = Counter(
    "ragoverlay_mcp_sessions_refused_total",
    "New MCP sessions refused: unauthorised, rate (MCP_SESSION_CREATE_RATE_PER_MINUTE)",
    ("reason",),
    registry=REGISTRY,
)

VECTOR_CACHE_BYTES = Gauge(
    "ragoverlay_vector_cache_bytes",
    "Memory held by V1's vector cache (VECTOR_CACHE_MB is its limit)",
    registry=REGISTRY,
    multiprocess_mode="liveall",
)
PROCESS_REQUESTS = Counter(
    "ragoverlay_process_http_requests_total",
    "HTTP requests answered by each service process (several with RAG_WORKERS): how evenly they share",
    ("pid",),
    registry=REGISTRY,
)
VECTOR_CACHE_EVENTS = Counter(
    "ragoverlay_vector_cache_events_total",
    "V1's memory scan: files loaded (new or at a new revision), namespaces evicted (budget), "
    "searches handed back to the database (a file not held, or a candidate gone in between), and "
    "guesses of the visible files the database refused (guess_missed: the three steps answered)",
    ("event",),
    registry=REGISTRY,
)

V2_QUERIES = Counter(
    "ragoverlay_v2_queries_total",
    "POST /query_v2 answers: answered (evidence returned) or refused (safe refusal), and degraded",
    ("outcome", "degraded"),
    registry=REGISTRY,
)
V2_CHANNEL_FAILURES = Counter(
    "ragoverlay_v2_channel_failures_total",
    "A /query_v2 channel (exact, lexical, vector) that failed or could not run",
    ("channel",),
    registry=REGISTRY,
)
V2_RETRIEVE_FALLBACKS = Counter(
    "ragoverlay_v2_retrieve_fallbacks_total",
    "/query_v2 questions whose one retrieve statement failed as a whole (timeout, connection, error) "
    "and that the same statement answered once per channel",
    ("reason",),
    registry=REGISTRY,
)
V2_RERANK_FALLBACKS = Counter(
    "ragoverlay_v2_rerank_fallbacks_total",
    "Reranker failures (timeout, bad reply) answered by the feature reranker instead",
    ("reranker",),
    registry=REGISTRY,
)

STANDBY_READS = Counter(
    "ragoverlay_standby_reads_total",
    "Reads routed with read standbys configured: standby (caught up at once), waited (caught up "
    "within READ_STANDBY_WAIT_MS), and the reads the primary answered instead: behind (still "
    "behind), unavailable (down, failing or set aside for now), promoted (not in recovery); "
    "retried: failed on the standby and asked again on the primary",
    ("outcome",),
    registry=REGISTRY,
)
STANDBY_CHECK_SECONDS = Histogram(
    "ragoverlay_standby_check_seconds",
    "Time a read spent choosing its server: the primary's WAL position and the standby's replay "
    "position (asked at once), plus any wait for the standby",
    buckets=STAGE_BUCKETS,
    registry=REGISTRY,
)


class _Runtime:
    """What the database gauges read: the running app's supervisor and pool (None when stopped)."""

    supervisor: Any = None
    pool: Any = None


RUNTIME = _Runtime()


def _status(attribute: str, default: float = 0.0) -> float:
    supervisor = RUNTIME.supervisor
    if supervisor is None:
        return default
    value = getattr(supervisor.status, attribute)
    return float(value) if value is not None else default


def _pool(method: str) -> float:
    pool = RUNTIME.pool
    if pool is None:
        return 0.0
    with contextlib.suppress(Exception):
        return float(getattr(pool, method)())
    return 0.0


# per process: with several workers, one series each (the `pid` label prometheus-client adds)
_RUNTIME_GAUGES: tuple[tuple[Gauge, Callable[[], float]], ...] = (
    (
        Gauge(
            "ragoverlay_database_up",
            "1 while the database answers, 0 during an outage",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _status("up"),
    ),
    (
        Gauge(
            "ragoverlay_database_outages_total",
            "Outages the supervisor has seen",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _status("outages"),
    ),
    (
        Gauge(
            "ragoverlay_database_restarts_total",
            "Restarts of the embedded PostgreSQL by the service",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _status("restarts"),
    ),
    (
        Gauge(
            "ragoverlay_database_last_outage_seconds",
            "Length of the last outage, from detection to recovery",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _status("last_outage_s"),
    ),
    (
        Gauge(
            "ragoverlay_db_pool_size",
            "Connections in the request pool",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _pool("get_size"),
    ),
    (
        Gauge(
            "ragoverlay_db_pool_idle",
            "Idle connections in the request pool",
            registry=REGISTRY,
            multiprocess_mode="liveall",
        ),
        lambda: _pool("get_idle_size"),
    ),
)
RUNTIME_REFRESH_S = 5.0  # how stale another worker's database gauges may be at a scrape


def _refresh_runtime() -> None:
    # set, not set_function: in multiprocess mode only set values reach the shared folder
    for metric, read in _RUNTIME_GAUGES:
        metric.set(read())


def multiprocess_dir() -> str | None:
    """The folder several workers share their metrics in (RAG_WORKERS > 1), or None for one process."""
    return os.environ.get(MULTIPROCESS_DIR_ENV) or None


async def _refresh_runtime_forever() -> None:
    while True:
        _refresh_runtime()
        await asyncio.sleep(RUNTIME_REFRESH_S)


def bind_runtime(supervisor: Any, pool: Any) -> Callable[[], None]:
    """Let the database gauges read this app's supervisor and pool; returns the undo."""
    RUNTIME.supervisor, RUNTIME.pool = supervisor, pool
    # another worker may answer the scrape: keep this one's gauges fresh in the shared folder
    refresher = asyncio.create_task(_refresh_runtime_forever()) if multiprocess_dir() else None

    def unbind() -> None:
        if refresher is not None:
            refresher.cancel()
        if RUNTIME.supervisor is supervisor:
            RUNTIME.supervisor, RUNTIME.pool = None, None

    return unbind


# --- the API for other modules ------------------------------------------------------------------
_gauges: dict[str, Gauge] = {}
_hooks: list[Callable[[], Awaitable[None]]] = []


def gauge(
    name: str, documentation: str, labelnames: Sequence[str] = (), *, per_process: bool = True
) -> Gauge:
    """A gauge in our registry (the same one when asked again for `name`).

    With several workers a `per_process` gauge has a series per worker (`pid`); any other (a
    count read from the database at a scrape) shows the value the last scrape set.
    """
    found = _gauges.get(name)
    if found is None:
        mode: Any = "liveall" if per_process else "livemostrecent"
        found = Gauge(name, documentation, tuple(labelnames), registry=REGISTRY, multiprocess_mode=mode)
        _gauges[name] = found
    return found


def on_scrape(hook: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run `hook` before each /metrics answer (to refresh gauges); returns the function that removes it."""
    _hooks.append(hook)

    def forget() -> None:
        with contextlib.suppress(ValueError):
            _hooks.remove(hook)

    return forget


async def render() -> bytes:
    """The registry in Prometheus' text format, after the scrape hooks ran."""
    for hook in list(_hooks):
        try:
            async with asyncio.timeout(SCRAPE_HOOK_TIMEOUT_S):
                await hook()
        except Exception as exc:  # serve the last values rather than no metrics at all
            logger.warning(
                "Metrics hook %s failed (%s)", getattr(hook, "__qualname__", hook), type(exc).__name__
            )
    _refresh_runtime()
    shared = multiprocess_dir()
    if shared is None:
        return generate_latest(REGISTRY)
    # every worker's values, counters summed (the dead ones' too: a counter never goes back)
    everyone = CollectorRegistry()
    MultiProcessCollector(everyone, path=shared)  # type: ignore[no-untyped-call]
    return generate_latest(everyone)


def observe_ingest(parse_s: float, embed_s: float, store_s: float) -> None:
    """Record the stages of one stored upload."""
    INGEST_STAGE.labels("parse").observe(parse_s)
    INGEST_STAGE.labels("embed").observe(embed_s)
    INGEST_STAGE.labels("store").observe(store_s)
    INGEST_STAGE.labels("total").observe(parse_s + embed_s + store_s)


def parse_server_timing(value: str) -> list[tuple[str, float]]:
    """`embed;dur=1.5, db;dur=2.0;desc="x"` -> [("embed", 0.0015), ("db", 0.002)] (seconds)."""
    out: list[tuple[str, float]] = []
    for entry in value.split(","):
        parts = [p.strip() for p in entry.split(";")]
        name = parts[0]
        if not name:
            continue
        for param in parts[1:]:
            key, _, raw = param.partition("=")
            if key.strip().lower() == "dur":
                with contextlib.suppress(ValueError):
                    out.append((name, float(raw.strip().strip('"')) / 1000))
                break
    return out


class MetricsMiddleware:
    """Pure ASGI: time every HTTP request by route template, method and status; record its stages."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        stages: list[tuple[str, float]] = []

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for key, value in message.get("headers", []):
                    if key.lower() == b"server-timing":
                        stages.extend(parse_server_timing(value.decode("latin-1")))
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED_ROUTE
            _labelled(HTTP_DURATION, route, scope.get("method", ""), str(status)).observe(
                time.perf_counter() - started
            )
            _labelled(PROCESS_REQUESTS, str(os.getpid())).inc()
            for stage, seconds in stages:
                if stage != "total":  # the whole request is the histogram above
                    _labelled(REQUEST_STAGE, route, stage).observe(seconds)


# the children of the two per-request histograms, by labels: `labels()` checks and locks on every
# call (~5 µs, four times a search), a dict lookup does not; the label sets are few (route
# templates, methods, statuses, stage names)
_CHILDREN: dict[tuple[str, ...], Any] = {}


def _labelled(metric: Any, *labels: str) -> Any:
    key = (metric._name, *labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*labels)
    return child
