"""Embedding providers behind one `Embedder` protocol, chosen from Settings by `build_embedder`.

Embedder (protocol)
└── BaseEmbedder          empty input, vector checks, dimension learning, query LRU + single flight
    ├── LocalEmbedder     all-MiniLM-L6-v2 int8 ONNX, in-process (the default), or an opt-in
    │                     multilingual model (multilingual-e5-small, multilingual USE)
    └── HttpEmbedder      shared client, batching, bounded concurrency, retries
        ├── OpenAIEmbedder     (and any OpenAI-compatible server)
        │   └── AzureEmbedder
        ├── OllamaEmbedder
        └── TEIEmbedder
"""

from __future__ import annotations

from typing import Any

import httpx

from app.clients.embeddings.base import (
    BaseEmbedder,
    Embedder,
    KnowsStoredDimensions,
    QueryCache,
    WarmsUp,
    batch_progress,
    plan_batches,
    reporting_batches,
)
from app.clients.embeddings.http import (
    OPENAI_DEFAULT_BASE_URL,
    AzureEmbedder,
    HttpEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    TEIEmbedder,
)
from app.clients.embeddings.identity import model_identity, query_space, vector_revision
from app.clients.embeddings.local import LocalEmbedder, MiniLMRuntime
from app.clients.http import build_http_client, parse_retry_after
from app.clients.redaction import redactor_for
from app.config import LOCAL_DIMENSIONS, Settings
from app.errors import ConfigError

__all__ = [
    "LOCAL_DIMENSIONS",
    "AzureEmbedder",
    "BaseEmbedder",
    "Embedder",
    "HttpEmbedder",
    "KnowsStoredDimensions",
    "LocalEmbedder",
    "MiniLMRuntime",
    "OllamaEmbedder",
    "OpenAIEmbedder",
    "QueryCache",
    "TEIEmbedder",
    "WarmsUp",
    "batch_progress",
    "build_embedder",
    "build_http_client",
    "model_identity",
    "parse_retry_after",
    "plan_batches",
    "query_space",
    "reporting_batches",
    "vector_revision",
]


def build_embedder(settings: Settings, *, http_client: httpx.AsyncClient | None = None) -> Embedder:
    """The embedder the settings ask for; HTTP providers use `http_client` when given (not closed by us)."""
    provider = settings.provider
    if provider == "local":
        return LocalEmbedder(
            model=settings.model,
            dimensions=settings.embeddings_dimensions,
            threads=settings.local_embeddings_threads,
            batch_size=settings.embedding_batch_size,
            batch_max_chars=settings.embedding_batch_max_chars,
            cache_size=settings.query_embedding_cache_size,
        )
    common: dict[str, Any] = {
        "model": settings.model,
        "dimensions": settings.embeddings_dimensions,
        "client": http_client,
        "timeout_s": settings.embedding_timeout_s,
        "max_retries": settings.embedding_max_retries,
        "batch_size": settings.embedding_batch_size,
        "batch_max_chars": settings.embedding_batch_max_chars,
        "concurrency": settings.embedding_concurrency,
        "cache_size": settings.query_embedding_cache_size,
        "breaker_failures": settings.embedding_breaker_failures,
        "breaker_reset_s": settings.embedding_breaker_reset_s,
        # PII_REDACT=embeddings: what a remote provider receives (the local model sends nothing)
        "redact": redactor_for("embeddings", settings.pii_redact),
    }
    if provider == "openai":
        # rag_api applies RAG_OPENAI_PROXY to OpenAI only; a passed-in client brings its own transport.
        return OpenAIEmbedder(
            base_url=settings.openai_base_url or OPENAI_DEFAULT_BASE_URL,
            api_key=settings.openai_api_key,
            proxy=settings.openai_proxy,
            **common,
        )
    if provider == "azure":
        # Settings refuses azure without both; the assert only narrows the types
        assert settings.azure_endpoint and settings.azure_api_key
        return AzureEmbedder(
            endpoint=settings.azure_endpoint,
            api_key=settings.azure_api_key,
            api_version=settings.azure_api_version,
            **common,
        )
    if provider == "ollama":
        return OllamaEmbedder(base_url=settings.ollama_base_url, **common)
    if provider == "huggingfacetei":
        # rag_api passes the TEI server's URL as EMBEDDINGS_MODEL (Settings checks it is one)
        common.pop("model")
        return TEIEmbedder(url=settings.model, token=settings.hf_token, **common)
    raise ConfigError(f"Unknown EMBEDDINGS_PROVIDER: {provider}")
