"""The database side of the background maintenance: each call on a connection of its own.

The maintenance tasks (`app/maintenance/`) reach the database only through this class, so they can
be run (and tested) without knowing how connections are made.
"""

from __future__ import annotations

from app.store import catalogue, checkpoints, namespace_index, vector_copy, vector_index
from app.store.catalogue import CatalogueSnapshot
from app.store.db import StoreInfo, dedicated_connection
from app.store.namespace_index import NamespaceSize
from app.store.vector_index import BuildOutcome, IndexSpec


class MaintenanceStore:
    """Catalogue, vector copy and HNSW index work for one collection's service."""

    def __init__(self, dsn: str, info: StoreInfo) -> None:
        self.dsn = dsn
        self.info = info

    async def backfill_catalogue(self) -> int:
        """Catalogue the files rag_api wrote; returns the rows added or completed."""
        async with dedicated_connection(self.dsn) as conn:
            return await catalogue.backfill_catalogue(conn, self.info.collection_id)

    async def read_catalogue(self) -> CatalogueSnapshot:
        """The collection's catalogue statistics now."""
        async with dedicated_connection(self.dsn) as conn:
            return await catalogue.read_catalogue(conn, self.info.collection_id)

    async def prune_checkpoints(self) -> int:
        """Delete embedding checkpoints that uploads left a week ago or more; returns how many."""
        async with dedicated_connection(self.dsn) as conn:
            return await checkpoints.prune(conn)

    async def copy_state(self) -> str:
        """The vector copy's state: 'backfilling', 'ready', 'disabled' or 'missing'."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_copy.copy_state(conn)

    async def backfill_copy(self) -> int | None:
        """Copy rows that predate the triggers (None: another replica is at it, or nothing to do)."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_copy.backfill(conn)

    async def reconcile_copy(self) -> tuple[int, int] | None:
        """Repair drift between the copy and rag_api's table: (added, removed), or None."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_copy.reconcile(conn)

    async def index_state(self, spec: IndexSpec) -> str:
        """'valid', 'building' or 'missing'."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_index.index_state(conn, spec)

    async def build_index(
        self, spec: IndexSpec, *, m: int, ef_construction: int, memory: str
    ) -> BuildOutcome:
        """Build the index unless another session is building it or another index of its table."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_index.build_index(
                conn, spec, m=m, ef_construction=ef_construction, memory=memory
            )

    async def ensure_walk(self, spec: IndexSpec) -> bool:
        """Create the index's walk function unless it is current."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_index.ensure_walk(conn, spec)

    async def namespace_sizes(self, min_rows: int) -> list[NamespaceSize]:
        """Namespaces holding at least `min_rows` chunks of one dimension."""
        async with dedicated_connection(self.dsn) as conn:
            return await namespace_index.namespace_sizes(conn, self.info.collection_id, min_rows)

    async def namespace_indexes(self) -> dict[str, bool]:
        """Every namespace index that exists: name -> valid."""
        async with dedicated_connection(self.dsn) as conn:
            return await namespace_index.namespace_indexes(conn, self.info.collection_id)

    async def build_namespace_index(
        self, size: NamespaceSize, *, m: int, ef_construction: int, memory: str
    ) -> BuildOutcome:
        """Build one namespace's index unless another session is building it or another of its table."""
        async with dedicated_connection(self.dsn) as conn:
            return await namespace_index.build_namespace_index(
                conn, self.info.collection_id, size, m=m, ef_construction=ef_construction, memory=memory
            )

    async def drop_namespace_index(self, name: str) -> bool:
        """Drop one namespace index; False when it is left for a later pass (a build holds its table)."""
        async with dedicated_connection(self.dsn) as conn:
            return await namespace_index.drop_namespace_index(conn, self.info.collection_id, name)

    async def ensure_namespace_walk(self, dims: int) -> bool:
        """Create the namespace walk function of `dims` unless it is current."""
        async with dedicated_connection(self.dsn) as conn:
            return await vector_index.ensure_walk(conn, IndexSpec(dims, namespace_index.NAMESPACE_WALKS))
