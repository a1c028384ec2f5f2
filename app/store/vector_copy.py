"""The compact vector copy (`ragoverlay_vectors`, migration 0006): its state, backfill and drift check.

Triggers (`sql/40_vector_copy.sql`) mirror every write to rag_api's table from the moment they
exist; rows that were there before are copied here, file by file in file-id order (so each file's
rows sit together), in batches that each commit on their own: writers never wait for the whole
backfill.
"""

from __future__ import annotations

import logging
import uuid

import asyncpg

from app.store.db import rows_affected, try_advisory_lock

logger = logging.getLogger(__name__)

_BACKFILL_LOCK_KEY = 0x72617663  # "ravc": one replica backfills at a time

STATE = "SELECT state FROM ragoverlay_vector_copy WHERE singleton"

COLLECTIONS = "SELECT uuid FROM langchain_pg_collection ORDER BY uuid"

# The copy's row for a row `e` of langchain_pg_embedding (the triggers of sql/40_vector_copy.sql
# write the same). Rows of navigation pages are never copied (`_COPIED`), so searches skip them.
_INSERT_COPY = """
    INSERT INTO ragoverlay_vectors (uuid, collection_id, file_id, owner, dims, embedding)
    SELECT e.uuid, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id', vector_dims(e.embedding),
           l2_normalize(e.embedding)::halfvec
""".strip()

# Whole files per batch: the upper bound is the file id of the `$3`-th row after the cursor, and
# every row up to and including that file is copied. ON CONFLICT DO NOTHING: a row the triggers
# already copied is newer than ours.
_COPIED = "e.custom_id IS NOT NULL AND e.embedding IS NOT NULL AND (e.cmetadata ->> 'navigation') IS NULL"

BACKFILL_BATCH = f"""
    WITH bound AS (
        SELECT max(s.custom_id) AS hi
        FROM (SELECT e.custom_id FROM langchain_pg_embedding e
              WHERE e.collection_id = $1 AND e.custom_id > $2
              ORDER BY e.custom_id LIMIT $3) s
    ), copied AS (
        {_INSERT_COPY}
        FROM langchain_pg_embedding e, bound b
        WHERE e.collection_id = $1 AND e.custom_id > $2 AND e.custom_id <= b.hi AND {_COPIED}
        ORDER BY e.custom_id
        ON CONFLICT (uuid) DO NOTHING
        RETURNING uuid
    )
    SELECT (SELECT hi FROM bound) AS hi, coalesce(array_agg(uuid), '{{}}') AS ids FROM copied
"""

# A row deleted after the batch read it but before the batch committed would otherwise linger
# (its delete trigger found nothing to remove). Searches re-read every candidate's own row, so a
# leftover could never be returned; this keeps the copy exact anyway.
DROP_ORPHANS = """
    DELETE FROM ragoverlay_vectors v
    WHERE v.uuid = ANY($1::uuid[])
      AND NOT EXISTS (SELECT 1 FROM langchain_pg_embedding e WHERE e.uuid = v.uuid)
"""

# Drift check: both counts in one statement, so one snapshot (the triggers write in the writer's
# own transaction, so a consistent copy always matches exactly).
COUNTS = f"""
    SELECT (SELECT count(*) FROM langchain_pg_embedding e WHERE e.collection_id = $1 AND {_COPIED})
               AS source_rows,
           (SELECT count(*) FROM ragoverlay_vectors v WHERE v.collection_id = $1) AS copied_rows
"""

REPAIR_ORPHANS = f"""
    DELETE FROM ragoverlay_vectors v
    WHERE v.collection_id = $1
      AND NOT EXISTS (SELECT 1 FROM langchain_pg_embedding e
                      WHERE e.uuid = v.uuid AND e.collection_id = v.collection_id AND {_COPIED})
"""

REPAIR_MISSING = f"""
    {_INSERT_COPY}
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND {_COPIED}
      AND NOT EXISTS (SELECT 1 FROM ragoverlay_vectors v WHERE v.uuid = e.uuid)
    ORDER BY e.custom_id
    ON CONFLICT (uuid) DO NOTHING
"""

MARK_READY = """
    UPDATE ragoverlay_vector_copy SET state = 'ready', detail = NULL, updated_at = now()
    WHERE singleton AND state = 'backfilling'
"""


async def copy_state(conn: asyncpg.Connection) -> str:
    """'backfilling', 'ready', 'disabled', or 'missing' (the migration has not run)."""
    try:
        state = await conn.fetchval(STATE)
    except asyncpg.UndefinedTableError:
        return "missing"
    return str(state) if state else "missing"


async def backfill(conn: asyncpg.Connection, *, batch_rows: int = 5000) -> int | None:
    """Copy rows written before the triggers existed; mark the copy ready. Returns rows copied.

    None when another session holds the backfill lock or there is nothing to do. `conn` must not
    be inside a transaction: each batch commits on its own.
    """
    if await copy_state(conn) != "backfilling":
        return None
    async with try_advisory_lock(conn, _BACKFILL_LOCK_KEY) as got:
        if not got or await copy_state(conn) != "backfilling":
            return None
        total = 0
        collections: list[uuid.UUID] = [r["uuid"] for r in await conn.fetch(COLLECTIONS)]
        for collection_id in collections:
            cursor = ""
            while True:
                row = await conn.fetchrow(BACKFILL_BATCH, collection_id, cursor, batch_rows)
                if row is None or row["hi"] is None:
                    break
                ids = list(row["ids"])
                if ids:
                    await conn.execute(DROP_ORPHANS, ids)
                total += len(ids)
                cursor = row["hi"]
        await conn.execute(MARK_READY)
        # planner statistics (and the path choice's table size) for the freshly filled copy
        await conn.execute("ANALYZE ragoverlay_vectors")
        return total


async def reconcile(conn: asyncpg.Connection) -> tuple[int, int] | None:
    """Compare the copy with rag_api's table per collection; repair drift. Returns (added, removed).

    Drift needs someone to bypass the triggers (`DISABLE TRIGGER`, `session_replication_role =
    replica` during a bulk load, a partial restore). Counts catch rows added or removed behind
    the copy's back; an owner or vector edited with triggers off keeps the same count and is not
    seen. Searches re-check every candidate's own row, so drift can cost results, never leak them.
    None when the copy is not ready or another session holds the lock.
    """
    if await copy_state(conn) != "ready":
        return None
    async with try_advisory_lock(conn, _BACKFILL_LOCK_KEY) as got:
        if not got:
            return None
        added = removed = 0
        for record in await conn.fetch(COLLECTIONS):
            collection_id = record["uuid"]
            counts = await conn.fetchrow(COUNTS, collection_id)
            if counts["source_rows"] == counts["copied_rows"]:
                continue
            logger.warning(
                "Vector copy drift in collection %s: %d rows, %d copied; repairing",
                collection_id,
                counts["source_rows"],
                counts["copied_rows"],
            )
            removed += rows_affected(await conn.execute(REPAIR_ORPHANS, collection_id))
            added += rows_affected(await conn.execute(REPAIR_MISSING, collection_id))
        return added, removed
