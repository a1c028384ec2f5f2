"""Self-healing: chunks stored without a vector (the provider was down) get one, in batches.

The sweep runs as the periodic job `reembed-missing`. It reads each store through the small
interfaces of `app/store/missing_vectors.py`: rag_api's table (`MissingVectorStore`: list chunks
without a vector in key order, embed their texts, store the vectors where they are still missing)
and the V2 index (`ReembeddingStore`: it embeds its own chunks, a batch at a time, with its own
model identity and window). A provider that is still down fails the pass (the chunks wait for the
next one); a vector whose dimension or model differs from the rest of its document is not stored
(mixing them would make the document unsearchable in a different way) and is counted as skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from app.clients.embeddings import Embedder
from app.jobs.registry import Progress
from app.store.missing_vectors import MissingCount, ReembeddingStore, SweepStore

SWEEP_SECONDS = 300.0  # between passes
SWEEP_RETRY_SECONDS = 60.0  # after a failed pass (the provider is likely still down)
SWEEP_BATCH = 64  # chunks per embedding request and per write
SWEEP_MAX_CHUNKS = 20_000  # per store and pass: a pass stays bounded; the next one goes on


@dataclass
class StoreSweep:
    """What one pass did in one store."""

    store: str
    missing_before: int = 0
    embedded: int = 0
    stored: int = 0
    skipped: int = 0  # empty text, or a dimension/model that does not match the document


@dataclass
class SweepReport:
    """What one pass did, store by store."""

    stores: list[StoreSweep] = field(default_factory=list)

    @property
    def stored(self) -> int:
        """Vectors stored in every store."""
        return sum(s.stored for s in self.stores)

    def as_dict(self) -> dict[str, object]:
        """The job's result."""
        return {"stored": self.stored, "stores": [asdict(s) for s in self.stores]}


def usable(chunk_dims: int | None, chunk_model: str | None, vector: np.ndarray, model: str) -> bool:
    """True when `vector` (made by `model`) may join a document made of `chunk_dims`/`chunk_model`."""
    if chunk_dims is not None and int(vector.shape[0]) != chunk_dims:
        return False
    return chunk_model is None or chunk_model == model


async def sweep_missing_vectors(
    stores: Sequence[SweepStore],
    embedder: Embedder,
    *,
    model: str,
    progress: Progress | None = None,
    batch: int = SWEEP_BATCH,
    max_chunks: int = SWEEP_MAX_CHUNKS,
) -> SweepReport:
    """Embed and store the missing vectors of every store (at most `max_chunks` per store)."""
    report = SweepReport()
    counts = [await s.count_missing() for s in stores]
    total = sum(min(c.chunks, max_chunks) for c in counts)
    done = 0
    if progress is not None:
        progress(0, total, "looking for chunks without vectors")
    for store, count in zip(stores, counts, strict=True):
        result = StoreSweep(store.name, missing_before=count.chunks)
        report.stores.append(result)
        if isinstance(store, ReembeddingStore):
            done = await _reembed(store, result, count, done, total, batch, max_chunks, progress)
            continue
        after: str | None = None
        seen = 0
        while count.chunks and seen < max_chunks:
            chunks = await store.list_missing(after=after, limit=min(batch, max_chunks - seen))
            if not chunks:
                break
            after = chunks[-1].key
            seen += len(chunks)
            texts = [c for c in chunks if c.text.strip()]
            result.skipped += len(chunks) - len(texts)
            if texts:
                vectors = await embedder.embed_documents([c.text for c in texts])
                result.embedded += len(texts)
                pairs = []
                for chunk, vector in zip(texts, vectors, strict=True):
                    if usable(chunk.dims, chunk.model, vector, model):
                        pairs.append((chunk.key, vector))
                    else:
                        result.skipped += 1
                result.stored += await store.set_vectors(pairs)
            done += len(chunks)
            if progress is not None:
                progress(done, total, f"{store.name}: {result.stored} vectors stored")
    return report


async def _reembed(
    store: ReembeddingStore,
    result: StoreSweep,
    count: MissingCount,
    done: int,
    total: int,
    batch: int,
    max_chunks: int,
    progress: Progress | None,
) -> int:
    """Let a store that embeds its own chunks work through them, a batch at a time."""
    after: str | None = None
    seen = 0
    while count.chunks and seen < max_chunks:
        step = await store.reembed(after=after, limit=min(batch, max_chunks - seen))
        if not step.listed:
            break
        after = step.last
        seen += step.listed
        result.embedded += step.listed
        result.stored += step.stored
        result.skipped += step.skipped
        done += step.listed
        if progress is not None:
            progress(done, total, f"{store.name}: {result.stored} vectors stored")
    return done


async def missing_counts(stores: Sequence[SweepStore]) -> dict[str, MissingCount]:
    """Per store, how many chunks (and documents) have no vector: unsearchable by meaning."""
    return {s.name: await s.count_missing() for s in stores}
