"""Evidence search behind one face: `Evidence`, built by `build_evidence`.

The rest of the service talks to evidence search only through this object: the composition root
builds it and hands it to ingestion (a derived index of the uploads: staged from each upload's own
parse and written in its commit, deleting with the files) and to the job queue (its kinds, its
store of chunks without a vector); the routers and the MCP tools ask it questions and the admin
routes manage its runs. What it is made of (the index context, the query service, the jobs, the
index tasks, the admin work) stays inside the package.

    evidence = build_evidence(settings, stack, dsn=dsn, pool=pool, info=info, embedder=embedder,
                              blobs=blobs, queue=queue.service, tasks=tasks, contextualizer=None)
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import httpx

from app.clients.blobs import BlobStore
from app.clients.embeddings import Embedder
from app.clients.http import build_http_client
from app.clients.redaction import redactor_for
from app.config import Settings
from app.evidence.admin import BackfillStarted, V2Admin, V2Overview
from app.evidence.index.context import V2Context
from app.evidence.index.lifecycle import RunStatus
from app.evidence.index.profile import IndexProfile
from app.evidence.index.sources import Derivative
from app.evidence.index.staging import FileOutcome
from app.evidence.index.upload import EvidenceUpload, prepare_upload
from app.evidence.jobs import V2Jobs, V2MissingVectors
from app.evidence.maintenance import V2Maintenance
from app.evidence.query.schemas import QueryV2Request, QueryV2Response
from app.evidence.query.service import V2SearchService, build_reranker
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.evidence.store.runs import RunRecord
from app.ingest.contextual import Contextualizer
from app.ingest.derived import StageReport, UploadDraft
from app.jobs.registry import JobRegistry
from app.jobs.service import JobService
from app.maintenance.registry import MaintenanceRegistry
from app.store.db import PoolShare, StoreInfo, pool_share
from app.store.jobs import Enqueued
from app.store.missing_vectors import SweepStore
from app.store.scope import Scope
from app.store.standby import ReadPools


@dataclass(frozen=True)
class EvidenceParts:
    """What `Evidence` is made of: for tests and benchmarks that look below the face, never the app."""

    context: V2Context
    search: V2SearchService
    jobs: V2Jobs
    tasks: V2Maintenance


class Evidence:
    """Evidence search (`/query_v2`, its index runs, jobs and tasks) as the service sees it."""

    def __init__(self, parts: EvidenceParts) -> None:
        self.parts = parts
        self._ctx = parts.context
        self._search = parts.search
        self._jobs = parts.jobs
        self._tasks = parts.tasks
        self._admin = V2Admin(parts.context, parts.tasks, parts.jobs)
        # the queue's self-healing sweep embeds evidence chunks stored without a vector through it
        self.missing_vectors: SweepStore = V2MissingVectors(parts.context)

    # --- whom it serves ----------------------------------------------------------------------------
    @property
    def enabled_namespaces(self) -> frozenset[str]:
        """The namespaces evidence search answers for (RAG_V2_NAMESPACE_IDS)."""
        return self._search.enabled_namespaces

    def require_enabled(self, namespace: str) -> None:
        """503 when evidence search is off entirely, 403 for a namespace it does not serve."""
        self._search.require_enabled(namespace)

    @property
    def profile(self) -> IndexProfile:
        """How this service builds evidence documents (tokenizer, window, tuning, their version)."""
        return self._ctx.profile

    # --- answering ---------------------------------------------------------------------------------
    async def query(
        self, request: QueryV2Request, scope: Scope, namespace: str, *, debug: bool = False
    ) -> tuple[QueryV2Response, str]:
        """The evidence for `request` inside `scope`, and its Server-Timing header value."""
        return await self._search.query(request, scope, namespace, debug=debug)

    # --- a derived index of the uploads (app/ingest/derived.py) ------------------------------------
    name = "evidence"

    def wants(self, owner: str) -> bool:
        """Uploads of a namespace evidence search serves are staged with the upload itself."""
        return owner in self.enabled_namespaces

    async def prepare(self, draft: UploadDraft, report: StageReport) -> EvidenceUpload | None:
        """The upload's evidence documents, from its own parse, to be written in its commit."""
        if not self.wants(draft.owner):
            return None
        return await prepare_upload(self._ctx, draft, report=report, queue_job=self._jobs.note_upload)

    async def delete_files(self, conn: asyncpg.Connection, scope: Scope) -> None:
        """Delete the evidence rows of the scope's files, inside ingestion's delete transaction."""
        await read_store.delete_files(conn, scope)

    def install(self, registry: JobRegistry) -> None:
        """Register the evidence job kinds (`v2-backfill`, `v2-index-file`) on the queue."""
        self._jobs.install(registry)

    async def start(self) -> None:
        """Want the vector index of every dimension an active run holds (the background tasks)."""
        await self._tasks.start()

    # --- administration (the /v2 routes, /admin/reindex, the MCP reindex tool) ---------------------
    async def overview(self) -> V2Overview:
        """Schema readiness, the active runs, the run answering each namespace, the index tasks."""
        return await self._admin.overview()

    async def start_run(
        self, *, namespace: str, index_version: str | None, file_ids: Sequence[str], created_by: str
    ) -> RunStatus:
        """A run of `namespace` that must contain exactly `file_ids`."""
        return await self._admin.start_run(
            namespace=namespace, index_version=index_version, file_ids=file_ids, created_by=created_by
        )

    async def list_runs(
        self, *, namespace: str | None, status: run_store.RunStatus | None, limit: int
    ) -> list[RunRecord]:
        """Runs, newest first (optionally of one namespace or status)."""
        return await self._admin.list_runs(namespace=namespace, status=status, limit=limit)

    async def run(self, run_id: int) -> RunStatus:
        """A run with the progress of each of its files (404 when unknown)."""
        return await self._admin.run(run_id)

    async def stage(self, run_id: int, file_id: str, derivative: Derivative | None = None) -> FileOutcome:
        """Stage one expected file of a run, from its original or from `derivative`."""
        return await self._admin.stage(run_id, file_id, derivative)

    async def activate(self, run_id: int, *, force: bool) -> RunStatus:
        """Make a complete run the active one."""
        return await self._admin.activate(run_id, force=force)

    async def fail(self, run_id: int, reason: str) -> RunStatus:
        """Give a running run up."""
        return await self._admin.fail(run_id, reason)

    async def backfill(
        self,
        *,
        namespace: str,
        index_version: str | None,
        file_ids: Sequence[str] | None,
        activate: bool,
        force: bool,
        created_by: str,
    ) -> BackfillStarted:
        """Start a backfill run of the namespace and queue the job that plans it, file by file."""
        return await self._admin.backfill(
            namespace=namespace,
            index_version=index_version,
            file_ids=file_ids,
            activate=activate,
            force=force,
            created_by=created_by,
        )

    async def reindex(self, *, namespace: str, force: bool, created_by: str) -> Enqueued:
        """Queue the backfill of a namespace (a waiting request for it is joined, not doubled)."""
        return await self._admin.reindex(namespace=namespace, force=force, created_by=created_by)


def build_evidence(
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    *,
    dsn: str,
    pool: asyncpg.Pool,
    info: StoreInfo,
    embedder: Embedder,
    blobs: BlobStore,
    queue: JobService,
    tasks: MaintenanceRegistry,
    contextualizer: Contextualizer | None,
    reads: ReadPools | None = None,
) -> Evidence:
    """Evidence search wired to the service's resources; its closes go on `stack`."""
    index_tasks = V2Maintenance(settings, pool, info, embedder, dsn, tasks)
    ctx = V2Context(
        settings,
        pool,
        info,
        embedder,
        blobs,
        on_dimension=index_tasks.want_index,
        contextualizer=contextualizer,
    )
    jobs = V2Jobs(ctx, queue)
    tuning = settings.v2
    rerank_http: httpx.AsyncClient | None = None
    if tuning.rerank.backend == "http":
        # its own client: the embedding client may carry RAG_OPENAI_PROXY, which is for OpenAI only
        rerank_http = build_http_client(timeout_s=tuning.rerank.timeout_seconds)
        stack.push_async_callback(rerank_http.aclose)
    reranker = build_reranker(
        tuning,
        rerank_http,
        api_key=tuning.rerank.api_key,
        redact=redactor_for("reranker", settings.pii_redact),
    )
    # its statements hold their connection longest: all but a reserve, so they never take all of it
    # (questions read on a caught-up standby when DATABASE_READ_URLS names any)
    connections = PoolShare(reads or pool, pool_share(settings.db_pool_max_size))
    # files /query_v2 finds missing from the answering run: their staging goes first
    search = V2SearchService(
        settings, connections, info, embedder, tuning, reranker, on_missing=jobs.hurry_staging
    )
    return Evidence(EvidenceParts(ctx, search, jobs, index_tasks))
