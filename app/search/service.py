"""V1 retrieval: vector search and reads, always inside the caller's namespaces."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from app.clients.embeddings import Embedder
from app.config import Settings
from app.search.context import ContextChunk, build_context
from app.search.index_manager import VectorIndexManager
from app.store import chunks as store
from app.store.db import StoreInfo

logger = logging.getLogger(__name__)

# Row caps for reads that return whole files: far above any real file, low enough to protect memory.
MAX_DOCUMENT_ROWS = 100_000
MAX_IDS = 1_000_000


@dataclass
class SearchOutcome:
    """Hits of one search and where its time went."""

    hits: list[store.ChunkHit] = field(default_factory=list)
    path: str = "none"
    visible_estimate: int = 0
    embed_ms: float = 0.0
    db_ms: float = 0.0

    def server_timing(self) -> str:
        """A `Server-Timing` header value (embedding, database, and the path taken)."""
        return f'embed;dur={self.embed_ms:.2f}, db;dur={self.db_ms:.2f};desc="{self.path}"'


class SearchService:
    """Searches and reads chunks for one collection."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        info: StoreInfo,
        embedder: Embedder,
        indexes: VectorIndexManager | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.indexes = indexes

    def plan(self, dims: int, file_ids: Sequence[str], owners: Sequence[str]) -> store.SearchPlan:
        """Search settings for a query vector of `dims` dimensions over distinct `file_ids`."""
        spec = self.indexes.usable(dims) if self.indexes else None
        stats = self.indexes.stats if self.indexes else store.CatalogueStats()
        return store.SearchPlan(
            exact_max_rows=self.settings.exact_scan_max_rows,
            estimate=stats.estimate(file_ids, owners),
            # rows of one dimension only: skip the per-row check (the database rechecks on a mismatch)
            check_dims=stats.uniform_dims != dims or self.settings.legacy_unowned_readable,
            index_function=spec.function_name if spec else None,
            index_dims=spec.dims if spec else 0,
            cost_factor=self.settings.hnsw_cost_factor,
            ef_search=self.settings.hnsw_ef_search,
            max_scan_tuples=self.settings.hnsw_max_scan_tuples,
            legacy_unowned=self.settings.legacy_unowned_readable,
            use_copy=self.indexes.use_copy if self.indexes else False,
        )

    async def search(
        self, query: str, file_ids: Sequence[str], owners: Sequence[str], k: int
    ) -> SearchOutcome:
        """Global top-`k` chunks of `file_ids` nearest to `query`, among rows `owners` own."""
        ids = list(dict.fromkeys(f for f in file_ids if f))
        if not ids or not query.strip():
            return SearchOutcome()
        t0 = time.perf_counter()
        vector = await self.embedder.embed_query(query)
        t1 = time.perf_counter()
        dims = int(vector.shape[0])
        if self.indexes is not None:
            self.indexes.note_dims(dims)
        timeout = self.settings.query_timeout_ms / 1000
        async with self.pool.acquire(timeout=timeout) as conn:
            result = await store.search(
                conn,
                self.info,
                vector=vector,
                file_ids=ids,
                owners=owners,
                k=k,
                plan=self.plan(dims, ids, owners),
                timeout=timeout,
            )
        t2 = time.perf_counter()
        hits = result.hits
        threshold = self.settings.rag_distance_threshold
        if threshold is not None:
            # a relevance cut on already-authorised rows, not an authorisation filter
            hits = [h for h in hits if h.distance <= threshold]
        outcome = SearchOutcome(
            hits, result.path, result.visible_estimate, (t1 - t0) * 1000, (t2 - t1) * 1000
        )
        logger.debug(
            "search files=%d k=%d hits=%d path=%s estimate=%d embed_ms=%.1f db_ms=%.1f",
            len(ids),
            k,
            len(hits),
            outcome.path,
            outcome.visible_estimate,
            outcome.embed_ms,
            outcome.db_ms,
        )
        return outcome

    async def documents(self, file_ids: Sequence[str], owners: Sequence[str]) -> list[store.StoredChunk]:
        """All chunks of `file_ids` the caller may read, grouped by file in document order."""
        async with self.pool.acquire() as conn:
            return await store.documents(
                conn,
                self.info,
                file_ids=list(dict.fromkeys(file_ids)),
                owners=owners,
                limit=MAX_DOCUMENT_ROWS,
                legacy_unowned=self.settings.legacy_unowned_readable,
            )

    async def file_ids(self, owners: Sequence[str]) -> list[str]:
        """Distinct file ids in the caller's namespaces."""
        async with self.pool.acquire() as conn:
            return await store.list_file_ids(
                conn,
                self.info,
                owners=owners,
                limit=MAX_IDS,
                legacy_unowned=self.settings.legacy_unowned_readable,
            )

    async def context(self, file_id: str, owners: Sequence[str]) -> str | None:
        """The file's full text for the model, or None when it is not in scope."""
        rows = await self.documents([file_id], owners)
        if not rows:
            return None
        filename = ""
        for row in rows:
            source = row.metadata.get("source")
            if isinstance(source, str) and source:
                # rag_api stored a server path here; the last segment is the file name
                filename = source.replace("\\", "/").rsplit("/", 1)[-1]
                break
        pieces = [ContextChunk(r.text, _page(r.metadata.get("page"))) for r in rows]
        return build_context(filename, pieces, max_overlap=self.settings.chunk_overlap)


def _page(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
