"""Every V2 tuning knob with its default, in one model (the service's Settings will carry one).

Defaults are the literature's or conservative ones (RRF k = 60, BM25 k1 = 1.2 and b = 0.75, a
25-item rerank window, a 1.5 s remote timeout); fusion weights, the exact boost, the minimum
evidence score, feature weights and refusal thresholds are provisional until the quality benchmark
of issue #8 chooses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.ingest.v2.boilerplate import RepeatedBlockPolicy
from app.ingest.v2.chunker import ChunkerConfig
from app.ingest.v2.entities import EntityConfig
from app.search.v2.analysis import QueryConfig
from app.search.v2.fusion import FusionConfig
from app.search.v2.refusal import RefusalPolicy
from app.search.v2.rerank import DEFAULT_WINDOW, MAX_WINDOW, FeatureWeights
from app.search.v2.rerank_http import DEFAULT_TIMEOUT


class BM25Config(BaseModel):
    """Okapi BM25 parameters of the lexical channel."""

    model_config = ConfigDict(frozen=True)

    k1: float = Field(1.2, ge=0)
    b: float = Field(0.75, ge=0, le=1)


class RerankConfig(BaseModel):
    """Which reranker runs over how large a window."""

    model_config = ConfigDict(frozen=True)

    backend: Literal["features", "http", "onnx"] = "features"
    window: int = Field(DEFAULT_WINDOW, ge=1, le=MAX_WINDOW)
    url: str | None = None
    flavour: Literal["cohere", "jina", "tei"] = "cohere"
    model: str | None = None
    timeout_seconds: float = Field(DEFAULT_TIMEOUT, gt=0, le=30)
    onnx_folder: Path | None = None
    onnx_max_tokens: int = Field(512, ge=16, le=8192)
    weights: FeatureWeights = Field(default_factory=FeatureWeights)


class V2Tuning(BaseModel):
    """All V2 knobs: index side (entities, chunking, boilerplate) and query side."""

    model_config = ConfigDict(frozen=True)

    entities: EntityConfig = Field(default_factory=EntityConfig)
    chunking: ChunkerConfig = Field(default_factory=ChunkerConfig)
    boilerplate: RepeatedBlockPolicy = Field(default_factory=RepeatedBlockPolicy)
    query: QueryConfig = Field(default_factory=QueryConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    refusal: RefusalPolicy = Field(default_factory=RefusalPolicy)
    # candidates each channel returns before fusion
    channel_limit: int = Field(50, ge=1, le=500)
