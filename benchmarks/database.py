"""The benchmark's PostgreSQL side: rag_api's tables, the COPY load, facts, index state, plans.

Every statement here is the benchmark's own (the service's SQL lives in `app/store/`); values are
bound as `$n`, and the only composed identifier is the service's role name, which we created.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from benchmarks.corpus import ChunkRow
from benchmarks.recall import VisibleRows

# rag_api v0.9 (langchain_community PGVector, use_jsonb=True) creates exactly these.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS langchain_pg_collection (
           uuid uuid PRIMARY KEY, name varchar, cmetadata json)""",
    """CREATE TABLE IF NOT EXISTS langchain_pg_embedding (
           uuid uuid PRIMARY KEY,
           collection_id uuid REFERENCES langchain_pg_collection (uuid) ON DELETE CASCADE,
           embedding vector, document varchar, cmetadata jsonb, custom_id varchar)""",
)
# langchain's jsonb mode adds this GIN index; built after the load, as it would have grown.
LANGCHAIN_GIN = (
    "CREATE INDEX IF NOT EXISTS ix_cmetadata_gin ON langchain_pg_embedding "
    "USING gin (cmetadata jsonb_path_ops)"
)
INSERT_COLLECTION = "INSERT INTO langchain_pg_collection (uuid, name, cmetadata) VALUES ($1, $2, NULL)"
SELECT_COLLECTION = "SELECT uuid FROM langchain_pg_collection WHERE name = $1 ORDER BY uuid LIMIT 1"
COPY_COLUMNS = ("uuid", "collection_id", "embedding", "document", "cmetadata", "custom_id")
COUNT_ROWS = "SELECT count(*) FROM langchain_pg_embedding WHERE collection_id = $1"

VISIBLE_ROWS = """
    SELECT e.uuid::text AS id, e.embedding
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND e.custom_id = ANY($2::text[])
      AND (e.cmetadata ->> 'user_id') = ANY($3::text[])
"""

ROW_STATS = """
    SELECT count(*) AS rows,
           count(DISTINCT custom_id) AS files,
           avg(octet_length(document))::float8 AS doc_chars,
           avg(pg_column_size(document))::float8 AS doc_stored_bytes,
           avg(pg_column_size(embedding))::float8 AS vector_stored_bytes,
           avg(pg_column_size(cmetadata))::float8 AS metadata_bytes,
           (count(*) FILTER (WHERE pg_column_compression(document) IS NOT NULL))::float8
               / greatest(count(*), 1) AS doc_compressed_share,
           (count(*) FILTER (WHERE pg_column_toast_chunk_id(document) IS NOT NULL))::float8
               / greatest(count(*), 1) AS doc_out_of_line_share,
           (count(*) FILTER (WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL))::float8
               / greatest(count(*), 1) AS vector_out_of_line_share
    FROM langchain_pg_embedding
"""
RELATION_SIZES = """
    SELECT pg_relation_size(c.oid) AS heap_bytes,
           coalesce(pg_relation_size(c.reltoastrelid), 0) AS toast_bytes,
           pg_indexes_size(c.oid) AS index_bytes,
           c.relpages AS heap_pages
    FROM pg_class c WHERE c.oid = 'langchain_pg_embedding'::regclass
"""
INDEX_SIZES = """
    SELECT c.relname AS name, pg_relation_size(c.oid) AS bytes, i.indisvalid AS valid,
           pg_get_indexdef(c.oid) AS definition
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'langchain_pg_embedding'::regclass
    ORDER BY c.relname
"""
HNSW_INDEXES = """
    SELECT c.relname AS name, i.indisvalid AS valid, i.indisready AS ready,
           pg_relation_size(c.oid) AS bytes, pg_get_indexdef(c.oid) AS definition
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'ragoverlay_vectors'::regclass AND c.relname LIKE 'ragoverlay\\_vec\\_hnsw%'
    ORDER BY c.relname
"""
BUILD_PROGRESS = """
    SELECT p.command, p.phase, p.blocks_total, p.blocks_done, p.tuples_total, p.tuples_done
    FROM pg_stat_progress_create_index p
    WHERE p.relid = to_regclass('ragoverlay_vectors')
"""
SERVER_FACTS = """
    SELECT version() AS version, current_setting('server_version') AS server_version,
           (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector
"""
SETTING_NAMES = (
    "shared_buffers",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "max_parallel_workers_per_gather",
    "max_parallel_maintenance_workers",
    "max_connections",
    "jit",
    "random_page_cost",
    "synchronous_commit",
    "default_toast_compression",
)
SHOW_SETTINGS = "SELECT n AS name, current_setting(n, true) AS value FROM unnest($1::text[]) AS n"


async def connect(dsn: str) -> asyncpg.Connection:
    """A connection with the pgvector codec registered."""
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    return conn


async def create_schema(conn: asyncpg.Connection, collection_name: str) -> uuid.UUID:
    """rag_api's tables and its collection row, as an existing deployment would have them."""
    for statement in SCHEMA:
        await conn.execute(statement)
    found = await conn.fetchval(SELECT_COLLECTION, collection_name)
    if found is not None:
        return uuid.UUID(str(found))
    collection_id = uuid.uuid4()  # rag_api: a random uuid4
    await conn.execute(INSERT_COLLECTION, collection_id, collection_name)
    return collection_id


async def collection_id_of(conn: asyncpg.Connection, collection_name: str) -> uuid.UUID | None:
    """The uuid of an existing collection, or None."""
    found = await conn.fetchval(SELECT_COLLECTION, collection_name)
    return uuid.UUID(str(found)) if found is not None else None


async def load_rows(
    dsn: str,
    collection_id: uuid.UUID,
    ranges: Sequence[tuple[int, int]],
    make_rows: Callable[[int, int], list[ChunkRow]],
    *,
    parallel: int,
    report: Callable[[int], None],
) -> int:
    """COPY every range's rows: one thread generates, `parallel` connections copy; returns rows."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[ChunkRow] | None] = asyncio.Queue(maxsize=parallel + 1)
    loaded = 0

    async def produce(executor: ThreadPoolExecutor) -> None:
        for first, last in ranges:
            rows = await loop.run_in_executor(executor, make_rows, first, last)
            await queue.put(rows)
        for _ in range(parallel):
            await queue.put(None)

    async def consume() -> None:
        nonlocal loaded
        conn = await connect(dsn)
        try:
            # durability of a benchmark load does not matter; the rows and their layout do
            await conn.execute("SET synchronous_commit = off")
            while (rows := await queue.get()) is not None:
                records = [
                    (r.uuid, collection_id, r.vector, r.document, r.cmetadata, r.custom_id) for r in rows
                ]
                await conn.copy_records_to_table(
                    "langchain_pg_embedding", records=records, columns=COPY_COLUMNS
                )
                loaded += len(records)
                report(loaded)
        finally:
            await conn.close()

    with ThreadPoolExecutor(1, thread_name_prefix="bench-gen") as executor:
        async with asyncio.TaskGroup() as group:
            group.create_task(produce(executor))
            for _ in range(parallel):
                group.create_task(consume())
    return loaded


async def row_count(conn: asyncpg.Connection, collection_id: uuid.UUID) -> int:
    """Rows of the collection."""
    return int(await conn.fetchval(COUNT_ROWS, collection_id))


async def table_stats(conn: asyncpg.Connection) -> dict[str, Any]:
    """Row sizes, TOAST placement and relation sizes of `langchain_pg_embedding`."""
    out: dict[str, Any] = {}
    try:
        out.update({k: _num(v) for k, v in dict(await conn.fetchrow(ROW_STATS)).items()})
    except asyncpg.UndefinedFunctionError:  # pg_column_toast_chunk_id is PostgreSQL 17+
        out["row_stats"] = "unavailable before PostgreSQL 17"
    out.update({k: _num(v) for k, v in dict(await conn.fetchrow(RELATION_SIZES)).items()})
    out["indexes"] = [dict(r) for r in await conn.fetch(INDEX_SIZES)]
    return out


async def server_facts(conn: asyncpg.Connection) -> dict[str, Any]:
    """PostgreSQL and pgvector versions and the settings that shape the measurements."""
    facts = dict(await conn.fetchrow(SERVER_FACTS))
    facts["settings"] = {r["name"]: r["value"] for r in await conn.fetch(SHOW_SETTINGS, list(SETTING_NAMES))}
    return facts


def _num(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


async def visible_rows(
    conn: asyncpg.Connection, collection_id: uuid.UUID, file_ids: Sequence[str], owners: Sequence[str]
) -> VisibleRows:
    """Ids and vectors of exactly the rows a caller with `owners` may see among `file_ids`."""
    records = await conn.fetch(VISIBLE_ROWS, collection_id, list(file_ids), list(owners))
    if not records:
        return VisibleRows.build([], np.zeros((0, 1)))
    ids = [r["id"] for r in records]
    vectors = np.stack([_as_array(r["embedding"]) for r in records])
    return VisibleRows.build(ids, vectors)


def _as_array(value: Any) -> np.ndarray:
    return value.to_numpy() if hasattr(value, "to_numpy") else np.asarray(value, dtype=np.float32)


async def hnsw_indexes(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    """The service's HNSW indexes (name prefix `ragoverlay_vec_hnsw`) and their validity."""
    return [dict(r) for r in await conn.fetch(HNSW_INDEXES)]


async def vector_copy(conn: asyncpg.Connection) -> dict[str, Any]:
    """State and size of the service's compact vector copy (`ragoverlay_vectors`), if it has one."""
    exists = await conn.fetchval("SELECT to_regclass('ragoverlay_vector_copy') IS NOT NULL")
    if not exists:
        return {"state": "missing"}
    row = await conn.fetchrow(
        "SELECT (SELECT state FROM ragoverlay_vector_copy WHERE singleton) AS state, "
        "pg_relation_size('ragoverlay_vectors') AS heap_bytes, "
        "pg_indexes_size('ragoverlay_vectors') AS index_bytes"
    )
    return {
        "state": row["state"] or "missing",
        "heap_bytes": row["heap_bytes"],
        "index_bytes": row["index_bytes"],
    }


async def build_progress(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    """Index builds in progress on the table (pg_stat_progress_create_index)."""
    return [dict(r) for r in await conn.fetch(BUILD_PROGRESS)]


# the service's namespace indexes (app/store/namespace_index.py), and the namespaces large enough for one
NAMESPACE_INDEXES = """
    SELECT count(*) FILTER (WHERE i.indisvalid) AS valid, count(*) AS present,
           coalesce(sum(pg_relation_size(c.oid)) FILTER (WHERE i.indisvalid), 0) AS bytes
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'ragoverlay_vectors'::regclass AND c.relname LIKE 'ragoverlay\\_vec\\_ns\\_%'
"""
LARGE_NAMESPACES = """
    SELECT count(*) FROM (SELECT 1 FROM ragoverlay_files
                          WHERE collection_id = $1 AND embedding_dim IS NOT NULL AND owner <> ''
                          GROUP BY owner, embedding_dim HAVING sum(chunk_count) >= $2) AS n
"""


async def namespace_indexes(
    conn: asyncpg.Connection, collection_id: uuid.UUID, min_rows: int
) -> dict[str, int]:
    """Valid and present namespace indexes, their bytes, and the namespaces of at least `min_rows`."""
    row = await conn.fetchrow(NAMESPACE_INDEXES)
    large = await conn.fetchval(LARGE_NAMESPACES, collection_id, min_rows)
    return {
        "valid": int(row["valid"]),
        "present": int(row["present"]),
        "bytes": int(row["bytes"]),
        "large": int(large),
    }


ALL_ROWS = "SELECT e.uuid::text AS id, e.embedding FROM langchain_pg_embedding e WHERE e.collection_id = $1"
_HNSW_DEF = re.compile(
    r" ON (?P<table>[\w.]+) USING hnsw \((?P<expr>.+) (?P<type>vector|halfvec)_cosine_ops\)"
    r"(?: WITH \([^)]*\))?(?: WHERE (?P<pred>.+))?$"
)


async def raw_hnsw_recall(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    index_definition: str,
    queries: np.ndarray,
    k: int,
    ef_values: Sequence[int] = (40, 100, 200),
) -> dict[str, Any]:
    """Unfiltered recall@k of pgvector's HNSW index itself (no service): how hard the data is for it.

    The ORDER BY expression and predicate are read from the index definition (our own catalog, not
    request data), so the planner can use the index exactly as the service does.
    """
    match = _HNSW_DEF.search(index_definition)
    dims = re.search(r"\((\d+)\)", match.group("expr")) if match else None
    if match is None or dims is None:
        return {"error": "index definition not understood"}
    expr, vtype, pred = match.group("expr"), match.group("type"), match.group("pred") or "true"
    # the index's own table (the service's vector copy, or rag_api's table in older layouts); both
    # have uuid, collection_id and embedding columns
    sql = (
        f"SELECT uuid::text AS id FROM {match.group('table')} WHERE {pred} AND collection_id = $2 "
        f"ORDER BY {expr} <=> $1::vector::{vtype}({dims.group(1)}) "
        f"LIMIT {int(k)}"
    )
    records = await conn.fetch(ALL_ROWS, collection_id)
    rows = VisibleRows.build(
        [r["id"] for r in records], np.stack([_as_array(r["embedding"]) for r in records])
    )
    del records
    truth = []
    for q in queries:
        d = rows.distances(q)
        kth = float(np.partition(d, k - 1)[k - 1])
        truth.append({rows.ids[i] for i in np.flatnonzero(d <= kth + 1e-5)})
    plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, queries[0], collection_id))
    out: dict[str, Any] = {"queries": len(queries), "uses_index": "Index Scan" in plan, "by_ef_search": {}}
    for ef in ef_values:
        recalls = []
        for q, expected in zip(queries, truth, strict=True):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                got = {r["id"] for r in await conn.fetch(sql, q, collection_id)}
            recalls.append(len(got & expected) / k)
        out["by_ef_search"][str(ef)] = {
            "mean": round(float(np.mean(recalls)), 4),
            "min": round(float(np.min(recalls)), 2),
            "below_0.5": int(sum(r < 0.5 for r in recalls)),
        }
    return out


async def checkpoint(superuser_dsn: str) -> None:
    """Flush dirty buffers now, so a spread checkpoint does not write during the measurements."""
    conn = await asyncpg.connect(superuser_dsn)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def prewarm(superuser_dsn: str) -> dict[str, Any]:
    """Load the service's vector copy, its indexes and the HNSW indexes into shared buffers.

    A server that has been answering for a while holds them there; a `--reuse` run starts from a
    restarted PostgreSQL whose buffers are empty, and a run that just built the index holds it. Either
    way the measurements then start from the same warm state. Returns pages loaded per relation.
    """
    conn = await asyncpg.connect(superuser_dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        rows = await conn.fetch(
            """
            SELECT c.relname, pg_prewarm(c.oid) AS pages
            FROM pg_class c
            WHERE c.relname IN ('ragoverlay_vectors', 'ragoverlay_vectors_file_idx',
                                'ragoverlay_vectors_pkey')
               OR c.relname LIKE 'ragoverlay\\_vec\\_hnsw%'
            ORDER BY c.relname
            """
        )
        return {r["relname"]: int(r["pages"]) for r in rows}
    finally:
        await conn.close()


class PlanCapture:
    """Turns auto_explain on for the service's role (new sessions only) and reads the plans it logs."""

    _SETTINGS = (
        ("session_preload_libraries", "auto_explain"),
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_timing", "on"),
        ("auto_explain.log_format", "json"),
        # the service searches through a plpgsql function: its inner statements are the interesting ones
        ("auto_explain.log_nested_statements", "on"),
    )

    def __init__(self, superuser_dsn: str, role: str, log_file: Path) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", role):
            raise ValueError("unexpected role name")
        self.superuser_dsn = superuser_dsn
        self.role = role
        self.log_file = log_file

    async def enable(self) -> None:
        """Sessions of the role opened from now on log every plan with timings and buffers."""
        conn = await asyncpg.connect(self.superuser_dsn)
        try:
            for name, value in self._SETTINGS:
                await conn.execute(f"ALTER ROLE {self.role} SET {name} = '{value}'")
        finally:
            await conn.close()

    async def disable(self) -> None:
        """Remove the role settings again."""
        conn = await asyncpg.connect(self.superuser_dsn)
        try:
            for name, _ in self._SETTINGS:
                await conn.execute(f"ALTER ROLE {self.role} RESET {name}")
        finally:
            await conn.close()

    def mark(self) -> int:
        """The log's current size: plans after this offset belong to what runs next."""
        try:
            return self.log_file.stat().st_size
        except OSError:
            return 0

    def plans_since(self, offset: int) -> list[dict[str, Any]]:
        """Summaries of the plans logged after `offset`."""
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return []
        decoder = json.JSONDecoder()
        out = []
        for match in re.finditer(r"duration: ([0-9.]+) ms\s+plan:\s*", text):
            start = text.find("{", match.end())
            if start < 0:
                continue
            with contextlib.suppress(ValueError):
                doc, _ = decoder.raw_decode(text, start)
                out.append(summarize_plan(doc, float(match.group(1))))
        return out


def summarize_plan(doc: dict[str, Any], duration_ms: float) -> dict[str, Any]:
    """Statement, duration, node list (with index names) and buffer counts of one logged plan."""
    plan = doc.get("Plan", {})
    nodes: list[str] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        label = node.get("Node Type", "?")
        if node.get("Index Name"):
            label += f" using {node['Index Name']}"
        elif node.get("Relation Name"):
            label += f" on {node['Relation Name']}"
        label += f" (rows={node.get('Actual Rows')}, loops={node.get('Actual Loops')})"
        # per-row predicates are where time hides (e.g. `= ANY($n)` evaluated row by row)
        for key in ("Index Cond", "Recheck Cond", "Filter", "Order By"):
            if node.get(key):
                label += f" [{key}: {' '.join(str(node[key]).split())[:160]}]"
        if node.get("Rows Removed by Filter"):
            label += f" [removed by filter: {node['Rows Removed by Filter']}]"
        nodes.append("  " * depth + label)
        for child in node.get("Plans", []) or []:
            walk(child, depth + 1)

    walk(plan, 0)
    query = " ".join(str(doc.get("Query Text", "")).split())
    return {
        "wrapper": plan.get("Node Type") in ("Function Scan", "Result") and not plan.get("Plans"),
        "statement": query[:2000],
        "duration_ms": duration_ms,
        "nodes": nodes,
        "shared_hit_blocks": plan.get("Shared Hit Blocks"),
        "shared_read_blocks": plan.get("Shared Read Blocks"),
        "rows": plan.get("Actual Rows"),
    }
