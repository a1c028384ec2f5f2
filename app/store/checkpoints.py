"""An upload's embedding checkpoints: vectors embedded but not yet committed (migration 0017).

Keyed by the collection, the model identity and the sha256 of the exact text embedded, so the next
attempt of the same upload (a job retried after its deadline, a restart, a kill -9) finds what the
last one had embedded, whichever replica runs it. Each batch is saved in its own short statement as
soon as it is embedded; the commit that stores the chunks deletes the checkpoints it used.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import asyncpg
import numpy as np

from app.store.db import rows_affected, vector_array

# how long an upload that never committed may leave its vectors behind
MAX_AGE_DAYS = 7

LOAD = """
    SELECT digest, embedding FROM ragoverlay_embedding_checkpoints
    WHERE collection_id = $1 AND model = $2 AND digest = ANY($3::text[])
"""

SAVE = """
    INSERT INTO ragoverlay_embedding_checkpoints (collection_id, model, digest, embedding)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (collection_id, model, digest) DO NOTHING
"""

CONSUME = """
    DELETE FROM ragoverlay_embedding_checkpoints
    WHERE collection_id = $1 AND model = $2 AND digest = ANY($3::text[])
"""

PRUNE = """
    DELETE FROM ragoverlay_embedding_checkpoints
    WHERE created_at < now() - make_interval(days => $1)
"""


async def load(
    conn: asyncpg.Connection, collection_id: uuid.UUID, model: str, digests: Sequence[str]
) -> dict[str, np.ndarray]:
    """The checkpointed vectors of these digests (those found)."""
    if not digests:
        return {}
    rows = await conn.fetch(LOAD, collection_id, model, list(digests))
    return {str(r["digest"]): vector_array(r["embedding"]) for r in rows}


async def save(
    conn: asyncpg.Connection, collection_id: uuid.UUID, model: str, vectors: Mapping[str, np.ndarray]
) -> None:
    """Keep freshly embedded vectors (a digest already kept stays as it is)."""
    if vectors:
        await conn.executemany(SAVE, [(collection_id, model, d, v) for d, v in vectors.items()])


async def consume(
    conn: asyncpg.Connection, collection_id: uuid.UUID, model: str, digests: Sequence[str]
) -> int:
    """Delete the checkpoints of these digests (in the transaction that stores their chunks)."""
    if not digests:
        return 0
    return rows_affected(await conn.execute(CONSUME, collection_id, model, list(digests)))


async def prune(conn: asyncpg.Connection, max_age_days: int = MAX_AGE_DAYS) -> int:
    """Delete checkpoints older than `max_age_days` (uploads that never committed)."""
    return rows_affected(await conn.execute(PRUNE, max_age_days))
