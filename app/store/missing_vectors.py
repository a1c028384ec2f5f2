"""Chunks stored without a vector, for the self-healing sweep (`app/jobs/sweep.py`).

Two kinds of store speak to the sweep:
- `MissingVectorStore`: the sweep lists chunks without a vector, embeds their texts and stores the
  vectors by key. `RagApiMissingVectors` is one: rows of rag_api's `langchain_pg_embedding` with a
  NULL `embedding` (rag_api never writes them; another writer of the table might). The vector copy
  follows by its trigger.
- `ReembeddingStore`: a store that embeds its own chunks, in batches the sweep asks for. The V2
  index is one (`app/evidence/jobs.py`: its chunks are embedded as its index runs embed them, and its
  documents keep their count of chunks without a vector).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import asyncpg
import numpy as np

from app.store.db import StoreInfo


@dataclass(frozen=True)
class MissingCount:
    """Chunks without a vector, and the documents they belong to."""

    documents: int
    chunks: int


@dataclass(frozen=True)
class MissingChunk:
    """A chunk to embed: its key in its store, its text, and what its document's vectors are made of.

    `dims` and `model` describe the document's other chunks (None: unknown, or none has a vector);
    a vector that would not match them is not stored.
    """

    key: str
    text: str
    dims: int | None = None
    model: str | None = None


class MissingVectorStore(Protocol):
    """Where the sweep finds chunks without vectors and puts their vectors."""

    name: str

    async def count_missing(self) -> MissingCount:
        """How many chunks (and documents) have no vector."""
        ...

    async def list_missing(self, *, after: str | None, limit: int) -> list[MissingChunk]:
        """Up to `limit` chunks without a vector, in key order, after key `after`."""
        ...

    async def set_vectors(self, vectors: Sequence[tuple[str, np.ndarray]]) -> int:
        """Store vectors by chunk key (only where the vector is still missing); returns how many."""
        ...


@dataclass(frozen=True)
class ReembedBatch:
    """What a `ReembeddingStore` did with one batch: chunks listed, vectors stored, chunks skipped."""

    listed: int
    stored: int
    skipped: int  # a vector that would not match its document's others
    last: str | None  # the key of the last chunk listed: the next batch's `after`


@runtime_checkable
class ReembeddingStore(Protocol):
    """A store that embeds its own chunks without a vector, a batch at a time."""

    name: str

    async def count_missing(self) -> MissingCount:
        """How many chunks (and documents) have no vector."""
        ...

    async def reembed(self, *, after: str | None, limit: int) -> ReembedBatch:
        """Embed and store up to `limit` chunks without a vector, in key order after key `after`."""
        ...


SweepStore = MissingVectorStore | ReembeddingStore


def vector_text(vector: np.ndarray) -> str:
    """pgvector's text form of a vector, exact for float32 (asyncpg sends no arrays of vectors)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32)) + "]"


class RagApiMissingVectors:
    """Rows of rag_api's table in the served collection whose `embedding` is NULL."""

    name = "v1"

    def __init__(self, pool: asyncpg.Pool, info: StoreInfo) -> None:
        self.pool = pool
        self.info = info

    async def count_missing(self) -> MissingCount:
        """Chunks (and files) of the collection without a vector."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT count(DISTINCT custom_id) AS documents, count(*) AS chunks "
                "FROM langchain_pg_embedding WHERE collection_id = $1 AND embedding IS NULL",
                self.info.collection_id,
            )
        assert row is not None
        return MissingCount(int(row["documents"]), int(row["chunks"]))

    async def list_missing(self, *, after: str | None, limit: int) -> list[MissingChunk]:
        """Rows without a vector, with the dimension and model of their file's other rows."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """
                SELECT e.uuid::text AS key, coalesce(e.document, '') AS text,
                       (SELECT vector_dims(o.embedding) FROM langchain_pg_embedding o
                        WHERE o.collection_id = e.collection_id AND o.custom_id = e.custom_id
                          AND o.embedding IS NOT NULL
                        LIMIT 1) AS dims,
                       (SELECT f.embedding_model FROM ragoverlay_files f
                        WHERE f.collection_id = e.collection_id AND f.file_id = e.custom_id
                          AND f.owner = (e.cmetadata ->> 'user_id')) AS model
                FROM langchain_pg_embedding e
                WHERE e.collection_id = $1 AND e.embedding IS NULL AND ($2::uuid IS NULL OR e.uuid > $2::uuid)
                ORDER BY e.uuid
                LIMIT $3
                """,
                self.info.collection_id,
                after,
                limit,
            )
        return [MissingChunk(r["key"], r["text"], r["dims"], r["model"]) for r in rows]

    async def set_vectors(self, vectors: Sequence[tuple[str, np.ndarray]]) -> int:
        """Fill the NULL embeddings (the vector copy's trigger copies them)."""
        if not vectors:
            return 0
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                """
                UPDATE langchain_pg_embedding e SET embedding = v.embedding::vector
                FROM unnest($2::uuid[], $3::text[]) AS v(uuid, embedding)
                WHERE e.uuid = v.uuid AND e.collection_id = $1 AND e.embedding IS NULL
                RETURNING e.uuid
                """,
                self.info.collection_id,
                [key for key, _ in vectors],
                [vector_text(vec) for _, vec in vectors],
            )
        return len(rows)
