"""Keeps the HNSW index of each embedding dimension built, and knows which ones are usable.

Everything here runs in the background: start-up and requests never wait for an index build. Until
an index is valid, searches take the exact path (always correct, slower on large allow-lists).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg

from app.config import Settings
from app.store import vector_copy
from app.store.chunks import CatalogueStats, catalogue_stats
from app.store.db import StoreInfo
from app.store.vector_index import (
    IndexSpec,
    backfill_catalog,
    build_index,
    drop_legacy_indexes,
    ensure_function,
    index_spec,
    index_state,
)

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 30.0
STATS_SECONDS = 60.0
# drift check of the vector copy: a count of both tables, so not every minute on large tables
RECONCILE_SECONDS = 3600.0


class VectorIndexManager:
    """Builds missing HNSW indexes in the background and reports the valid one for a dimension."""

    def __init__(self, settings: Settings, dsn: str, info: StoreInfo) -> None:
        self.settings = settings
        self.dsn = dsn
        self.info = info
        self._valid: dict[int, IndexSpec] = {}
        self._handled: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_check: dict[int, float] = {}
        self.catalog_ready = asyncio.Event()
        self.stats = CatalogueStats()
        # the compact vector copy: searches use it once it holds every row (state 'ready')
        self.copy_state = "missing"
        self.copy_ready = asyncio.Event()

    def start(self, dims_hint: int | None) -> None:
        """Backfill the file catalogue, keep its statistics fresh, build the index for `dims_hint`."""
        self._spawn(self._backfill_then_watch())
        self._spawn(self._backfill_copy())
        if dims_hint:
            self.note_dims(dims_hint)

    def note_ingest(self, file_id: str, owner: str, dims: int | None, chunks: int) -> None:
        """Account for a file this process just stored, until the next statistics refresh."""
        self.stats = self.stats.with_file(file_id, owner, dims, chunks)

    def note_dims(self, dims: int) -> None:
        """Make sure the index for `dims` exists (first sight of a dimension starts a build)."""
        if self.settings.vector_index == "none" or dims in self._handled:
            return
        self._handled.add(dims)
        spec = index_spec(dims)
        if spec is None:
            logger.warning("pgvector cannot index %d dimensions; searches stay exact", dims)
            return
        self._spawn(self._ensure(spec))

    @property
    def use_copy(self) -> bool:
        """True when searches may rank on the compact vector copy (exact scans and its HNSW index)."""
        return self.copy_state == "ready"

    def usable(self, dims: int) -> IndexSpec | None:
        """The valid index for `dims`, or None (then searches are exact)."""
        return self._valid.get(dims)

    async def close(self) -> None:
        """Cancel background work."""
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- background jobs ----------------------------------------------------------------------
    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _backfill_then_watch(self) -> None:
        try:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute("SET statement_timeout = 0")
                added = await backfill_catalog(conn, self.info.collection_id)
                if added:
                    logger.info("Catalogued %d files written by rag_api", added)
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError) as exc:
            logger.warning("Catalogue backfill failed (%s); path estimates may be off", type(exc).__name__)
        while True:
            await self._refresh_stats()
            self.catalog_ready.set()
            await asyncio.sleep(STATS_SECONDS)

    async def _backfill_copy(self) -> None:
        """Copy pre-existing rows into the vector copy, then check it for drift now and then."""
        while True:
            try:
                conn = await asyncpg.connect(self.dsn)
                try:
                    await conn.execute("SET statement_timeout = 0")
                    started = time.monotonic()
                    copied = await vector_copy.backfill(conn)
                    if copied is not None:
                        logger.info(
                            "Vector copy backfilled: %d rows in %.1f s", copied, time.monotonic() - started
                        )
                    self._set_copy_state(await vector_copy.copy_state(conn))
                    if self.copy_state == "ready":
                        repaired = await vector_copy.reconcile(conn)
                        if repaired and any(repaired):
                            logger.warning("Vector copy repaired: %d rows added, %d removed", *repaired)
                finally:
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except (OSError, asyncpg.PostgresError) as exc:
                logger.warning(
                    "Vector copy backfill or check failed (%s); exact scans read rag_api's rows", exc
                )
            if self.copy_state == "disabled":
                return
            # backfilling: another replica holds the lock; ready: the next drift check
            await asyncio.sleep(RECONCILE_SECONDS if self.copy_state == "ready" else RECHECK_SECONDS)

    def _set_copy_state(self, state: str) -> None:
        if state != self.copy_state:
            logger.info("Vector copy state: %s", state)
        self.copy_state = state
        if state == "ready":
            self.copy_ready.set()
        else:
            self.copy_ready.clear()

    async def _refresh_stats(self) -> None:
        try:
            conn = await asyncpg.connect(self.dsn)
            try:
                self.stats = await catalogue_stats(conn, self.info)
                self._set_copy_state(await vector_copy.copy_state(conn))
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError) as exc:
            logger.warning("Catalogue statistics refresh failed (%s)", type(exc).__name__)

    async def _ensure(self, spec: IndexSpec) -> None:
        # the index lives on the vector copy: build it once the copy holds every row (a build
        # during the backfill would work, but slower, and nothing may use it before then)
        await self.copy_ready.wait()
        try:
            conn = await asyncpg.connect(self.dsn)
            try:
                valid = await build_index(
                    conn,
                    spec,
                    m=self.settings.hnsw_m,
                    ef_construction=self.settings.hnsw_ef_construction,
                    memory=self.settings.hnsw_build_memory,
                )
                while not valid:
                    # another replica is building it: look again later
                    await asyncio.sleep(RECHECK_SECONDS)
                    valid = await index_state(conn, spec) == "valid"
                    if valid:
                        await ensure_function(conn, spec)
                    elif await index_state(conn, spec) == "missing":
                        valid = await build_index(
                            conn,
                            spec,
                            m=self.settings.hnsw_m,
                            ef_construction=self.settings.hnsw_ef_construction,
                            memory=self.settings.hnsw_build_memory,
                        )
                self._valid[spec.dims] = spec
                self._last_check[spec.dims] = time.monotonic()
                try:
                    dropped = await drop_legacy_indexes(conn)
                except asyncpg.PostgresError as exc:
                    logger.warning("Could not drop HNSW indexes of the previous layout (%s)", exc)
                else:
                    if dropped:
                        logger.info("Dropped HNSW indexes of the previous layout: %s", ", ".join(dropped))
            finally:
                await conn.close()
        except asyncio.CancelledError:
            raise
        except (OSError, asyncpg.PostgresError) as exc:
            # the exact path keeps answering; a later restart tries again
            logger.error("Building %s failed (%s); searches stay exact", spec.name, type(exc).__name__)
            self._handled.discard(spec.dims)
