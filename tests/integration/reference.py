"""Reference SQL for the integration tests: plain statements, no function, no index, no copy.

Written independently of the service's scope predicate (owners only, no uploader rule), so a test
can compare the service's answers with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import asyncpg
import numpy as np

from app.store.chunks import ChunkHit
from app.store.db import StoreInfo

EXACT_TOP_K = """
    SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text AS cmetadata,
           (e.embedding <=> $1) AS distance
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $2
      AND e.custom_id = ANY($3::text[])
      AND (e.cmetadata ->> 'user_id') = ANY($4::text[])
      AND vector_dims(e.embedding) = $5
    ORDER BY distance, e.uuid
    LIMIT $6
"""


async def exact_top_k(
    conn: asyncpg.Connection,
    info: StoreInfo,
    *,
    vector: np.ndarray,
    file_ids: Sequence[str],
    owners: Sequence[str],
    k: int,
) -> list[ChunkHit]:
    """Plain exact top-`k` of the rows `owners` own in `file_ids`."""
    rows = await conn.fetch(
        EXACT_TOP_K, vector, info.collection_id, list(file_ids), list(owners), int(vector.shape[0]), k
    )
    return [
        ChunkHit(
            r["uuid"], r["custom_id"], r["document"] or "", json.loads(r["cmetadata"]), float(r["distance"])
        )
        for r in rows
    ]
