"""Files of a namespace that are stored but not (yet) in its answering V2 run: /query_v2's gaps.

    missing_files(conn, scope, namespace, run_id) -> [file_id]   sorted, at most `limit`

A file uploaded through `/embed` is stored (its `ragoverlay_files` row) before a staging job has put
it into the namespace's runs, when the upload could not stage it itself; until then, or when its
staging failed, `/query_v2` cannot find it and says so (`degraded`). A file whose run document was
made from a version since replaced counts as missing too: that document is never read.
Read through the scope predicate like every read: only files the caller
may read and listed in its allow-list are counted (a scope without an allow-list counts none:
`/query_v2` always has one).
"""

from __future__ import annotations

import asyncpg

from app.store.scope import SCOPE_SQL, Scope

# the allow-list's files by the catalogue's primary key (collection_id, file_id, owner), each checked
# for a staged entry by the run's primary key (run_id, file_id): the cost follows the list. The scope
# is built once (MATERIALIZED: inlined, its function would run again for every row)
MISSING_FILES = f"""
    WITH s AS MATERIALIZED (SELECT {SCOPE_SQL} AS scope)
    SELECT f.file_id
    FROM s
    CROSS JOIN unnest($3::text[]) AS listed(file_id)
    JOIN ragoverlay_files f ON f.collection_id = $1 AND f.file_id = listed.file_id AND f.owner = $7
    WHERE ragoverlay_in_scope(p_scope => s.scope, p_collection => f.collection_id, p_file_id => f.file_id,
                              p_owner => f.owner)
      AND NOT EXISTS (
          SELECT 1 FROM ragoverlay_v2_run_files rf
          JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
          WHERE rf.run_id = $8 AND rf.file_id = f.file_id AND rf.state = 'staged'
            -- a document of a replaced version is no document of the file (ragoverlay_v2_current)
            AND (f.sha256 IS NULL OR f.sha256 IS NOT DISTINCT FROM d.version_sha256))
    ORDER BY f.file_id
    LIMIT $9
"""


async def missing_files(
    conn: asyncpg.Connection,
    scope: Scope,
    namespace: str,
    run_id: int,
    *,
    limit: int = 1000,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[str]:
    """The scope's stored files of `namespace` that run `run_id` holds no staged document of."""
    rows = await conn.fetch(
        MISSING_FILES, *scope.for_reading().sql_args(), namespace, run_id, limit, timeout=timeout
    )
    return [str(r["file_id"]) for r in rows]
