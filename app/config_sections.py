"""The sections of Settings: each service receives the knobs it reads, typed and frozen.

`Settings` (app/config.py) holds every variable; the composition root (app/services.py) cuts it
into these sections with their `from_settings`, so a constructor says which knobs it reads and a
test builds one with the values it cares about, without an environment. Each `from_settings` is
the one place where a section's fields meet the names of Settings (and of its variables).

Sections hold values, never clients: this module imports nothing of the application but the
settings themselves, so every layer can import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import SecretStr

from app.config import Settings


@dataclass(frozen=True)
class SearchSettings:
    """What V1 search reads: the planner's rules (the first seven fields) and the service's own."""

    exact_max_rows: int = 4000
    # visible rows up to which the exact scan runs on vectors in the service's memory; 0: never
    memory_max_rows: int = 0
    memory_max_bytes: int = 512 * 2**20  # the vector cache's budget (a larger scope is never held)
    cost_factor: float = 20.0
    ef_search: int = 100
    max_scan_tuples: int = 50_000
    legacy_unowned: bool = False
    # the service's: its wait for a connection and for its statement, the relevance cut, and the
    # overlap `/documents/{id}/context` removes between neighbouring chunks
    query_timeout_s: float = 10.0
    distance_threshold: float | None = None
    context_overlap: int = 100

    @classmethod
    def from_settings(cls, settings: Settings) -> SearchSettings:
        """EXACT_SCAN_MAX_ROWS, VECTOR_CACHE_*, HNSW_* (the walk), QUERY_TIMEOUT_MS and their kin."""
        return cls(
            exact_max_rows=settings.exact_scan_max_rows,
            memory_max_rows=settings.vector_cache_max_rows if settings.vector_cache_mb > 0 else 0,
            memory_max_bytes=settings.vector_cache_mb * 2**20,
            cost_factor=settings.hnsw_cost_factor,
            ef_search=settings.hnsw_ef_search,
            max_scan_tuples=settings.hnsw_max_scan_tuples,
            legacy_unowned=settings.legacy_unowned_readable,
            query_timeout_s=settings.query_timeout_ms / 1000,
            distance_threshold=settings.rag_distance_threshold,
            context_overlap=settings.chunk_overlap,
        )


@dataclass(frozen=True)
class VectorIndexSettings:
    """Which HNSW indexes the maintenance builds, and with what parameters."""

    kind: Literal["hnsw", "none"] = "hnsw"
    m: int = 24
    ef_construction: int = 128
    build_memory: str = "1GB"  # maintenance_work_mem of the building connection
    namespace_min_rows: int = 50_000
    namespace_max: int = 32

    @property
    def enabled(self) -> bool:
        """False when VECTOR_INDEX=none: exact scans only, no index is built."""
        return self.kind != "none"

    @classmethod
    def from_settings(cls, settings: Settings) -> VectorIndexSettings:
        """VECTOR_INDEX and HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_BUILD_MEMORY, HNSW_NAMESPACE_*."""
        return cls(
            kind=settings.vector_index,
            m=settings.hnsw_m,
            ef_construction=settings.hnsw_ef_construction,
            build_memory=settings.hnsw_build_memory,
            namespace_min_rows=settings.hnsw_namespace_min_rows,
            namespace_max=settings.hnsw_namespace_max,
        )


@dataclass(frozen=True)
class JobSettings:
    """The job queue's worker and retry policy."""

    concurrency: int = 4  # 0: this process runs no jobs
    retry_max: int = 3
    retry_base_ms: int = 5000
    retry_max_ms: int = 300_000
    job_timeout_s: float = 600.0  # without progress
    stale_timeout_s: int = 1800

    @classmethod
    def from_settings(cls, settings: Settings) -> JobSettings:
        """INDEXER_CONCURRENCY and INDEXER_RETRY_*, INDEXER_JOB_TIMEOUT_MS, INDEXER_STALE_TIMEOUT."""
        return cls(
            concurrency=settings.indexer_concurrency,
            retry_max=settings.indexer_retry_max,
            retry_base_ms=settings.indexer_retry_base_ms,
            retry_max_ms=settings.indexer_retry_max_ms,
            job_timeout_s=settings.indexer_job_timeout_ms / 1000,
            stale_timeout_s=settings.indexer_stale_timeout_s,
        )


@dataclass(frozen=True)
class AccessSettings:
    """The rules every door's scope follows (app/access/scope.py)."""

    entity_pattern: re.Pattern[str]  # ENTITY_ID_PATTERN, compiled
    legacy_unowned: bool = False
    delete_any_owner: bool = False  # DELETE_SCOPE=caller

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessSettings:
        """ENTITY_ID_PATTERN, LEGACY_UNOWNED_READABLE and DELETE_SCOPE."""
        return cls(
            entity_pattern=settings.entity_id_regex,
            legacy_unowned=settings.legacy_unowned_readable,
            delete_any_owner=settings.delete_scope == "caller",
        )


@dataclass(frozen=True)
class AllowlistSettings:
    """The re-check of file ids against LibreChat's catalogue (app/access/allowlist.py)."""

    verify: Literal["off", "mongo"] = "off"
    # the URI may hold a password: never in a repr
    mongo_uri: str | None = field(default=None, repr=False)
    mongo_db: str | None = None
    timeout_ms: int = 2000
    cache_ttl_s: float = 30.0
    cache_size: int = 100_000
    fail_open: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> AllowlistSettings:
        """ALLOWLIST_VERIFY, LIBRECHAT_MONGO_* and ALLOWLIST_CACHE_*, ALLOWLIST_FAIL_OPEN."""
        return cls(
            verify=settings.allowlist_verify,
            mongo_uri=settings.librechat_mongo_uri,
            mongo_db=settings.librechat_mongo_db,
            timeout_ms=settings.librechat_mongo_timeout_ms,
            cache_ttl_s=settings.allowlist_cache_ttl_s,
            cache_size=settings.allowlist_cache_size,
            fail_open=settings.allowlist_fail_open,
        )


@dataclass(frozen=True)
class McpSettings:
    """Who may call the MCP server at `/mcp`, and how many sessions it keeps (app/mcp/)."""

    jwt_secret: str | None = field(default=None, repr=False)
    jwt_audience: str | None = None
    admin_ids: frozenset[str] = frozenset()
    api_keys: tuple[str, ...] = ()  # MCP_API_KEYS entries, as app/mcp/auth.py parses them
    gateway_key_sha256: str | None = None
    gateway_user_header: str = "X-LibreChat-User-Id"
    session_ttl_s: float = 1800.0
    session_max: int = 100
    max_body_bytes: int = 512 * 1024
    # no server-side sessions: each request stands alone (MCP_STATELESS; app/runtime/workers.py
    # turns "auto" on for a worker of several)
    stateless: bool = False

    @property
    def auth_enabled(self) -> bool:
        """True when JWT_SECRET is set: LibreChat's tokens are accepted (and needed, unless a key is)."""
        return bool(self.jwt_secret)

    @classmethod
    def from_settings(cls, settings: Settings) -> McpSettings:
        """JWT_SECRET, RAG_JWT_AUDIENCE, RAG_ADMIN_USER_IDS, MCP_* and MAX_JSON_BODY_BYTES ("auto" of
        MCP_STATELESS is off here: a worker of several has it resolved to on already)."""
        return cls(
            jwt_secret=settings.jwt_secret,
            jwt_audience=settings.jwt_audience,
            admin_ids=frozenset(settings.admin_user_ids),
            api_keys=tuple(settings.mcp_api_keys),
            gateway_key_sha256=settings.mcp_gateway_key_sha256,
            gateway_user_header=settings.mcp_gateway_user_header,
            session_ttl_s=settings.mcp_session_ttl_seconds,
            session_max=settings.mcp_session_max,
            max_body_bytes=settings.max_json_body_bytes,
            stateless=settings.mcp_stateless is True,
        )


@dataclass(frozen=True)
class ContextualSettings:
    """Contextual chunking's chat model and what it may cost (app/ingest/contextual.py)."""

    enabled: bool = False
    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    timeout_ms: int = 10_000
    concurrency: int = 4
    budget_s: float = 120.0
    redact_pii: bool = False  # PII_REDACT names "contextual"

    @classmethod
    def from_settings(cls, settings: Settings) -> ContextualSettings:
        """CONTEXTUAL_CHUNKING_*."""
        return cls(
            enabled=settings.contextual_chunking_enabled,
            base_url=settings.contextual_chunking_base_url,
            model=settings.contextual_chunking_model,
            api_key=settings.contextual_chunking_api_key,
            timeout_ms=settings.contextual_chunking_timeout_ms,
            concurrency=settings.contextual_chunking_concurrency,
            budget_s=settings.contextual_chunking_budget_s,
            redact_pii="contextual" in settings.pii_redact,
        )


@dataclass(frozen=True)
class BlobSettings:
    """Where originals are kept: a local folder, or an S3 bucket when `bucket` is set."""

    folder: Path
    bucket: str | None = None
    prefix: str = "ragoverlay/originals/"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    force_path_style: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> BlobSettings:
        """BLOB_DIR (or DATA_DIR/blobs) and S3_*."""
        return cls(
            folder=settings.blob_folder,
            bucket=settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
            session_token=settings.s3_session_token,
            force_path_style=settings.s3_force_path_style,
        )
