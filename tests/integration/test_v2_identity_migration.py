"""Migration 0014: V2 rows recorded the local model's identity without the "+windows" mark; they
hold windowed vectors (V2 came after the windows change), so they take the one identity's name and
stay active and reusable. V1's unmarked files (vectors from before the windows) keep theirs."""

from __future__ import annotations

import uuid

import asyncpg

from app.clients.embeddings import model_identity
from app.config import load_settings
from app.store.db import bootstrap
from app.store.migrate import load_migrations
from tests.fixtures.service import Database

UNMARKED = "local:all-MiniLM-L6-v2"


async def test_unmarked_local_v2_rows_take_the_marked_identity_and_v1_rows_keep_theirs(
    database: Database,
) -> None:
    info = await bootstrap(database.dsn, f"v2ident_{uuid.uuid4().hex[:8]}")
    marked = model_identity(load_settings(embeddings_provider="local", _env_file=None))
    assert marked == UNMARKED + "+windows"
    (migration,) = [m for m in load_migrations() if m.version == 14]
    conn = await asyncpg.connect(database.dsn)
    try:
        runs = {}
        for model in (UNMARKED, marked, "openai:text-embedding-3-small", UNMARKED + "@384"):
            runs[model] = await conn.fetchval(
                "INSERT INTO ragoverlay_v2_runs (collection_id, namespace, index_version, "
                "extractor_version, embedding_model, status) VALUES ($1, $2, 'v', 'x', $3, 'running') "
                "RETURNING run_id",
                info.collection_id,
                f"ns-{uuid.uuid4().hex[:6]}",
                model,
            )
        document = await conn.fetchval(
            "INSERT INTO ragoverlay_v2_documents (collection_id, file_id, owner, checksum, "
            "extractor_version, embedding_model, source, filename, title) "
            "VALUES ($1, 'f', 'o', 'c', 'x', $2, 'original', 'a.txt', 'a') RETURNING document_id",
            info.collection_id,
            UNMARKED,
        )
        await conn.execute(
            "INSERT INTO ragoverlay_files (collection_id, file_id, owner, uploader, filename, "
            "embedding_model, embedding_dim) VALUES ($1, 'f', 'o', 'o', 'a.txt', $2, 384)",
            info.collection_id,
            UNMARKED,
        )
        for _ in range(2):  # applied again (as the test database already had it): no double mark
            async with conn.transaction():
                await conn.execute(migration.sql)
            found = {
                r["run_id"]: r["embedding_model"]
                for r in await conn.fetch(
                    "SELECT run_id, embedding_model FROM ragoverlay_v2_runs WHERE collection_id = $1",
                    info.collection_id,
                )
            }
            assert found == {
                runs[UNMARKED]: marked,
                runs[marked]: marked,
                runs["openai:text-embedding-3-small"]: "openai:text-embedding-3-small",
                runs[UNMARKED + "@384"]: UNMARKED + "@384+windows",
            }
            assert (
                await conn.fetchval(
                    "SELECT embedding_model FROM ragoverlay_v2_documents WHERE document_id = $1", document
                )
                == marked
            )
            assert (
                await conn.fetchval(
                    "SELECT embedding_model FROM ragoverlay_files WHERE collection_id = $1",
                    info.collection_id,
                )
                == UNMARKED
            )
    finally:
        await conn.execute("DELETE FROM ragoverlay_v2_runs WHERE collection_id = $1", info.collection_id)
        await conn.execute("DELETE FROM ragoverlay_v2_documents WHERE collection_id = $1", info.collection_id)
        await conn.execute("DELETE FROM ragoverlay_files WHERE collection_id = $1", info.collection_id)
        await conn.close()
