"""An existing rag_api database is served as it is, and our rows are readable by rag_api.

Rows are written here exactly as rag_api v0.9 (langchain_community PGVector, use_jsonb=True)
writes them: random v4 uuid, `custom_id` = file id, metadata keys `file_id`, `user_id`, `digest`,
`source` (a server temp path), `page`, in a dimensionless `vector` column.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import asyncpg
import httpx
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from tests.contract.helpers import query, upload
from tests.fixtures.service import Database, auth, new_id, running_app

PASSAGES = [
    "Invoices must be paid within thirty days of receipt.",
    "The office kitchen is cleaned every Friday afternoon.",
    "Annual leave requests go to your line manager two weeks ahead.",
]


async def insert_rag_api_rows(
    conn: asyncpg.Connection,
    collection: str,
    file_id: str,
    owner: str | None,
    vectors: np.ndarray,
    *,
    json_type: str = "jsonb",
) -> None:
    """Insert a file the way rag_api does."""
    coll = await conn.fetchval("SELECT uuid FROM langchain_pg_collection WHERE name = $1", collection)
    for page, (text, vec) in enumerate(zip(PASSAGES, vectors, strict=True)):
        meta = {
            "file_id": file_id,
            "digest": hashlib.md5(text.encode()).hexdigest(),
            "source": f"/app/uploads/{owner}/handbook_3f2a.pdf",
            "page": page,
        }
        if owner is not None:
            meta["user_id"] = owner
        await conn.execute(
            "INSERT INTO langchain_pg_embedding (uuid, collection_id, embedding, document, cmetadata, "
            f"custom_id) VALUES ($1, $2, $3, $4, $5::{json_type}, $6)",
            uuid.uuid4(),
            coll,
            vec,
            text,
            json.dumps(meta),
            file_id,
        )


async def test_rag_api_rows_are_found(client: httpx.AsyncClient, database: Database) -> None:
    resources = client.app.state.services  # type: ignore[attr-defined]
    user, fid = new_id("user"), new_id()
    vectors = await resources.embedder.embed_documents(PASSAGES)
    conn = await asyncpg.connect(database.dsn)
    await register_vector(conn)
    try:
        await insert_rag_api_rows(conn, resources.info.collection_name, fid, user, vectors)
    finally:
        await conn.close()
    r = await query(client, "When do invoices need to be paid?", fid, auth(user), k=2)
    pairs = r.json()
    assert len(pairs) == 2
    assert pairs[0][0]["page_content"] == PASSAGES[0]
    assert pairs[0][0]["metadata"]["page"] == 0
    ctx = (await client.get(f"/documents/{fid}/context", headers=auth(user))).json()
    assert ctx.split("\n")[0] == "handbook_3f2a.pdf"  # last segment of rag_api's temp path
    assert fid in (await client.get("/ids", headers=auth(user))).json()
    # another user still cannot see them
    assert (await query(client, "invoices", fid, auth(new_id("user")))).json() == []
    # and they can be deleted by their owner (no catalogue row exists for rag_api's files)
    r = await client.request("DELETE", "/documents", json=[fid], headers=auth(user))
    assert r.status_code == 200


async def test_unowned_legacy_rows_hidden_unless_enabled(
    client: httpx.AsyncClient,
    database: Database,
    settings_factory,  # type: ignore[no-untyped-def]
) -> None:
    settings = settings_factory(legacy_unowned_readable=True)
    async with running_app(settings) as legacy:
        resources = legacy.app.state.services  # type: ignore[attr-defined]
        fid = new_id()
        vectors = await resources.embedder.embed_documents(PASSAGES)
        conn = await asyncpg.connect(database.dsn)
        await register_vector(conn)
        try:
            await insert_rag_api_rows(conn, resources.info.collection_name, fid, None, vectors)
        finally:
            await conn.close()
        assert len((await query(legacy, "kitchen cleaning", fid, auth(new_id("user")))).json()) == 3
    async with running_app(settings_factory(collection_name=settings.collection_name)) as strict:
        assert (await query(strict, "kitchen cleaning", fid, auth(new_id("user")))).json() == []


async def test_our_rows_have_rag_api_format(client: httpx.AsyncClient, database: Database) -> None:
    user, fid = new_id("user"), new_id()
    assert (
        await upload(client, fid, "policy.txt", "\n\n".join(PASSAGES).encode(), auth(user))
    ).status_code == 200
    conn = await asyncpg.connect(database.dsn)
    try:
        rows = await conn.fetch(
            "SELECT uuid, collection_id, embedding::text AS emb, document, cmetadata, custom_id, "
            "       vector_dims(embedding) AS dims "
            "FROM langchain_pg_embedding WHERE custom_id = $1",
            fid,
        )
    finally:
        await conn.close()
    assert rows
    for row in rows:
        meta = json.loads(row["cmetadata"])
        assert row["custom_id"] == fid
        assert meta["file_id"] == fid and meta["user_id"] == user and meta["source"] == "policy.txt"
        assert meta["digest"] == hashlib.md5(row["document"].encode()).hexdigest()
        assert row["dims"] == 384


@pytest.fixture
async def json_metadata_db(database: Database) -> str:
    """A separate database whose rag_api table predates jsonb (cmetadata json)."""
    name = f"legacy_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(database.superuser_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" OWNER ragoverlay')
    finally:
        await admin.close()
    dsn = database.dsn.rsplit("/", 1)[0] + f"/{name}"
    su = await asyncpg.connect(database.superuser_dsn.rsplit("/", 1)[0] + f"/{name}")
    try:
        await su.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await su.close()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE langchain_pg_collection (uuid uuid PRIMARY KEY, name varchar, cmetadata json);"
            "CREATE TABLE langchain_pg_embedding (uuid uuid PRIMARY KEY, collection_id uuid REFERENCES "
            "langchain_pg_collection(uuid) ON DELETE CASCADE, embedding vector, document varchar, "
            "cmetadata json, custom_id varchar);"
        )
    finally:
        await conn.close()
    return dsn


async def test_json_metadata_deployment(settings_factory, json_metadata_db: str) -> None:  # type: ignore[no-untyped-def]
    async with running_app(settings_factory(database_url=json_metadata_db)) as c:
        assert c.app.state.services.info.metadata_type == "json"  # type: ignore[attr-defined]
        user, fid = new_id("user"), new_id()
        r = await upload(c, fid, "a.txt", "\n\n".join(PASSAGES).encode(), auth(user))
        assert r.status_code == 200, r.text
        pairs = (await query(c, "annual leave requests", fid, auth(user), k=1)).json()
        assert "Annual leave" in pairs[0][0]["page_content"]
        conn = await asyncpg.connect(json_metadata_db)
        try:
            # a rag_api-format row added by rag_api itself next to ours is served too
            await register_vector(conn)
            vectors = await c.app.state.services.embedder.embed_documents(PASSAGES)  # type: ignore[attr-defined]
            coll = c.app.state.services.info.collection_name  # type: ignore[attr-defined]
            other = new_id()
            await insert_rag_api_rows(conn, coll, other, user, vectors, json_type="json")
        finally:
            await conn.close()
        assert (await query(c, "kitchen", other, auth(user))).json()
        assert (
            await c.request("DELETE", "/documents", json=[fid, other], headers=auth(user))
        ).status_code == 200
