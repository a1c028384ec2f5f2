"""Embedding an upload's texts with checkpoints: each batch kept as soon as the embedder returns it.

    embedding = CheckpointedEmbedding(pool, collection_id, model_id)
    vectors, resumed = await embedding.embed(embedder, texts)     # (len(texts), dims) float32

An upload that stops before its commit (a job's deadline, a crash, a restart) loses none of the
vectors it had embedded: the next attempt finds them (`app/store/checkpoints.py`, migration 0017)
and embeds only the rest. Batches are small (CHECKPOINT_BATCH texts), so what a stop can lose is
one batch, and the progress a job reports moves with each of them. The caller deletes the
checkpoints it used in the transaction that stores its chunks (`consume`).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from app.clients.embeddings import Embedder, batch_progress, reporting_batches
from app.errors import EmbeddingProviderError
from app.store import checkpoints

logger = logging.getLogger(__name__)

# texts per checkpointed batch: at most this much work is lost when an upload stops (~6 s of the
# offline model on one core), and one INSERT of this many vectors is a few milliseconds
CHECKPOINT_BATCH = 64


def text_key(text: str) -> str:
    """The checkpoint key of an embedded text: sha256 of its UTF-8 (surrogates kept)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CheckpointedEmbedding:
    """Embeds through checkpoints of one collection and model identity."""

    pool: asyncpg.Pool
    collection_id: uuid.UUID
    model: str
    batch: int = CHECKPOINT_BATCH

    async def embed(self, embedder: Embedder, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """One unit vector per text, and how many came from checkpoints (not embedded again).

        The caller's `reporting_batches` callback is told every text done, resumed ones first, as
        parts of one call of `len(texts)`.
        """
        if not texts:
            return np.zeros((0, embedder.dimensions or 0), dtype=np.float32), 0
        keys = [text_key(t) for t in texts]
        async with self.pool.acquire() as conn:
            kept = await checkpoints.load(conn, self.collection_id, self.model, keys)
        if embedder.dimensions:
            # written before the model changed its dimension under the same name: embed those again
            kept = {k: v for k, v in kept.items() if v.shape[0] == embedder.dimensions}
        outer = batch_progress()
        total = len(texts)
        todo = [i for i, key in enumerate(keys) if key not in kept]
        resumed = total - len(todo)
        if resumed:
            logger.info(
                "Resuming an embedding: %d of %d texts were embedded by an earlier attempt", resumed, total
            )
            if outer is not None:
                outer(resumed, total)
        rows: dict[int, np.ndarray] = {i: kept[keys[i]] for i in range(total) if keys[i] in kept}

        def report(count: int, of: int) -> None:
            if outer is not None:
                outer(count, total)

        for start in range(0, len(todo), self.batch):
            part = todo[start : start + self.batch]
            with reporting_batches(report):
                vectors = np.asarray(
                    await embedder.embed_documents([texts[i] for i in part]), dtype=np.float32
                )
            if vectors.shape[0] != len(part):
                raise EmbeddingProviderError(
                    "The embedding provider returned the wrong number of vectors", retryable=False
                )
            fresh = {keys[i]: vectors[row] for row, i in enumerate(part)}
            async with self.pool.acquire() as conn:
                await checkpoints.save(conn, self.collection_id, self.model, fresh)
            rows.update((i, vectors[row]) for row, i in enumerate(part))
        dims = {v.shape[0] for v in rows.values()}
        if len(dims) > 1:
            # a model that changed its dimension under the same name since the checkpoints were
            # written: never mix, embed the checkpointed texts again
            raise EmbeddingProviderError(
                "Checkpointed vectors have another dimension than the model's; try the upload again",
                retryable=True,
            )
        out = np.empty((total, dims.pop()), dtype=np.float32)
        for i, vector in rows.items():
            out[i] = vector
        return out, resumed

    async def consume(self, conn: asyncpg.Connection, texts: Sequence[str]) -> None:
        """Delete the checkpoints of `texts` (in the transaction that stores what they were for)."""
        await checkpoints.consume(conn, self.collection_id, self.model, [text_key(t) for t in texts])
