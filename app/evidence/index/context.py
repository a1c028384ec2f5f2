"""What V2 index runs need: the service's resources and the index profile.

ctx = V2Context(settings, pool, info, embedder, blobs)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import asyncpg

from app.clients.blobs import BlobStore
from app.clients.embeddings import Embedder
from app.config import Settings
from app.errors import ConfigError
from app.evidence.index.profile import IndexProfile, build_profile
from app.ingest.checkpointed import CHECKPOINT_BATCH, CheckpointedEmbedding
from app.ingest.contextual import Contextualizer
from app.ingest.limits import ParseLimits
from app.store.db import StoreInfo


@dataclass
class V2Context:
    """What index runs need: the service's resources, and the profile (loaded on first use)."""

    settings: Settings
    pool: asyncpg.Pool
    info: StoreInfo
    embedder: Embedder
    blobs: BlobStore
    profile_override: IndexProfile | None = None
    # told of every embedding dimension a run stores (the HNSW index task of that dimension)
    on_dimension: Callable[[int], None] | None = None
    # CONTEXTUAL_CHUNKING_ENABLED: asks for the sentence situating each chunk (before its embedded text)
    contextualizer: Contextualizer | None = None
    _profile: IndexProfile | None = field(default=None, init=False, repr=False)
    _locks: dict[tuple[int, str], asyncio.Lock] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.settings.contextual_chunking_enabled and self.contextualizer is None:
            # the profile's model identity promises situated chunks: raw ones would break it
            raise ConfigError("CONTEXTUAL_CHUNKING_ENABLED=true, but the V2 index was built without it")

    @property
    def profile(self) -> IndexProfile:
        """The index profile (the local tokenizer is loaded on first use, ~0.1 s)."""
        if self._profile is None:
            self._profile = self.profile_override or build_profile(self.settings)
        return self._profile

    @property
    def checkpoints(self) -> CheckpointedEmbedding:
        """Vectors embedded for a staging that has not stored its document yet, kept batch by batch."""
        batch = self.settings.embedding_batch_size or CHECKPOINT_BATCH
        return CheckpointedEmbedding(
            self.pool, self.info.collection_id, self.profile.embedding_model, batch=batch
        )

    @property
    def limits(self) -> ParseLimits:
        """The parsing limits of uploads, for originals too."""
        return ParseLimits.from_settings(self.settings)

    @property
    def enabled_namespaces(self) -> frozenset[str]:
        """RAG_V2_NAMESPACE_IDS."""
        return frozenset(self.settings.v2_namespace_ids)

    @contextlib.asynccontextmanager
    async def file_lock(self, run_id: int, file_id: str) -> AsyncIterator[None]:
        """One staging of a file into a run at a time in this process."""
        key = (run_id, file_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]
