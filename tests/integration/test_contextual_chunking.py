"""Contextual chunking through `/embed` and a V2 run, with the fake OpenAI chat endpoint and the fake
embedding provider each on a real socket: what is embedded has the chat model's sentence in front,
what is stored and shown does not; a slow, failing or babbling endpoint leaves the chunks raw and the
upload succeeds; with the setting off nothing changes and the chat endpoint is never asked."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app import metrics
from app.clients.embeddings import model_identity
from app.config import Settings
from app.ingest.contextual import SENTENCE_CHARS, STOP_AFTER_FAILURES
from tests.contract.helpers import agent_id, upload
from tests.fixtures.fake_providers import FakeProvider, RecordedRequest, Reply, chat_passage
from tests.fixtures.service import auth, new_id, resources, running_app

pytestmark = pytest.mark.slow

USER = "ctx-user"
ADMIN = "ctx-admin"
API_KEY = "sk-chat-never-logged-4711"
# eight paragraphs, each its own chunk at CHUNK_SIZE=300 (each word appears in one paragraph only)
WORDS = ["alder", "birch", "cedar", "daphne", "elder", "fir", "ginkgo", "hazel"]
PARAGRAPHS = [
    f"Section {n}. The {word} heater series holds {word} ratings and {word} limits for cold rooms. "
    + " ".join(f"{word}{i}" for i in range(25))
    for n, word in enumerate(WORDS, start=1)
]
DOCUMENT = "\n\n".join(PARAGRAPHS).encode()
# the same as Markdown with a heading per paragraph: a V2 chunk per section
MARKDOWN = ("# Heaters\n\n" + "\n\n".join(f"## Part {n}\n\n{p}" for n, p in enumerate(PARAGRAPHS))).encode()


@pytest.fixture
def make_settings(
    settings_factory: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "embeddings_provider": "openai",
            "embeddings_model": "embed-small",
            "openai_api_key": "sk-embed",
            "openai_base_url": fake_provider.url + "/v1",
            "embedding_max_retries": 0,
            "chunk_size": 300,
            "chunk_overlap": 30,
            "admin_user_ids": [ADMIN],
            "contextual_chunking_enabled": True,
            "contextual_chunking_base_url": fake_chat.url + "/v1",
            "contextual_chunking_model": "small-chat",
            "contextual_chunking_api_key": API_KEY,
            "contextual_chunking_timeout_ms": 2000,
        }
        values.update(overrides)
        return settings_factory(**values)

    return make


def embedded_texts(provider: FakeProvider) -> list[str]:
    """Every text the embedding provider was sent, in order."""
    return [text for request in provider.requests for text in provider.texts_of(request)]


def chat_requests(chat: FakeProvider) -> list[RecordedRequest]:
    return [r for r in chat.requests if r.path == "/v1/chat/completions"]


def counted(outcome: str) -> float:
    """`ragoverlay_contextual_chunks_total{outcome}` so far."""
    value = metrics.REGISTRY.get_sample_value("ragoverlay_contextual_chunks_total", {"outcome": outcome})
    return value or 0.0


async def upload_document(settings: Settings, file_id: str) -> list[dict[str, Any]]:
    """Upload DOCUMENT as `file_id` (it must succeed); its stored chunks as `/documents` shows them."""
    async with running_app(settings) as c:
        r = await upload(c, file_id, "heaters.txt", DOCUMENT, auth(USER))
        assert r.status_code == 200, r.text
        assert r.json()["status"] is True
        r = await c.get("/documents", params={"ids": [file_id]}, headers=auth(USER))
        assert r.status_code == 200, r.text
        stored: list[dict[str, Any]] = r.json()
        async with resources(c).pool.acquire() as conn:
            identity = await conn.fetchval(
                "SELECT embedding_model FROM ragoverlay_files WHERE file_id = $1", file_id
            )
        assert identity == model_identity(settings)
    return stored


async def test_the_sentence_is_embedded_in_front_and_never_stored(
    make_settings: Callable[..., Settings],
    fake_provider: FakeProvider,
    fake_chat: FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings()
    caplog.set_level(logging.DEBUG)
    stored = await upload_document(settings, new_id())
    contents = [doc["page_content"] for doc in stored]
    assert len(contents) >= 4
    asked = chat_requests(fake_chat)
    assert sorted(chat_passage(r) for r in asked) == sorted(contents)  # one request per chunk
    assert {r.headers["authorization"] for r in asked} == {f"Bearer {API_KEY}"}
    assert {r.json["model"] for r in asked} == {"small-chat"}
    sentence_of = {chat_passage(r): fake_chat.chat_text(r) for r in asked}
    # what was embedded: the chunk's own sentence, a line break, the chunk
    assert sorted(embedded_texts(fake_provider)) == sorted(f"{sentence_of[t]}\n{t}" for t in contents)
    # what is stored and shown: the document's words only
    for doc in stored:
        assert "Situated passage" not in doc["page_content"]
        assert not any("Situated" in str(value) for value in doc["metadata"].values())
    assert f"{len(contents)} of {len(contents)} chunks situated" in caplog.text
    assert API_KEY not in caplog.text


async def test_a_re_upload_reuses_situated_vectors_without_asking_again(
    make_settings: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> None:
    settings = make_settings()
    file_id = new_id()
    await upload_document(settings, file_id)
    asked, embedded = len(chat_requests(fake_chat)), len(embedded_texts(fake_provider))
    await upload_document(settings, file_id)
    assert len(chat_requests(fake_chat)) == asked  # unchanged chunks: same identity, same vectors
    assert len(embedded_texts(fake_provider)) == embedded
    # the same file with the setting off: another identity, so every chunk is embedded again, raw
    raw = make_settings(
        contextual_chunking_enabled=False,
        collection_name=settings.collection_name,
        data_dir=settings.data_dir,
    )
    stored = await upload_document(raw, file_id)
    assert len(chat_requests(fake_chat)) == asked
    assert sorted(embedded_texts(fake_provider)[embedded:]) == sorted(d["page_content"] for d in stored)


async def test_a_slow_endpoint_times_out_and_the_chunks_are_embedded_raw(
    make_settings: Callable[..., Settings],
    fake_provider: FakeProvider,
    fake_chat: FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_chat.delay = 5.0
    settings = make_settings(contextual_chunking_timeout_ms=300)
    caplog.set_level(logging.WARNING)
    stored = await upload_document(settings, new_id())
    contents = sorted(doc["page_content"] for doc in stored)
    assert sorted(embedded_texts(fake_provider)) == contents
    assert chat_requests(fake_chat)  # it was asked, and did not wait for the answers
    assert "timeout" in caplog.text and "embedded raw" in caplog.text


async def test_server_errors_leave_the_chunks_raw_and_the_document_stops_asking(
    make_settings: Callable[..., Settings],
    fake_provider: FakeProvider,
    fake_chat: FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_chat.handler = lambda request: Reply(status=500)
    settings = make_settings(contextual_chunking_concurrency=1)
    caplog.set_level(logging.WARNING)
    before = {outcome: counted(outcome) for outcome in ("failed", "stopped", "situated")}
    stored = await upload_document(settings, new_id())
    assert len(stored) > STOP_AFTER_FAILURES
    assert counted("failed") - before["failed"] == STOP_AFTER_FAILURES
    assert counted("stopped") - before["stopped"] == len(stored) - STOP_AFTER_FAILURES
    assert counted("situated") == before["situated"]
    assert sorted(embedded_texts(fake_provider)) == sorted(doc["page_content"] for doc in stored)
    # each chunk: one try and one retry, until STOP_AFTER_FAILURES chunks failed in a row
    assert len(chat_requests(fake_chat)) == 2 * STOP_AFTER_FAILURES
    assert "HTTP 500" in caplog.text
    assert "provider secret detail" not in caplog.text  # never a provider body


async def test_garbage_and_over_long_replies(
    make_settings: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> None:
    babble = "Situated babble " + "and more words " * 400 + ". Another sentence."

    def answer(request: RecordedRequest) -> Reply | None:
        passage = chat_passage(request)
        if "alder" in passage:
            return Reply(json={"choices": [{"message": {"content": "\x00\x01 \ud800 ..."}}]})
        if "birch" in passage:
            return Reply(body=b"<html>not a chat completion</html>")
        if "cedar" in passage:
            return Reply(json={"choices": [{"message": {"content": babble}}]})
        return None  # the default sentence

    fake_chat.handler = answer
    settings = make_settings(contextual_chunking_concurrency=1)
    stored = await upload_document(settings, new_id())
    embedded = {text.split("\n")[-1]: text for text in embedded_texts(fake_provider)}
    by_word = {
        word: next(d["page_content"] for d in stored if word in d["page_content"])
        for word in ("alder", "birch", "cedar", "daphne")
    }
    assert embedded[by_word["alder"].split("\n")[-1]] == by_word["alder"]  # garbage: raw
    assert embedded[by_word["birch"].split("\n")[-1]] == by_word["birch"]  # unreadable: raw
    cedar = embedded[by_word["cedar"].split("\n")[-1]]
    sentence = cedar.split("\n")[0]
    assert sentence.startswith("Situated babble") and len(sentence) <= SENTENCE_CHARS
    assert "Another sentence" not in cedar
    assert embedded[by_word["daphne"].split("\n")[-1]].startswith("Situated passage ctx")


async def test_off_by_default_nothing_changes(
    settings_factory: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> None:
    settings = settings_factory(
        embeddings_provider="openai",
        embeddings_model="embed-small",
        openai_api_key="sk-embed",
        openai_base_url=fake_provider.url + "/v1",
        chunk_size=300,
        chunk_overlap=30,
    )
    assert settings.contextual_chunking_enabled is False
    assert model_identity(settings) == "openai:embed-small"
    stored = await upload_document(settings, new_id())
    assert sorted(embedded_texts(fake_provider)) == sorted(doc["page_content"] for doc in stored)
    assert fake_chat.requests == []


async def build_run(c: httpx.AsyncClient, namespace: str, file_id: str) -> dict[str, Any]:
    """A V2 run of the one file, staged and activated through the admin routes; the run."""
    r = await c.post("/v2/runs", json={"namespace": namespace, "file_ids": [file_id]}, headers=auth(ADMIN))
    assert r.status_code in (200, 201), r.text
    run: dict[str, Any] = r.json()["run"]
    r = await c.post(f"/v2/runs/{run['run_id']}/stage", json={"file_id": file_id}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    r = await c.post(f"/v2/runs/{run['run_id']}/activate", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return run


async def answering(c: httpx.AsyncClient, namespace: str) -> dict[str, Any]:
    r = await c.get("/v2/status", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    (entry,) = [a for a in r.json()["answering"] if a["namespace"] == namespace]
    return dict(entry)


async def test_v2_embeds_and_indexes_the_sentence_but_shows_the_content(
    make_settings: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> None:
    namespace = agent_id()
    file_id = new_id()
    first = make_settings()
    async with running_app(first) as c:  # uploaded before V2 is enabled: no automatic run
        r = await upload(
            c, file_id, "heaters.md", MARKDOWN, auth(USER), entity_id=namespace, content_type="text/markdown"
        )
        assert r.status_code == 200, r.text
    settings = make_settings(
        v2_namespace_ids=[namespace], collection_name=first.collection_name, data_dir=first.data_dir
    )
    asked_before = len(chat_requests(fake_chat))
    async with running_app(settings) as c:
        run = await build_run(c, namespace, file_id)
        assert run["embedding_model"] == "openai:embed-small+context:small-chat"
        assert (await answering(c, namespace))["reindex_needed"] is None
        async with resources(c).pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT c.content, c.embed_text, c.search_text FROM ragoverlay_v2_run_files f "
                "JOIN ragoverlay_v2_chunks c ON c.document_id = f.document_id WHERE f.run_id = $1",
                run["run_id"],
            )
        asked = chat_requests(fake_chat)[asked_before:]
        assert len(rows) >= 5 and len(asked) == len(rows)
        sentence_of = {chat_passage(r): fake_chat.chat_text(r) for r in asked}
        for row in rows:
            sentence = sentence_of[row["content"]]
            assert row["embed_text"].startswith(sentence + "\n")
            assert "Situated" not in row["content"]
            assert sentence.split()[2].lower() in row["search_text"].split()  # "ctx<mark>"
        assert set(embedded_texts(fake_provider)) >= {row["embed_text"] for row in rows}
        # the sentence's word finds the chunk lexically; the result shows the chunk's own content
        word = sentence_of[rows[0]["content"]].split()[2]
        r = await c.post(
            "/query_v2",
            json={"query": word, "file_ids": [file_id], "entity_id": namespace, "debug": True},
            headers=auth(ADMIN),
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["results"], body
        assert all("Situated" not in result["content"] for result in body["results"])
        assert "VectorModelMismatch" not in r.text


async def test_turning_it_off_marks_the_v2_index_for_a_forced_reindex(
    make_settings: Callable[..., Settings], fake_provider: FakeProvider, fake_chat: FakeProvider
) -> None:
    namespace, file_id = agent_id(), new_id()
    situated = make_settings()
    async with running_app(situated) as c:
        r = await upload(
            c, file_id, "heaters.md", MARKDOWN, auth(USER), entity_id=namespace, content_type="text/markdown"
        )
        assert r.status_code == 200, r.text
    same_store = {"collection_name": situated.collection_name, "data_dir": situated.data_dir}
    async with running_app(make_settings(v2_namespace_ids=[namespace], **same_store)) as c:
        first = await build_run(c, namespace, file_id)
    asked = len(chat_requests(fake_chat))
    raw = make_settings(contextual_chunking_enabled=False, v2_namespace_ids=[namespace], **same_store)
    async with running_app(raw) as c:
        stale = await answering(c, namespace)
        assert stale["run_id"] == first["run_id"]
        assert "force=true" in stale["reindex_needed"] and "+context:small-chat" in stale["reindex_needed"]
        # meanwhile the situated run still answers, its vector channel included
        r = await c.post(
            "/query_v2",
            json={"query": "birch ratings", "file_ids": [file_id], "entity_id": namespace, "debug": True},
            headers=auth(ADMIN),
        )
        assert r.status_code == 200, r.text
        assert "VectorModelMismatch" not in r.text and r.json()["results"]
        second = await build_run(c, namespace, file_id)
        assert second["embedding_model"] == "openai:embed-small"
        assert (await answering(c, namespace))["reindex_needed"] is None
        async with resources(c).pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT c.embed_text FROM ragoverlay_v2_run_files f "
                "JOIN ragoverlay_v2_chunks c ON c.document_id = f.document_id WHERE f.run_id = $1",
                second["run_id"],
            )
    assert rows and not any("Situated" in row["embed_text"] for row in rows)  # nothing situated reused
    assert len(chat_requests(fake_chat)) == asked
