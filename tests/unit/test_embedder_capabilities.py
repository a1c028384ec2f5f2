"""What each embedder declares beyond the core protocol: checked by type, never by attribute name."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.clients.embeddings import Embedder, KnowsStoredDimensions, LocalEmbedder, WarmsUp, build_embedder
from app.config import load_settings


class Minimal:
    """An embedder with the core protocol only (as a test double or a plug-in would be)."""

    provider = "minimal"
    model = "m"
    dimensions = 2

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 2), dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        return np.ones(2, dtype=np.float32)

    async def aclose(self) -> None:
        return None


async def test_each_embedder_declares_its_optional_capabilities() -> None:
    local = LocalEmbedder(threads=1)
    try:
        assert isinstance(local, Embedder) and isinstance(local, WarmsUp)
        assert isinstance(local, KnowsStoredDimensions)
    finally:
        await local.aclose()
    hosted = build_embedder(load_settings(_env_file=None, openai_api_key="sk-test"))
    try:
        assert hosted.provider == "openai"
        # it learns the stored vectors' dimension, and has nothing to load
        assert isinstance(hosted, KnowsStoredDimensions) and not isinstance(hosted, WarmsUp)
    finally:
        await hosted.aclose()
    minimal = Minimal()
    assert isinstance(minimal, Embedder)
    assert not isinstance(minimal, KnowsStoredDimensions) and not isinstance(minimal, WarmsUp)
