"""Contextual chunking's pure parts: the bounded prompt, the cleaned reply, the identity, the settings;
and the per-document budget and failure stop through the fake chat endpoint answering in-process."""

from __future__ import annotations

from typing import Any

import pytest

from app.clients.chat import ChatClient
from app.clients.embeddings import model_identity, query_space
from app.config import Settings, load_settings
from app.errors import ConfigError
from app.ingest.contextual import (
    CHUNK_CHARS,
    GAP,
    SENTENCE_CHARS,
    STOP_AFTER_FAILURES,
    WINDOW_CHARS,
    Contextualizer,
    build_messages,
    clean_sentence,
    document_window,
    with_context,
)
from tests.fixtures.fake_providers import FakeProvider, Reply, chat_passage

ON: dict[str, Any] = {
    "contextual_chunking_enabled": True,
    "contextual_chunking_base_url": "http://chat.test/v1",
    "contextual_chunking_model": "small-chat",
}


def make(**overrides: Any) -> Settings:
    return load_settings(_env_file=None, **overrides)


# --- the window of the document sent with each chunk ------------------------------------------


def test_a_short_document_is_sent_whole_in_order() -> None:
    texts = ["alpha", "beta", "gamma"]
    assert document_window(texts, 1) == "alpha\nbeta\ngamma"
    assert document_window(texts, 0) == "alpha\nbeta\ngamma"


def test_a_long_document_is_bounded_around_the_chunk_and_led_by_its_beginning() -> None:
    texts = [f"[{i:04d}]" + "x" * 493 for i in range(2000)]  # 1,000,000 characters
    window = document_window(texts, 1000)
    assert len(window) <= WINDOW_CHARS + 2 * len(GAP) + 40  # the joins between chunks
    assert window.startswith("[0000]")  # the document's beginning leads
    assert window.count(GAP) == 2  # a gap after the beginning, one at the end
    assert "[1000]" in window and "[0999]" in window and "[1001]" in window
    assert "[0500]" not in window and "[1500]" not in window
    middle = window.split(GAP)[1]
    assert middle.index("[0999]") < middle.index("[1000]") < middle.index("[1001]")


def test_the_window_near_the_end_and_a_huge_chunk() -> None:
    texts = ["head " * 100, *["y" * 500 for _ in range(50)], "last chunk"]
    window = document_window(texts, len(texts) - 1)
    assert window.endswith("last chunk") and window.startswith("head")
    huge = ["z" * 50_000]
    assert len(document_window(huge, 0)) == WINDOW_CHARS


def test_the_prompt_is_bounded() -> None:
    messages = build_messages("T" * 1000, "w" * WINDOW_CHARS, "c" * 100_000)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "c" * CHUNK_CHARS in user
    assert "c" * (CHUNK_CHARS + 1) not in user
    assert "T" * 201 not in user
    assert len(user) < WINDOW_CHARS + CHUNK_CHARS + 500


# --- the reply ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("This passage lists the K 28 heater's ratings.", "This passage lists the K 28 heater's ratings."),
        ('  Context: "Ratings of the K series."\n', "Ratings of the K series."),
        ("Kontext: Abschnitt 3 des Handbuchs.", "Abschnitt 3 des Handbuchs."),
        ("First sentence. Second sentence that should go.", "First sentence."),
        ("See e.g. the table of Fig. 3 in part 2. And more.", "See e.g. the table of Fig. 3 in part 2."),
        ("Null\x00byte and\x1b[31m escapes\u202e bidi", "Nullbyte and[31m escapes bidi"),
        ("lone \ud800surrogate here", "lone surrogate here"),
        ("line\nbreaks\tand  spaces", "line breaks and spaces"),
    ],
)
def test_replies_are_cleaned_to_one_sentence(raw: str, clean: str) -> None:
    assert clean_sentence(raw) == clean


@pytest.mark.parametrize("raw", ["", "   ", "\x00\x01\x02", "…", "42.", '""', "ok"])
def test_garbage_replies_give_no_sentence(raw: str) -> None:
    assert clean_sentence(raw) is None


def test_an_over_long_reply_is_cut_at_a_word() -> None:
    raw = "word " * 500
    sentence = clean_sentence(raw)
    assert sentence is not None and len(sentence) <= SENTENCE_CHARS
    assert sentence.endswith("word…")
    assert clean_sentence("x" * 5000) == "x" * (SENTENCE_CHARS - 1) + "…"


def test_the_sentence_goes_before_the_text_to_embed() -> None:
    assert with_context("Situated.", "chunk text") == "Situated.\nchunk text"
    assert with_context(None, "chunk text") == "chunk text"


# --- identity and settings ------------------------------------------------------------------------


def test_the_context_setting_is_part_of_the_model_identity() -> None:
    raw = model_identity(make())
    situated = model_identity(make(**ON))
    other_model = model_identity(make(**{**ON, "contextual_chunking_model": "big-chat"}))
    assert raw == "local:all-MiniLM-L6-v2+windows"
    assert situated == "local:all-MiniLM-L6-v2+windows+context:small-chat"
    assert len({raw, situated, other_model}) == 3
    # a question is embedded raw: it compares with situated and raw chunks of the same embedder alike
    assert query_space(raw) == query_space(situated) == query_space(other_model) == raw


def test_enabled_needs_a_base_url_and_a_model() -> None:
    with pytest.raises(ConfigError, match="CONTEXTUAL_CHUNKING_BASE_URL"):
        make(contextual_chunking_enabled=True, contextual_chunking_model="m")
    with pytest.raises(ConfigError, match="CONTEXTUAL_CHUNKING_MODEL"):
        make(contextual_chunking_enabled=True, contextual_chunking_base_url="http://x/v1")


def test_the_api_key_never_shows_in_the_settings() -> None:
    settings = make(**ON, contextual_chunking_api_key="sk-chat-SECRET")
    assert "sk-chat-SECRET" not in repr(settings) and "sk-chat-SECRET" not in str(settings)
    assert settings.contextual_chunking_api_key is not None
    assert settings.contextual_chunking_api_key.get_secret_value() == "sk-chat-SECRET"


# --- the per-document loop (the fake chat endpoint in-process) ----------------------------------


def contextualizer(fake: FakeProvider, *, concurrency: int = 2, budget_s: float = 30.0) -> Contextualizer:
    client = ChatClient(
        base_url=fake.url + "/v1",
        model="small-chat",
        api_key="sk-chat",
        timeout_s=5.0,
        transport=fake.transport(),
    )
    return Contextualizer(client, concurrency=concurrency, budget_s=budget_s)


async def test_each_chunk_gets_its_own_sentence(mock_provider: FakeProvider) -> None:
    situate = contextualizer(mock_provider)
    texts = [f"chunk number {i}" for i in range(6)]
    try:
        done = await situate.situate("manual.pdf", texts, [4, 1])
    finally:
        await situate.aclose()
    assert done.situated == 2 and done.raw == 0 and done.asked == 2
    asked = {chat_passage(r) for r in mock_provider.requests}
    assert asked == {"chunk number 4", "chunk number 1"}
    first = mock_provider.requests[0]
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-chat"
    assert first.json["model"] == "small-chat" and first.json["max_tokens"] > 0
    by_passage = {chat_passage(r): r for r in mock_provider.requests}
    assert done.sentences[0] == clean_sentence(mock_provider.chat_text(by_passage["chunk number 4"]))


async def test_a_failing_endpoint_stops_being_asked(mock_provider: FakeProvider) -> None:
    mock_provider.handler = lambda request: Reply(status=400)
    situate = contextualizer(mock_provider, concurrency=1)
    try:
        done = await situate.situate("manual.pdf", [f"c{i}" for i in range(50)])
    finally:
        await situate.aclose()
    assert done.situated == 0 and done.asked == STOP_AFTER_FAILURES
    assert done.failures == {"HTTP 400": STOP_AFTER_FAILURES}
    assert done.stopped == 50 - STOP_AFTER_FAILURES
    assert "embedded raw" in done.describe()


async def test_past_the_budget_the_rest_stays_raw(mock_provider: FakeProvider) -> None:
    mock_provider.delay = 3.0  # under the request timeout (5 s), far over the budget
    situate = contextualizer(mock_provider, concurrency=2, budget_s=0.2)
    try:
        done = await situate.situate("manual.pdf", [f"c{i}" for i in range(40)])
    finally:
        await situate.aclose()
    assert done.situated == 0 and done.over_budget == 40
    assert "40 past the time budget" in done.describe()


async def test_garbage_and_unreadable_replies_count_as_failures(mock_provider: FakeProvider) -> None:
    mock_provider.script(
        Reply(json={"choices": [{"message": {"content": "\x00\x01"}}]}),
        Reply(body=b"not json at all"),
        Reply(json={"choices": []}),
        Reply(body=b"{" + b" " * 70_000 + b"}"),
    )
    situate = contextualizer(mock_provider, concurrency=1)
    try:
        done = await situate.situate("manual.pdf", ["a1", "a2", "a3", "a4", "a5"])
    finally:
        await situate.aclose()
    assert done.failures == {"garbage reply": 1, "unreadable reply": 2, "reply too large": 1}
    assert done.situated == 1  # the fifth, answered by the default
