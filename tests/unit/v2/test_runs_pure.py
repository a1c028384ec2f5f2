"""The pure parts of V2 index runs: the V1 text rebuild, the character counter, the index profile and its
version, and embedding texts longer than the window (pooled, never cut)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from app.config import load_settings
from app.evidence.index.embedding import embed_texts
from app.evidence.index.profile import CONTEXT_RESERVE_TOKENS, CharCounter, build_profile
from app.evidence.index.sources import clean_document, rebuild_v1_text
from app.ingest.contextual import SENTENCE_CHARS
from app.ingest.types import Block, LoadedDocument
from app.text.tokens import SimpleTokenCounter


def test_v1_text_is_rebuilt_in_order_without_overlaps_and_with_its_pages() -> None:
    first = "The boiler K 40 was serviced in March; its pressure was 1.5 bar afterwards."
    chunks = [(first[:50], 0), (first[40:], 0), ("Page three only.", 2)]
    # chunk 2 repeats first[40:50] (10 characters): removed; page 2 (index 1) has no chunk: empty
    assert rebuild_v1_text(chunks, max_overlap=100) == f"{first}\f\fPage three only."
    # chunks without pages are joined by a newline when they do not overlap
    assert (
        rebuild_v1_text([("alpha beta gamma", None), ("delta", None)], max_overlap=100)
        == "alpha beta gamma\ndelta"
    )
    assert rebuild_v1_text([], max_overlap=100) == ""


def test_the_character_counter_counts_characters() -> None:
    counter = CharCounter()
    assert counter.count("K 28 ä") == 6 and counter.spans("ab") == [(0, 1), (1, 2)]
    assert counter.special_tokens == 0


def test_the_profile_follows_the_provider_and_its_version_follows_the_settings() -> None:
    http = load_settings(
        _env_file=None, embeddings_provider="ollama", v2={"index": {"http_window_chars": 900}}
    )
    profile = build_profile(http)
    assert profile.counter_name == "characters" and profile.window == 900
    assert profile.chunking.chunk_tokens == 900 and profile.chunking.overlap_tokens == 112
    assert profile.embedding_model == "ollama:nomic-embed-text"
    other = build_profile(
        load_settings(_env_file=None, embeddings_provider="ollama", v2={"index": {"http_window_chars": 800}})
    )
    assert other.extractor_version != profile.extractor_version  # new chunks: nothing is linked
    same = build_profile(
        load_settings(_env_file=None, embeddings_provider="ollama", v2={"index": {"http_window_chars": 900}})
    )
    assert same.extractor_version == profile.extractor_version
    counted = build_profile(load_settings(_env_file=None), SimpleTokenCounter(), 64)
    assert (
        counted.window == 64 and counted.chunking.chunk_tokens == 64 and counted.chunking.overlap_tokens == 32
    )


def test_contextual_chunking_keeps_room_for_its_sentence_and_changes_the_profile() -> None:
    common = {"_env_file": None, "embeddings_provider": "ollama", "v2": {"index": {"http_window_chars": 900}}}
    situated = load_settings(
        **common,
        contextual_chunking_enabled=True,
        contextual_chunking_base_url="http://chat.test/v1",
        contextual_chunking_model="small-chat",
    )
    raw, profile = build_profile(load_settings(**common)), build_profile(situated)
    # a sentence of at most SENTENCE_CHARS and its line break still fit the window in front of a chunk
    assert profile.chunking.chunk_tokens == 900 - (SENTENCE_CHARS + 1) and profile.window == 900
    assert profile.chunking.overlap_tokens <= profile.chunking.chunk_tokens // 2
    assert profile.extractor_version != raw.extractor_version
    assert profile.embedding_model == "ollama:nomic-embed-text+context:small-chat"
    local = build_profile(
        load_settings(
            _env_file=None,
            contextual_chunking_enabled=True,
            contextual_chunking_base_url="http://chat.test/v1",
            contextual_chunking_model="small-chat",
        ),
        SimpleTokenCounter(),
        256,
    )
    assert local.chunking.chunk_tokens == 256 - CONTEXT_RESERVE_TOKENS


def test_documents_lose_nul_and_lone_surrogates_before_chunking() -> None:
    document = LoadedDocument(
        sections=[],
        blocks=[Block("table", "a\x00b", 0, rows=[["x\ud800y"]], headers=["h\x00"], title="t\x00")],
        kind="html",
        content_type="text/html",
        properties={"k": "v\x00"},
    )
    clean = clean_document(document)
    (block,) = clean.blocks
    assert (block.text, block.rows, block.headers, block.title) == ("ab", [["xy"]], ["h"], "t")
    assert clean.properties == {"k": "v"}


class RecordingEmbedder:
    """Vectors from text length: enough to see which pieces were embedded (no model, no sockets)."""

    provider = "test"
    model = "test"
    dimensions = 2

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.extend(texts)
        return np.array([[1.0, float(len(t.split()))] for t in texts], dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


async def test_a_text_longer_than_the_window_is_pooled_and_every_word_reaches_the_model() -> None:
    profile = build_profile(load_settings(_env_file=None), SimpleTokenCounter(), 16)
    embedder = RecordingEmbedder()
    short = "one two three"
    long = " ".join(f"w{i}" for i in range(40))  # 40 tokens, window 16: three pieces (16, 16, 8)
    vectors = await embed_texts(embedder, profile, [short, long])
    assert embedder.seen[0] == short
    pieces = embedder.seen[1:]
    assert [len(p.split()) for p in pieces] == [16, 16, 8]
    assert " ".join(pieces) == long  # nothing dropped, nothing repeated
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-5 for v in vectors)
    # the pooled vector is the token-weighted mean of the pieces' unit vectors, normalised
    units = [np.array([1.0, n]) / np.hypot(1.0, n) for n in (16, 16, 8)]
    expected = (units[0] * 16 + units[1] * 16 + units[2] * 8) / 40
    assert vectors[1] == pytest.approx(expected / np.linalg.norm(expected), abs=1e-5)


def test_v1_chunks_read_out_of_order_are_chained_by_their_overlaps() -> None:
    # rag_api's rows come back in physical order: a later chunk may be read before an earlier one
    first = "The boiler K 40 was serviced in March. The technician replaced the valve and left."
    pieces = [(first[60:], 0), ("Page two of the report.", 1), (first[:70], 0)]  # 10 characters shared
    assert rebuild_v1_text(pieces, max_overlap=100) == f"{first}\fPage two of the report."
    # chunks that share nothing keep the order they were read in
    assert rebuild_v1_text([("zeta", None), ("alpha", None)], max_overlap=100) == "zeta\nalpha"
