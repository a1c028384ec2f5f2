"""rag_api's files enter our catalogue (chunk count, dimension) without changing who may touch them."""

from __future__ import annotations

import json
import uuid

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from app.store import chunks as store
from app.store.catalogue import backfill_catalogue
from app.store.db import bootstrap
from app.store.scope import Scope
from tests.fixtures.service import Database


async def test_backfill_counts_dims_and_keeps_delete_rights(database: Database) -> None:
    info = await bootstrap(database.dsn, f"backfill_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        rows = []
        for fid, owner, dims, n in [("a", "u1", 4, 3), ("b", "agent_x", 4, 2), ("c", "u1", 6, 1)]:
            for i in range(n):
                meta = {
                    "file_id": fid,
                    "user_id": owner,
                    "digest": f"{fid}{i}",
                    "source": f"/app/uploads/{owner}/{fid}.pdf",
                }
                rows.append(
                    (
                        uuid.uuid4(),
                        info.collection_id,
                        np.ones(dims, dtype=np.float32),
                        f"text {i}",
                        json.dumps(meta),
                        fid,
                    )
                )
        await conn.copy_records_to_table(
            "langchain_pg_embedding",
            records=rows,
            columns=["uuid", "collection_id", "embedding", "document", "cmetadata", "custom_id"],
        )
        assert await backfill_catalogue(conn, info.collection_id) == 3
        assert await backfill_catalogue(conn, info.collection_id) == 0  # idempotent
        got = {
            r["file_id"]: dict(r)
            for r in await conn.fetch(
                "SELECT file_id, owner, uploader, filename, status, chunk_count, embedding_dim "
                "FROM ragoverlay_files WHERE collection_id = $1",
                info.collection_id,
            )
        }
        assert got["a"] == {
            "file_id": "a",
            "owner": "u1",
            "uploader": "",
            "filename": "a.pdf",
            "status": "legacy",
            "chunk_count": 3,
            "embedding_dim": 4,
        }
        assert got["c"]["embedding_dim"] == 6
        # the unknown uploader ('') grants nothing: only the owner's namespaces read and delete
        for uploader in ("u2", "", None):
            scope = Scope.of(info.collection_id, ["u2"], uploader=uploader, file_ids=["b"])
            assert await store.documents(conn, scope, limit=10) == []
            async with conn.transaction():
                assert (await store.delete_files(conn, scope)).found == set()
        async with conn.transaction():
            scope = Scope.of(info.collection_id, ["agent_x"], uploader="u2", file_ids=["b"])
            result = await store.delete_files(conn, scope)
        assert result.found == {"b"}
    finally:
        await conn.close()
