"""Waiting until the database a started service works on is ready to measure (no other backend
busy, the vector copy backfilled, the HNSW index valid), and what it holds then."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from benchmarks import database as db
from benchmarks.options import Options
from benchmarks.progress import Progress
from benchmarks.service import ServiceProcess

QUIET_SQL = """
    SELECT count(*) FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND state = 'active'
      AND backend_type IN ('client backend', 'autovacuum worker', 'parallel worker')
"""
TABLE_STATE_SQL = """
    SELECT relname AS name, n_live_tup AS live_rows FROM pg_stat_user_tables ORDER BY relname
"""


async def wait_quiet(conn: asyncpg.Connection, limit: float = 120.0) -> float:
    """Wait until no other backend is active for about a second; returns the seconds waited."""
    t0 = time.perf_counter()
    calm = 0
    while time.perf_counter() - t0 < limit and calm < 4:
        calm = calm + 1 if await conn.fetchval(QUIET_SQL) == 0 else 0
        await asyncio.sleep(0.3)
    return round(time.perf_counter() - t0, 2)


async def wait_for_copy(conn: asyncpg.Connection, service: Any, limit_s: float) -> dict[str, Any]:
    """Wait until the service's vector copy is backfilled (or is absent or disabled)."""
    t0 = time.perf_counter()
    while True:
        state = await db.vector_copy(conn)
        if state["state"] != "backfilling":
            waited = time.perf_counter() - t0
            await asyncio.sleep(1.0)  # the service reads the state right after its backfill
            state["ready_after_service_start_s"] = round(time.perf_counter() - service.started_at, 1)
            size = state.get("heap_bytes")
            state["summary"] = f"{state['state']} after {waited:.0f} s wait" + (
                f", heap {size / 2**20:,.0f} MiB" if size else ""
            )
            return state
        if time.perf_counter() - t0 > limit_s:
            state["summary"] = f"still backfilling after {limit_s:.0f} s; measured anyway"
            return state
        await asyncio.sleep(0.5)


async def wait_for_index(
    opts: Options, conn: asyncpg.Connection, service: ServiceProcess, progress: Progress
) -> dict[str, Any]:
    """Wait until the service's HNSW index is valid (or clearly not coming); returns what happened."""
    t0 = time.perf_counter()
    last_say = t0
    seen_build = False
    while True:
        indexes = await db.hnsw_indexes(conn)
        valid = [i for i in indexes if i["valid"]]
        since_start = time.perf_counter() - service.started_at
        if valid:
            first = valid[0]
            pre = time.perf_counter() - t0 < 0.01 and not seen_build
            return {
                "present": True,
                "valid": True,
                "name": first["name"],
                "bytes": first["bytes"],
                "definition": first["definition"],
                "pre_existing": pre,
                "ready_after_service_start_s": None if pre else round(since_start, 1),
                "summary": f"{first['name']} ({first['bytes'] / 2**20:,.0f} MiB), "
                + ("already built" if pre else f"valid {since_start:.0f} s after service start"),
            }
        building = await db.build_progress(conn)
        seen_build = seen_build or bool(indexes) or bool(building)
        waited = time.perf_counter() - t0
        if not indexes and not building and waited > opts.index_appear:
            return {
                "present": False,
                "summary": f"none appeared within {opts.index_appear:.0f} s "
                "(the service does not build one yet?)",
            }
        if waited > opts.index_timeout:
            return {
                "present": bool(indexes),
                "valid": False,
                "timed_out": True,
                "summary": f"not valid after {opts.index_timeout:.0f} s; measured anyway",
            }
        if time.perf_counter() - last_say > 10:
            last_say = time.perf_counter()
            detail = (
                "; ".join(
                    f"{b['phase']} tuples {b['tuples_done']}/{b['tuples_total']} "
                    f"blocks {b['blocks_done']}/{b['blocks_total']}"
                    for b in building
                )
                or ", ".join(i["name"] for i in indexes)
                or "waiting"
            )
            progress.say(f"  HNSW index: {detail} ({since_start:.0f} s since service start)")
        await asyncio.sleep(1.0)


async def db_state(conn: asyncpg.Connection) -> dict[str, Any]:
    """Tables (live rows) and indexes on the embedding table, as the service left them."""
    return {
        "tables": {r["name"]: r["live_rows"] for r in await conn.fetch(TABLE_STATE_SQL)},
        "indexes": [dict(r) for r in await conn.fetch(db.INDEX_SIZES)],
    }
