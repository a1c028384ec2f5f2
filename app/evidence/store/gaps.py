"""Files of a namespace that are stored but not (yet) in its answering V2 run: /query_v2's gaps.

    missing_files(conn, scope, namespace, run_id) -> [MissingFile]   by file id, at most `limit`

A file uploaded through `/embed` is stored (its `ragoverlay_files` row) before a staging job has put
it into the namespace's runs, when the upload could not stage it itself; until then, or when its
staging failed, `/query_v2` cannot find it and says so (`degraded`). A file whose run document was
made from a version since replaced counts as missing too: that document is never read.
Read through the scope predicate like every read: only files the caller
may read and listed in its allow-list are counted (a scope without an allow-list counts none:
`/query_v2` always has one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import asyncpg

from app.store.scope import SCOPE_SQL, Scope

# the allow-list's files by the catalogue's primary key (collection_id, file_id, owner), each checked
# for a staged entry by the run's primary key (run_id, file_id): the cost follows the list. The scope
# is built once (MATERIALIZED: inlined, its function would run again for every row)
MISSING_FILES = f"""
    WITH s AS MATERIALIZED (SELECT {SCOPE_SQL} AS scope)
    SELECT f.file_id, rf.state, rf.error
    FROM s
    CROSS JOIN unnest($3::text[]) AS listed(file_id)
    JOIN ragoverlay_files f ON f.collection_id = $1 AND f.file_id = listed.file_id AND f.owner = $7
    LEFT JOIN ragoverlay_v2_run_files rf ON rf.run_id = $8 AND rf.file_id = f.file_id
    LEFT JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
    WHERE ragoverlay_in_scope(p_scope => s.scope, p_collection => f.collection_id, p_file_id => f.file_id,
                              p_owner => f.owner)
      -- staged with a document of the version the catalogue names is held; a document of a
      -- replaced version is no document of the file (as ragoverlay_v2_visible_documents reads it)
      AND NOT (rf.state IS NOT DISTINCT FROM 'staged'
               AND (f.sha256 IS NULL OR f.sha256 IS NOT DISTINCT FROM d.version_sha256))
    ORDER BY f.file_id
    LIMIT $9
"""

MissingState = Literal["indexing", "replaced", "failed"]


@dataclass(frozen=True)
class MissingFile:
    """A stored file the run does not answer from, and why: not indexed yet, a newer version not yet
    indexed (the run holds a replaced one), or its staging failed (with the reason recorded)."""

    file_id: str
    state: MissingState
    error: str | None = None


def _missing(file_id: str, run_state: str | None, error: str | None) -> MissingFile:
    if run_state == "staged":
        return MissingFile(file_id, "replaced")
    if run_state == "failed":
        return MissingFile(file_id, "failed", error)
    return MissingFile(file_id, "indexing")  # no entry in the run yet, pending or staging


async def missing_files(
    conn: asyncpg.Connection,
    scope: Scope,
    namespace: str,
    run_id: int,
    *,
    limit: int = 1000,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
) -> list[MissingFile]:
    """The scope's stored files of `namespace` that run `run_id` holds no current document of."""
    rows = await conn.fetch(
        MISSING_FILES, *scope.for_reading().sql_args(), namespace, run_id, limit, timeout=timeout
    )
    return [_missing(str(r["file_id"]), r["state"], r["error"]) for r in rows]


def describe_missing(missing: Sequence[MissingFile]) -> str:
    """One sentence on why an answer lacks these files (the caller may read each of them)."""
    indexing = sum(1 for m in missing if m.state == "indexing")
    replaced = sum(1 for m in missing if m.state == "replaced")
    failed = [m for m in missing if m.state == "failed"]
    parts = []
    if indexing:
        parts.append(f"{indexing} not indexed yet")
    if replaced:
        parts.append(f"{replaced} uploaded again, the new version not indexed yet (the old one is not used)")
    if failed:
        reason = f": {failed[0].error}" if failed[0].error else ""
        parts.append(f"{len(failed)} could not be indexed{reason}")
    noun = "file" if len(missing) == 1 else "files"
    return f"{len(missing)} requested {noun} missing from the evidence index: " + "; ".join(parts)
