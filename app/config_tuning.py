"""The knobs no operator needs: tuned against a benchmark, bounds sized for hostile input, or
switches whose default fits a LibreChat deployment (a rate limit, the pool's size, a key prefix).

`Settings` (app/config.py) inherits them, so every one is still an environment variable read as
before; declaring them here is their tier. docs/tuning.md documents them (default, what each does,
how it was chosen) apart from the operator's table in docs/configuration.md, and
`tests/unit/test_config_docs.py` holds both pages to this split. Evidence search's knobs
(`RAG_V2__*`) live in app/evidence/settings.py, which marks the few an operator sets.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

# The shape of a LibreChat Agent id, the only thing LibreChat sends as `entity_id` (CONTRACT.md section 3).
DEFAULT_ENTITY_ID_PATTERN = r"^agent_[A-Za-z0-9_-]{1,100}$"


def _env(*names: str) -> AliasChoices:
    """Accept any of `names` (first wins) as the environment variable for a field."""
    return AliasChoices(*names)


def split_csv(value: object) -> list[str]:
    """Parse a comma-separated env value into a list of non-empty, stripped strings."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


# a list read from one comma-separated variable (pydantic-settings would expect JSON)
CsvList = Annotated[list[str], NoDecode]


class TuningKnobs(BaseSettings):
    """Settings whose defaults fit a LibreChat deployment (docs/tuning.md); built only as `Settings`."""

    # --- requests (app/runtime/request_timeouts.py, app/safe_text.py), who may call and read what ---------
    cors_origins: CsvList = Field(default_factory=lambda: ["*"], validation_alias=_env("RAG_CORS_ORIGINS"))
    jwt_audience: str | None = Field(None, validation_alias=_env("RAG_JWT_AUDIENCE"))
    entity_id_pattern: str = Field(DEFAULT_ENTITY_ID_PATTERN, validation_alias=_env("ENTITY_ID_PATTERN"))
    legacy_unowned_readable: bool = Field(False, validation_alias=_env("LEGACY_UNOWNED_READABLE"))
    # requests whose headers or body stall are closed with 408 (app/runtime/request_timeouts.py)
    request_header_timeout_s: float = Field(
        10.0, gt=0, le=3600, validation_alias=_env("REQUEST_HEADER_TIMEOUT_S")
    )
    request_body_timeout_s: float = Field(
        30.0, gt=0, le=3600, validation_alias=_env("REQUEST_BODY_TIMEOUT_S")
    )
    # a /query_multiple body needs ~260 KB for 1,000 ids of 200 chars and a 20,000-char query
    max_json_body_bytes: int = Field(512 * 1024, ge=1024, validation_alias=_env("MAX_JSON_BODY_BYTES"))
    # requests a minute per client (app/api/ratelimit.py); 0: no limit
    search_rate_per_minute: int = Field(0, ge=0, validation_alias=_env("SEARCH_RATE_PER_MINUTE"))
    embed_rate_per_minute: int = Field(0, ge=0, validation_alias=_env("EMBED_RATE_PER_MINUTE"))
    reindex_rate_per_minute: int = Field(10, ge=0, validation_alias=_env("REINDEX_RATE_PER_MINUTE"))

    # --- database: embedded or not, the pool's size and every statement's limits --------------------------
    embedded_postgres: Literal["auto", "true", "false"] = Field(
        "auto", validation_alias=_env("EMBEDDED_POSTGRES")
    )
    db_pool_min_size: int = Field(1, ge=0, validation_alias=_env("DB_POOL_MIN_SIZE"))
    db_pool_max_size: int = Field(30, ge=1, validation_alias=_env("DB_POOL_MAX_SIZE"))
    db_statement_timeout_ms: int = Field(30_000, ge=100, validation_alias=_env("DB_STATEMENT_TIMEOUT_MS"))
    query_timeout_ms: int = Field(10_000, ge=50, validation_alias=_env("QUERY_TIMEOUT_MS"))
    db_check_interval_s: float = Field(5.0, gt=0, le=3600, validation_alias=_env("DB_CHECK_INTERVAL_S"))
    postgres_use_unix_socket: bool = Field(False, validation_alias=_env("POSTGRES_USE_UNIX_SOCKET"))
    # read standbys (DATABASE_READ_URLS, app/store/standby.py): how long a read waits for a standby
    # to replay the primary's last write, and how long a failed or promoted one is left alone
    read_standby_wait_ms: int = Field(100, ge=0, le=10_000, validation_alias=_env("READ_STANDBY_WAIT_MS"))
    read_standby_retry_s: float = Field(5.0, gt=0, le=3600, validation_alias=_env("READ_STANDBY_RETRY_S"))

    # --- uploads: chunks and parsing limits (app/ingest/limits.py; parsed in a worker process) ---
    max_chunks_per_file: int = Field(50_000, ge=1, validation_alias=_env("MAX_CHUNKS_PER_FILE"))
    ingest_concurrency: int = Field(2, ge=1, validation_alias=_env("INGEST_CONCURRENCY"))
    # time scales with the work: a base, a share per page read, and a limit on going without progress
    parse_timeout_s: float = Field(300.0, gt=0, le=86_400, validation_alias=_env("PARSE_TIMEOUT_S"))
    parse_seconds_per_page: float = Field(2.0, ge=0, le=3600, validation_alias=_env("PARSE_SECONDS_PER_PAGE"))
    parse_stall_timeout_s: float = Field(
        120.0, gt=0, le=86_400, validation_alias=_env("PARSE_STALL_TIMEOUT_S")
    )
    parse_memory_mb: int = Field(1024, ge=128, validation_alias=_env("PARSE_MEMORY_MB"))
    parse_max_unzipped_bytes: int = Field(
        256 * 1024 * 1024, ge=1024 * 1024, validation_alias=_env("PARSE_MAX_UNZIPPED_BYTES")
    )
    parse_max_cells: int = Field(2_000_000, ge=1, validation_alias=_env("PARSE_MAX_CELLS"))
    parse_max_shared_strings: int = Field(1_000_000, ge=1, validation_alias=_env("PARSE_MAX_SHARED_STRINGS"))
    parse_max_elements: int = Field(2_000_000, ge=1, validation_alias=_env("PARSE_MAX_ELEMENTS"))
    parse_max_depth: int = Field(512, ge=16, le=100_000, validation_alias=_env("PARSE_MAX_DEPTH"))
    parse_max_chars: int = Field(50_000_000, ge=1000, validation_alias=_env("PARSE_MAX_CHARS"))

    # --- OCR's costs (app/ingest/loaders/ocr.py) ----------------------------------------------------------
    ocr_max_pixels: int = Field(
        50_000_000, ge=1_000_000, le=1_000_000_000, validation_alias=_env("OCR_MAX_PIXELS")
    )
    ocr_max_pages: int = Field(100, ge=1, le=100_000, validation_alias=_env("OCR_MAX_PAGES"))
    ocr_page_timeout_s: float = Field(30.0, gt=0, le=3600, validation_alias=_env("OCR_PAGE_TIMEOUT_S"))
    ocr_file_timeout_s: float | None = Field(
        None, gt=0, le=86_400, validation_alias=_env("OCR_FILE_TIMEOUT_S")
    )
    ocr_dpi: int = Field(200, ge=72, le=600, validation_alias=_env("OCR_DPI"))
    ocr_min_chars: int = Field(30, ge=0, le=100_000, validation_alias=_env("OCR_MIN_CHARS"))

    # --- where originals are kept: the local folder, the key prefix in S3_BUCKET --------------------------
    blob_dir: Path | None = Field(None, validation_alias=_env("BLOB_DIR"))
    s3_prefix: str = Field("ragoverlay/originals/", validation_alias=_env("S3_PREFIX"))

    # --- background jobs (app/jobs/) ----------------------------------------------------------------------
    indexer_concurrency: int = Field(4, ge=0, le=64, validation_alias=_env("INDEXER_CONCURRENCY"))
    indexer_retry_max: int = Field(3, ge=0, le=100, validation_alias=_env("INDEXER_RETRY_MAX"))
    indexer_retry_base_ms: int = Field(5000, ge=0, validation_alias=_env("INDEXER_RETRY_BASE_MS"))
    indexer_retry_max_ms: int = Field(300_000, ge=0, validation_alias=_env("INDEXER_RETRY_MAX_MS"))
    indexer_job_timeout_ms: int = Field(600_000, ge=100, validation_alias=_env("INDEXER_JOB_TIMEOUT_MS"))
    indexer_stale_timeout_s: int = Field(1800, ge=1, validation_alias=_env("INDEXER_STALE_TIMEOUT"))
    embed_async_over_bytes: int = Field(0, ge=0, validation_alias=_env("EMBED_ASYNC_OVER_BYTES"))

    # --- embedding calls, and contextual chunking's -------------------------------------------------------
    # Azure's REST version of the embeddings call: its default serves every current deployment
    azure_api_version: str = Field("2024-10-21", validation_alias=_env("RAG_AZURE_OPENAI_API_VERSION"))
    embedding_batch_max_chars: int = Field(
        200_000, ge=1000, validation_alias=_env("EMBEDDING_BATCH_MAX_CHARS")
    )
    embedding_concurrency: int = Field(4, ge=1, le=64, validation_alias=_env("EMBEDDING_CONCURRENCY"))
    embedding_timeout_s: float = Field(60.0, gt=0, validation_alias=_env("EMBEDDING_TIMEOUT"))
    embedding_max_retries: int = Field(4, ge=0, le=20, validation_alias=_env("EMBEDDING_MAX_RETRIES"))
    embedding_breaker_failures: int = Field(5, ge=0, validation_alias=_env("EMBEDDING_BREAKER_FAILURES"))
    embedding_breaker_reset_s: float = Field(
        10.0, gt=0, le=3600, validation_alias=_env("EMBEDDING_BREAKER_RESET_S")
    )
    query_embedding_cache_size: int = Field(1024, ge=0, validation_alias=_env("QUERY_EMBEDDING_CACHE_SIZE"))
    local_embeddings_threads: int = Field(0, ge=0, validation_alias=_env("LOCAL_EMBEDDINGS_THREADS"))
    contextual_chunking_timeout_ms: int = Field(
        10_000, ge=100, le=600_000, validation_alias=_env("CONTEXTUAL_CHUNKING_TIMEOUT_MS")
    )
    contextual_chunking_concurrency: int = Field(
        4, ge=1, le=64, validation_alias=_env("CONTEXTUAL_CHUNKING_CONCURRENCY")
    )
    contextual_chunking_budget_s: float = Field(
        120.0, gt=0, le=86_400, validation_alias=_env("CONTEXTUAL_CHUNKING_BUDGET_S")
    )

    # --- V1 search: the planner, the vector cache, the HNSW indexes ---------------------------------------
    vector_index: Literal["hnsw", "none"] = Field("hnsw", validation_alias=_env("VECTOR_INDEX"))
    exact_scan_max_rows: int = Field(4000, ge=0, validation_alias=_env("EXACT_SCAN_MAX_ROWS"))
    # V1's exact scan on vectors held in memory (app/search/vector_cache.py); 0 MB turns it off
    vector_cache_mb: int = Field(512, ge=0, le=1_000_000, validation_alias=_env("VECTOR_CACHE_MB"))
    vector_cache_max_rows: int = Field(
        100_000, ge=0, le=10_000_000, validation_alias=_env("VECTOR_CACHE_MAX_ROWS")
    )
    hnsw_ef_search: int = Field(100, ge=1, le=1000, validation_alias=_env("HNSW_EF_SEARCH"))
    hnsw_max_scan_tuples: int = Field(50_000, ge=100, validation_alias=_env("HNSW_MAX_SCAN_TUPLES"))
    hnsw_cost_factor: float = Field(20.0, ge=0.0, le=1000.0, validation_alias=_env("HNSW_COST_FACTOR"))
    hnsw_m: int = Field(24, ge=2, le=100, validation_alias=_env("HNSW_M"))
    hnsw_ef_construction: int = Field(128, ge=4, le=1000, validation_alias=_env("HNSW_EF_CONSTRUCTION"))
    hnsw_build_memory: str = Field(
        "1GB", pattern=r"^\d+(kB|MB|GB)$", validation_alias=_env("HNSW_BUILD_MEMORY")
    )
    hnsw_namespace_min_rows: int = Field(50_000, ge=1000, validation_alias=_env("HNSW_NAMESPACE_MIN_ROWS"))
    hnsw_namespace_max: int = Field(32, ge=0, le=1000, validation_alias=_env("HNSW_NAMESPACE_MAX"))
    rag_distance_threshold: float | None = Field(
        None, ge=0.0, le=2.0, validation_alias=_env("RAG_DISTANCE_THRESHOLD")
    )

    # --- evidence search: the index version of new runs (its other knobs: app/evidence/settings.py) -------
    v2_index_version: str = Field(
        "v2",
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        validation_alias=_env("RAG_V2_INDEX_VERSION"),
    )

    # --- LibreChat's catalogue and MCP sessions -----------------------------------------------------------
    librechat_mongo_db: str | None = Field(None, validation_alias=_env("LIBRECHAT_MONGO_DB"))
    allowlist_fail_open: bool = Field(False, validation_alias=_env("ALLOWLIST_FAIL_OPEN"))
    librechat_mongo_timeout_ms: int = Field(
        2000, ge=100, le=60_000, validation_alias=_env("LIBRECHAT_MONGO_TIMEOUT_MS")
    )
    allowlist_cache_ttl_s: float = Field(
        30.0, ge=0.0, le=300.0, validation_alias=_env("ALLOWLIST_CACHE_TTL_S")
    )
    allowlist_cache_size: int = Field(
        100_000, ge=0, le=10_000_000, validation_alias=_env("ALLOWLIST_CACHE_SIZE")
    )
    mcp_gateway_user_header: str = Field(
        "X-LibreChat-User-Id",
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9-]+$",
        validation_alias=_env("MCP_GATEWAY_USER_HEADER"),
    )
    mcp_session_ttl_seconds: float = Field(
        1800.0, gt=0.0, le=86_400.0, validation_alias=_env("MCP_SESSION_TTL_SECONDS")
    )
    mcp_session_max: int = Field(100, ge=1, le=100_000, validation_alias=_env("MCP_SESSION_MAX"))
    mcp_session_create_rate_per_minute: int = Field(
        30, ge=0, validation_alias=_env("MCP_SESSION_CREATE_RATE_PER_MINUTE")
    )
    # handshake-era MCP clients without server-side sessions: every request stands alone, so any
    # process or replica answers it. "auto": so when RAG_WORKERS > 1 (a worker cannot route a
    # session's next connection to the worker that holds it), with sessions otherwise
    mcp_stateless: bool | Literal["auto"] = Field("auto", validation_alias=_env("MCP_STATELESS"))
    search_snippet_max_chars: int = Field(
        1000, ge=50, le=100_000, validation_alias=_env("SEARCH_SNIPPET_MAX_CHARS")
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_cors_origins(cls, value: object) -> list[str]:
        return split_csv(value)

    @field_validator("entity_id_pattern", mode="before")
    @classmethod
    def _pattern_blank_is_default(cls, value: object) -> object:
        # `ENTITY_ID_PATTERN=` in a compose file must not silently refuse every Agent id
        if isinstance(value, str) and not value.strip():
            return DEFAULT_ENTITY_ID_PATTERN
        return value

    @field_validator("entity_id_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
        return value
