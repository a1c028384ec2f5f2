"""What the background maintenance has learned for the search planner, in one place."""

from __future__ import annotations

import asyncio
import logging
import time

from app.search.namespaces import NamespaceWalk
from app.search.planner import CatalogueStats, SearchKnowledge
from app.store.chunks import FileRecord

logger = logging.getLogger(__name__)


class SearchState:
    """Catalogue statistics, the vector copy's state and the usable HNSW walks, kept current.

    Written by the maintenance tasks (and by `file_stored` after each ingest), read by every search
    through `knowledge()`. Requests and tasks share the event loop, so plain attributes suffice.
    """

    def __init__(self) -> None:
        self.stats = CatalogueStats()
        self.copy_state = "missing"  # 'backfilling', 'ready', 'disabled' or 'missing'
        self._walks: dict[int, str] = {}
        self._namespaces: dict[tuple[str, int], NamespaceWalk] = {}  # (owner, dims) -> its own index
        self.catalogue_ready = asyncio.Event()  # statistics read at least once
        # files this process stored, with when: a catalogue read that began before one was stored
        # does not hold it, and must not erase it (`set_stats` applies them again)
        self._stored: list[tuple[float, FileRecord]] = []
        self._read_applied = float("-inf")  # when the read behind the current statistics began
        self.copy_ready = asyncio.Event()  # the compact vector copy holds every row

    def knowledge(self) -> SearchKnowledge:
        """The planner's inputs now."""
        return SearchKnowledge(self.stats, self.copy_state == "ready", self._walks, self._namespaces)

    @property
    def use_copy(self) -> bool:
        """True when searches may rank on the compact vector copy."""
        return self.copy_state == "ready"

    def walk(self, dims: int) -> str | None:
        """The usable HNSW walk function for `dims`, or None (searches are then exact)."""
        return self._walks.get(dims)

    @staticmethod
    def read_begins() -> float:
        """The mark of a catalogue read about to begin, for `set_stats` with what it read."""
        return time.monotonic()

    def set_stats(self, stats: CatalogueStats, began: float | None = None) -> None:
        """Statistics of a catalogue read that began at `began` (`read_begins`).

        Files this process stored since the read began are added again (a file stored before it
        began is in what it read), and a read that began before the one already applied is
        dropped: an upload acknowledged while the read ran is never lost from the statistics.
        Without `began`, the statistics are taken as they are.
        """
        if began is not None:
            if began < self._read_applied:
                return
            self._read_applied = began
            self._stored = [(at, record) for at, record in self._stored if at >= began]
            for _, record in self._stored:
                stats = stats.with_file(record)
        else:
            self._stored.clear()
        self.stats = stats
        self.catalogue_ready.set()

    async def file_stored(self, record: FileRecord) -> None:
        """Account for a file this process just stored (after its commit), until the next read."""
        self._stored.append((time.monotonic(), record))
        self.stats = self.stats.with_file(record)

    def set_copy_state(self, state: str) -> None:
        """The vector copy's state, as the database records it."""
        if state != self.copy_state:
            logger.info("Vector copy state: %s", state)
        self.copy_state = state
        if state == "ready":
            self.copy_ready.set()
        else:
            self.copy_ready.clear()

    def add_walk(self, dims: int, function: str) -> None:
        """An HNSW index for `dims` is valid and walked by `function`."""
        # replaced, not mutated: a knowledge() handed out earlier keeps its own view
        self._walks = {**self._walks, dims: function}

    def set_namespace_walks(self, walks: dict[tuple[str, int], NamespaceWalk]) -> None:
        """The namespaces whose own HNSW index is valid now, (owner, dims) -> walk."""
        self._namespaces = walks
