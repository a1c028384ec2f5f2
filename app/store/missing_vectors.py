"""Chunks stored without a vector, for the self-healing sweep (`app/jobs/sweep.py`).

Two stores speak the sweep's interface (`MissingVectorStore`):
- `RagApiMissingVectors`: rows of rag_api's `langchain_pg_embedding` with a NULL `embedding` (rag_api
  never writes them; another writer of the table might). The vector copy follows by its trigger.
- `ChunkTableMissingVectors`: any table of chunks with a key, a document, the text to embed and a
  nullable vector column, such as the V2 index's chunk table (chunks stored while the embedding
  provider was down), named when it is plugged in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import numpy as np

from app.store.db import StoreInfo, rows_affected


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


_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return f'"{name}"'


class ChunkTableMissingVectors:
    """A table of chunks whose vector column may be NULL (the V2 index's shape, or any alike).

    The names are code, never input: each must be a plain lower-case identifier. `where_column` =
    `where_value` restricts the store to one collection's rows when the table holds several.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        name: str,
        table: str,
        key: str,
        document: str,
        text: str,
        vector: str,
        model: str | None = None,
        where_column: str | None = None,
        where_value: str | None = None,
    ) -> None:
        self.pool = pool
        self.name = name
        self._table, self._key, self._doc = _ident(table), _ident(key), _ident(document)
        self._text, self._vec = _ident(text), _ident(vector)
        self._model = f"o.{_ident(model)}" if model else "NULL::text"
        self._where = f"{_ident(where_column)} = $1::text" if where_column else "$1::text IS NULL"
        self._where_value = where_value
        self._table_name = table
        self._key_name = key
        self._key_type: str | None = None

    async def _type_of_key(self, conn: asyncpg.Connection) -> str:
        if self._key_type is None:
            found = await conn.fetchval(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped",
                self._table_name,
                self._key_name,
            )
            if found is None:
                raise RuntimeError(f"{self._table_name}.{self._key_name} does not exist")
            self._key_type = str(found)
        return self._key_type

    async def count_missing(self) -> MissingCount:
        """Chunks (and documents) of the table without a vector."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT count(DISTINCT {self._doc}) AS documents, count(*) AS chunks "
                f"FROM {self._table} WHERE {self._where} AND {self._vec} IS NULL",
                self._where_value,
            )
        assert row is not None
        return MissingCount(int(row["documents"]), int(row["chunks"]))

    async def list_missing(self, *, after: str | None, limit: int) -> list[MissingChunk]:
        """Chunks without a vector, in key order after `after`, with their document's dimension."""
        async with self.pool.acquire() as conn:
            key_type = await self._type_of_key(conn)
            rows = await conn.fetch(
                f"""
                SELECT c.{self._key}::text AS key, coalesce(c.{self._text}, '') AS text,
                       (SELECT vector_dims(o.{self._vec}) FROM {self._table} o
                        WHERE o.{self._doc} = c.{self._doc} AND o.{self._vec} IS NOT NULL LIMIT 1) AS dims,
                       (SELECT {self._model} FROM {self._table} o
                        WHERE o.{self._doc} = c.{self._doc} AND o.{self._vec} IS NOT NULL LIMIT 1) AS model
                FROM {self._table} c
                WHERE {self._where} AND c.{self._vec} IS NULL
                  AND ($2::text IS NULL OR c.{self._key} > $2::text::{key_type})
                ORDER BY c.{self._key}
                LIMIT $3
                """,
                self._where_value,
                after,
                limit,
            )
        return [MissingChunk(r["key"], r["text"], r["dims"], r["model"]) for r in rows]

    async def set_vectors(self, vectors: Sequence[tuple[str, np.ndarray]]) -> int:
        """Fill the missing vectors by key."""
        if not vectors:
            return 0
        async with self.pool.acquire() as conn, conn.transaction():
            key_type = await self._type_of_key(conn)
            status = await conn.execute(
                f"""
                UPDATE {self._table} c SET {self._vec} = v.ragoverlay_vec::vector
                FROM unnest($2::text[], $3::text[]) AS v(ragoverlay_key, ragoverlay_vec)
                WHERE c.{self._key} = v.ragoverlay_key::{key_type} AND {self._where} AND c.{self._vec} IS NULL
                """,
                self._where_value,
                [key for key, _ in vectors],
                [vector_text(vec) for _, vec in vectors],
            )
        return rows_affected(status)
