"""After a restart, the embedding dimension comes from the stored vectors before any reply is trusted:
a first reply of the wrong dimension is refused (nothing stored), and the right replies after it are
accepted, so existing data stays searchable (the provider is a real HTTP server on loopback)."""

from __future__ import annotations

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
