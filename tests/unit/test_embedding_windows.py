"""Texts past a model's input limit: cut into windows, embedded in the same call, pooled (no sockets)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.clients.embeddings import OllamaEmbedder, OpenAIEmbedder, vector_revision
from app.clients.embeddings.windows import (
    OPENAI_MAX_INPUT_TOKENS,
    byte_splitter,
    byte_windows,
    plan_windows,
    pool_plan,
    token_splitter,
)
from app.text.tokens import SimpleTokenCounter, pool_windows
from tests.fixtures.fake_providers import FakeProvider

LIMIT = OPENAI_MAX_INPUT_TOKENS["text-embedding-3-small"]


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


@pytest.mark.parametrize("unit", ["word ", "é", "€uro ", "𝄞", "x"])
def test_byte_windows_cover_the_text_and_fit(unit: str) -> None:
    text = unit * 5000
    pieces = byte_windows(text, 1000)
    assert "".join(pieces) == text  # nothing lost, nothing repeated
    assert all(0 < utf8(p) <= 1000 for p in pieces)
    if unit == "word ":
        assert all(p.endswith(" ") for p in pieces[:-1])  # cut at whitespace, words stay whole


def test_byte_splitter_leaves_texts_that_fit_alone() -> None:
    split = byte_splitter(LIMIT)
    assert split("short") is None
    assert split("a" * LIMIT) is None  # exactly at the limit: whole
    windows = split("word " * 4000)
    assert windows is not None and len(windows) == 3
    assert [w for _, w in windows] == [float(utf8(p)) for p, _ in windows]
    # four-byte characters: 2,100 of them are 8,400 bytes, so even a short text can need two pieces
    assert split("𝄞" * 2100) is not None and split("𝄞" * 2000) is None


def test_plan_keeps_order_and_pools_only_the_long_ones() -> None:
    counter = SimpleTokenCounter(special_tokens=2)
    split = token_splitter(counter, window=10)
    texts = ["one two three", " ".join(f"w{i}" for i in range(20)), "four"]
    plan = plan_windows(texts, split)
    assert plan.windowed and plan.pieces[0] == "one two three" and plan.pieces[-1] == "four"
    assert plan.spans == [(0, 1), (1, 4), (4, 5)]  # 20 tokens in windows of 8: 8 + 8 + 4
    assert plan.weights[1] == [8.0, 8.0, 4.0]
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(5, 6)).astype(np.float32)
    pooled = pool_plan(vectors, plan)
    assert pooled.shape == (3, 6)
    assert np.array_equal(pooled[0], vectors[0]) and np.array_equal(pooled[2], vectors[4])  # untouched
    np.testing.assert_allclose(pooled[1], pool_windows(vectors[1:4], [8, 8, 4]), atol=1e-7)
    # nothing long: the very same array comes back
    short = plan_windows(["a", "b"], split)
    assert not short.windowed
    same = vectors[:2]
    assert pool_plan(same, short) is same


def _openai(fake: FakeProvider, **kwargs: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        model="text-embedding-3-small",
        base_url=fake.url + "/v1",
        api_key="sk-test",
        transport=fake.transport(),
        **kwargs,
    )


async def test_openai_long_texts_travel_as_windows_in_one_request(mock_provider: FakeProvider) -> None:
    embedder = _openai(mock_provider)
    long_text = "The quarterly report covers revenue, costs and outlook. " * 400  # ~22,400 bytes
    texts = ["short one", long_text, "short two"]
    try:
        vectors = await embedder.embed_documents(texts)
    finally:
        await embedder.aclose()
    assert len(mock_provider.requests) == 1  # one request carries the short texts and every window
    sent = mock_provider.texts_of(mock_provider.requests[0])
    windows = byte_windows(long_text, LIMIT)
    assert sent == ["short one", *windows, "short two"] and len(windows) == 3
    assert all(utf8(piece) <= LIMIT for piece in sent)
    fake = np.asarray([FakeProvider.vector_for(t) for t in sent], dtype=np.float32)
    assert np.array_equal(vectors[0], fake[0]) and np.array_equal(vectors[2], fake[-1])
    expected = pool_windows(fake[1:-1], [float(utf8(w)) for w in windows])
    np.testing.assert_allclose(vectors[1], expected, atol=1e-6)


async def test_openai_long_query_is_pooled_too(mock_provider: FakeProvider) -> None:
    embedder = _openai(mock_provider)
    query = "budget " * 3000
    try:
        vector = await embedder.embed_query(query)
    finally:
        await embedder.aclose()
    sent = mock_provider.texts_of(mock_provider.requests[0])
    assert len(mock_provider.requests) == 1 and len(sent) == 3 and "".join(sent) == query
    fake = np.asarray([FakeProvider.vector_for(t) for t in sent], dtype=np.float32)
    np.testing.assert_allclose(vector, pool_windows(fake, [float(utf8(s)) for s in sent]), atol=1e-6)


async def test_unknown_limits_send_texts_whole(mock_provider: FakeProvider) -> None:
    # Ollama (and TEI, and OpenAI-compatible servers with other models) truncate on their side
    embedder = OllamaEmbedder(
        model="nomic-embed-text", base_url=mock_provider.url, transport=mock_provider.transport()
    )
    long_text = "word " * 5000
    try:
        await embedder.embed_documents([long_text])
    finally:
        await embedder.aclose()
    assert mock_provider.texts_of(mock_provider.requests[0]) == [long_text]


def test_only_local_vectors_change_identity() -> None:
    assert vector_revision("local") and not vector_revision("openai")
