"""After a restart, the embedding dimension comes from the stored vectors before any reply is trusted:
a first reply of the wrong dimension is refused (nothing stored), and the right replies after it are
accepted, so existing data stays searchable (the provider is a real HTTP server on loopback)."""

from __future__ import annotations

from typing import Any

import pytest
from asyncpg.connection import LoggedQuery

from tests.contract.helpers import query, upload
from tests.fixtures.fake_providers import FakeProvider, Reply
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app


async def test_a_wrong_first_reply_after_a_restart_is_refused_and_does_not_stick(
    settings_factory: SettingsFactory, fake_provider: FakeProvider
) -> None:
    settings = settings_factory(
        embeddings_provider="openai",
        openai_api_key="sk-test",
        openai_base_url=fake_provider.url + "/v1",
        embedding_max_retries=0,
    )
    user, first = new_id("user"), new_id()
    async with running_app(settings) as c:
        r = await upload(c, first, "a.txt", b"Gannets plunge from a great height.", auth(user))
        assert r.status_code == 200, r.text
    async with running_app(settings) as c:  # the restart: same database, same collection
        assert resources(c).embedder.dimensions == fake_provider.dims  # known before any reply
        fake_provider.script(Reply(dims=fake_provider.dims * 2))
        second = new_id()
        r = await upload(c, second, "b.txt", b"Skuas chase other birds.", auth(user))
        assert r.status_code == 502, r.text
        assert "already stored" in r.json()["detail"]
        r = await upload(c, second, "b.txt", b"Skuas chase other birds.", auth(user))
        assert r.status_code == 200, r.text  # the right dimension is still accepted
        hits = (await query(c, "gannets", first, auth(user))).json()
        assert hits and hits[0][0]["page_content"].startswith("Gannets")  # old data searchable
        async with resources(c).pool.acquire() as conn:
            dims = await conn.fetch(
                "SELECT DISTINCT vector_dims(embedding) AS d FROM langchain_pg_embedding "
                "WHERE collection_id = $1",
                resources(c).info.collection_id,
            )
        assert [row["d"] for row in dims] == [fake_provider.dims]  # nothing of the wrong size stored


async def test_queries_read_the_stored_dimension_once_per_process_not_per_request(
    settings_factory: SettingsFactory, fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing stored for the model (a database migrated from rag_api): "unknown" is kept too.

    Every statement the pool runs is logged; none reads the stored dimension after start-up, and a
    file stored by this process sets the dimension without a read, so a query vector of another
    dimension is still a clear 502, not a SQL failure.
    """
    settings = settings_factory(
        embeddings_provider="openai",
        openai_api_key="sk-test",
        openai_base_url=fake_provider.url + "/v1",
        embedding_max_retries=0,
    )
    user, file_id = new_id("user"), new_id()
    async with running_app(settings) as c:
        pool = resources(c).pool
        statements: list[str] = []

        def log(record: LoggedQuery) -> None:
            statements.append(record.query)

        acquire = pool._acquire

        async def logged_acquire(timeout: float | None) -> Any:  # noqa: ASYNC109 - asyncpg's signature
            conn = await acquire(timeout)
            conn.add_query_logger(log)  # a set: added once per connection
            return conn

        monkeypatch.setattr(pool, "_acquire", logged_acquire)
        for i in range(6):
            r = await query(c, f"gannets {i % 2}", file_id, auth(user))  # misses, then cached vectors
            assert r.status_code == 200, r.text
        assert statements, "the pool's statements were not logged"
        assert not [s for s in statements if "embedding_dim FROM ragoverlay_files" in s]
        assert resources(c).embedder.trusted_dimensions is None  # nothing stored: nothing to judge by

        r = await upload(c, file_id, "a.txt", b"Gannets plunge from a great height.", auth(user))
        assert r.status_code == 200, r.text
        assert resources(c).embedder.trusted_dimensions == fake_provider.dims  # told, not read
        fake_provider.script(Reply(dims=fake_provider.dims * 2))
        r = await query(c, "a question answered in the wrong dimension", file_id, auth(user))
        assert r.status_code == 502, r.text
        assert "already stored" in r.json()["detail"]
        hits = (await query(c, "gannets", file_id, auth(user))).json()
        assert hits and hits[0][0]["page_content"].startswith("Gannets")
        assert not [s for s in statements if "embedding_dim FROM ragoverlay_files" in s]
