"""V1 retrieval: vector search and reads, always inside the caller's namespaces."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg
import numpy as np

from app import metrics
from app.clients.embeddings import Embedder
from app.config_sections import SearchSettings
from app.search.context import ContextChunk, build_context
from app.search.planner import VectorSearchDecision, plan_vector_search
from app.search.state import SearchState
from app.search.vector_cache import FileVectors, VectorCache
from app.store import chunks as store
from app.store import memory_search
from app.store.db import StoreInfo
from app.store.scope import Scope
from app.store.standby import ReadPools

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Row caps for reads that return whole files: far above any real file, low enough to protect memory.
MAX_DOCUMENT_ROWS = 100_000
MAX_IDS = 1_000_000
# files a search loads into the vector cache itself (a changed file or a few new ones); more, and
# the search runs in the database while they are loaded in the background
INLINE_LOAD_FILES = 32


@dataclass
class SearchOutcome:
    """Hits of one search and where its time went."""

    hits: list[store.ChunkHit] = field(default_factory=list)
    path: str = "none"
    visible_estimate: int = 0
    embed_ms: float = 0.0
    db_ms: float = 0.0  # the search statement, once it had a connection
    pool_ms: float = 0.0  # waiting for a pooled connection

    def server_timing(self) -> str:
        """A `Server-Timing` header value (embedding, connection wait, database, and the path taken)."""
        return (
            f"embed;dur={self.embed_ms:.2f}, pool;dur={self.pool_ms:.2f}, "
            f'db;dur={self.db_ms:.2f};desc="{self.path}"'
        )


class SearchService:
    """Searches and reads chunks for one collection, always inside the caller's `Scope` (`app.access`)."""

    def __init__(
        self,
        settings: SearchSettings,
        pool: asyncpg.Pool | ReadPools,  # the primary's, or its read standbys' (app/store/standby.py)
        info: StoreInfo,
        embedder: Embedder,
        state: SearchState | None = None,
        want_index: Callable[[int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.state = state or SearchState()
        # asks the maintenance work for a vector index of a dimension queries use (main.py wires it)
        self.want_index = want_index
        self.vector_cache = VectorCache(settings.memory_max_bytes)
        self._loading: set[tuple[str, int]] = set()  # (owner, dims) being loaded in the background
        self._load_tasks: set[asyncio.Task[None]] = set()
        if settings.memory_max_bytes > 0:
            from threadpoolctl import threadpool_limits

            # one BLAS thread per matrix product, in the whole process: a knowledge base's product
            # takes ~0.1 ms on one core, while a pool of spinning threads on two busy cores took
            # 16 ms (measured with concurrent requests; the multilingual model sets the same)
            threadpool_limits(limits=1, user_api="blas")

    def plan(self, dims: int, scope: Scope, k: int) -> VectorSearchDecision:
        """The planner's decision for a query vector of `dims` dimensions within `scope`."""
        return plan_vector_search(
            dims=dims,
            k=k,
            file_ids=scope.file_ids or (),
            owners=scope.owners,
            uploader=scope.uploader,
            knowledge=self.state.knowledge(),
            settings=self.settings,
        )

    async def search(self, query: str, scope: Scope, k: int) -> SearchOutcome:
        """Global top-`k` chunks nearest to `query` among the rows `scope` can see."""
        if scope.file_ids and "" in scope.file_ids:
            scope = scope.with_files(f for f in scope.file_ids if f)
        if not scope.file_ids or not query.strip():
            return SearchOutcome()
        t0 = time.perf_counter()
        vector = await self.embedder.embed_query(query)
        t1 = time.perf_counter()
        dims = int(vector.shape[0])
        if self.want_index is not None:
            self.want_index(dims)
        decision = self.plan(dims, scope, k)
        timeout = self.settings.query_timeout_s
        t_conn = t1

        async def nearest(conn: asyncpg.Connection) -> store.SearchResult:
            nonlocal t_conn
            t_conn = time.perf_counter()
            result = None
            if decision.in_memory:
                result = await self.search_in_memory(conn, scope, decision, vector, timeout)
            if result is None:
                result = await store.search(conn, scope, decision.call(vector), timeout=timeout)
            return result

        result = await self._read(nearest, timeout)
        t2 = time.perf_counter()
        hits = result.hits
        threshold = self.settings.distance_threshold
        if threshold is not None:
            # a relevance cut on already-authorised rows, not an authorisation filter
            hits = [h for h in hits if h.distance <= threshold]
        outcome = SearchOutcome(
            hits,
            result.path,
            decision.visible_estimate,
            embed_ms=(t1 - t0) * 1000,
            db_ms=(t2 - t_conn) * 1000,
            pool_ms=(t_conn - t1) * 1000,
        )
        logger.debug(
            "search files=%d k=%d hits=%d path=%s estimate=%d embed_ms=%.1f pool_ms=%.1f db_ms=%.1f",
            len(scope.file_ids),
            k,
            len(hits),
            outcome.path,
            outcome.visible_estimate,
            outcome.embed_ms,
            outcome.pool_ms,
            outcome.db_ms,
        )
        return outcome

    async def search_in_memory(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        decision: VectorSearchDecision,
        vector: np.ndarray,
        timeout: float,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
    ) -> store.SearchResult | None:
        """The exact scan on the vector cache; None when the database's own scan must answer.

        The database names the visible files (and their revisions) and re-reads the candidates
        inside the scope; the cache only scores rows of those files. None when a file could not be
        held, or when fewer rows came back than were visible (a file changed in between).
        """
        dims = int(vector.shape[0])
        norm = float(np.linalg.norm(vector))
        unit = (vector / norm if norm > 0 else vector).astype(np.float32, copy=False)
        # the caller's uploads into namespaces it did not name: a guess from the catalogue's
        # statistics like the rest (the database confirms it)
        files = scope.file_ids or ()
        granted = self.state.stats.granted(scope.uploader, files, scope.owners)
        held = self.vector_cache.rank_held(files, scope.owners, dims, unit, decision.candidates, granted)
        if held is not None:
            # held already: ranked first, then one statement checks the visible files and re-reads
            guess, revisions = held
            if guess.ids:
                call = memory_search.answer_call(vector, decision.k, guess.ids, revisions)
                result = await store.search(conn, scope, call, timeout=timeout)
                if len(result.hits) >= min(decision.k, guess.visible_rows):
                    return result
                metrics.VECTOR_CACHE_EVENTS.labels("guess_missed").inc()
        visible = await memory_search.visible_files(conn, scope, timeout=timeout)
        if not visible:
            return store.SearchResult([], "memory")
        missing = self.vector_cache.missing(visible, dims)
        if missing:
            narrowed = scope.with_files(f.file_id for f in missing)
            if len(missing) > INLINE_LOAD_FILES:
                # a namespace not held yet (~30 ms per 1,000 files): this search runs in the
                # database as before, and the namespace is loaded beside it for the next ones
                self._load_later(narrowed, dims, {f.owner for f in missing})
                metrics.VECTOR_CACHE_EVENTS.labels("to_database").inc()
                return None
            packed = await memory_search.scope_vectors(conn, narrowed, dims, timeout=timeout)
            self._take(dims, packed)
        nearest = self.vector_cache.nearest(visible, dims, unit, decision.candidates)
        if nearest is None:
            metrics.VECTOR_CACHE_EVENTS.labels("to_database").inc()
            return None
        if not nearest.ids:
            return store.SearchResult([], "memory")
        call = memory_search.rank_call(vector, decision.k, nearest.ids)
        result = await store.search(conn, scope.with_files(nearest.file_ids), call, timeout=timeout)
        if len(result.hits) < min(decision.k, nearest.visible_rows):
            metrics.VECTOR_CACHE_EVENTS.labels("to_database").inc()
            return None
        return result

    def _take(self, dims: int, packed: list[memory_search.PackedVectors]) -> None:
        """Hold freshly read files in the vector cache."""
        evicted = self.vector_cache.update(dims, FileVectors.decode_all(packed, dims))
        metrics.VECTOR_CACHE_EVENTS.labels("loaded").inc(len(packed))
        metrics.VECTOR_CACHE_EVENTS.labels("evicted").inc(evicted)
        metrics.VECTOR_CACHE_BYTES.set(self.vector_cache.nbytes)

    def _load_later(self, scope: Scope, dims: int, owners: set[str]) -> None:
        """Load the files of `scope` into the cache in the background, once per namespace at a time."""
        keys = {(owner, dims) for owner in owners}
        if keys <= self._loading:
            return
        self._loading |= keys

        async def load() -> None:
            try:
                packed = await self._read(
                    lambda conn: memory_search.scope_vectors(conn, scope, dims), self.settings.query_timeout_s
                )
                self._take(dims, packed)
            except Exception:  # a later search tries again; this one was answered by the database
                logger.warning(
                    "Loading %d files' vectors into memory failed", len(scope.file_ids or ()), exc_info=True
                )
            finally:
                self._loading -= keys

        task = asyncio.create_task(load(), name="vector-cache-load")
        self._load_tasks.add(task)
        task.add_done_callback(self._load_tasks.discard)

    async def settle(self) -> None:
        """Wait for the background loads of the vector cache (tests; shutdown cancels them instead)."""
        while self._load_tasks:
            await asyncio.gather(*self._load_tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel background loads."""
        for task in list(self._load_tasks):
            task.cancel()
        await asyncio.gather(*self._load_tasks, return_exceptions=True)

    async def documents(self, scope: Scope) -> list[store.StoredChunk]:
        """All chunks of the scope's files, grouped by file in document order."""
        return await self._read(lambda conn: store.documents(conn, scope, limit=MAX_DOCUMENT_ROWS))

    async def file_ids(self, scope: Scope) -> list[str]:
        """Distinct file ids the scope can see (its file list, if any, is ignored)."""
        listing = Scope.of(
            scope.collection_id,
            scope.owners,
            uploader=scope.uploader,
            legacy_unowned=scope.legacy_unowned,
        )
        return await self._read(lambda conn: store.list_file_ids(conn, listing, limit=MAX_IDS))

    async def files(self, scope: Scope, *, after: str | None, limit: int) -> list[store.ListedFile]:
        """A page of the catalogued files the scope can see, by file id after `after`."""
        return await self._read(lambda conn: store.list_files(conn, scope, after=after, limit=limit))

    async def _read(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> T:
        """`work` on a pooled connection: with read standbys (DATABASE_READ_URLS), a caught-up
        standby's, asked again on the primary when it fails there."""
        if isinstance(self.pool, ReadPools):
            return await self.pool.read(work, timeout=timeout)
        async with self.pool.acquire(timeout=timeout) as conn:
            return await work(conn)

    async def context(self, scope: Scope) -> str | None:
        """The text of the scope's file for the model, or None when it is not in scope."""
        rows = await self.documents(scope)
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
        return build_context(filename, pieces, max_overlap=self.settings.context_overlap)


def _page(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
