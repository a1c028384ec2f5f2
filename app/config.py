"""Configuration: one typed Settings class, built once by `get_settings()`.

Every field reads one or more environment variables. rag_api's names (`RAG_HOST`, `POSTGRES_DB`,
`COLLECTION_NAME`, `CHUNK_SIZE`, ...) keep working through aliases; ours come after them. The
fields declared here are the ones an operator sets (docs/configuration.md); `Settings` inherits
the knobs no operator needs from `TuningKnobs` (app/config_tuning.py, docs/tuning.md), and
`tests/unit/test_config_docs.py` fails when either page and the code drift apart.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, quote_plus, urlsplit

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from app.config_tuning import DEFAULT_ENTITY_ID_PATTERN, CsvList, TuningKnobs, split_csv
from app.errors import ConfigError
from app.evidence.settings import ENV_DELIMITER, V2Settings
from app.evidence.settings import ENV_PREFIX as V2_ENV_PREFIX
from app.text.pii import DESTINATIONS as PII_DESTINATIONS

Provider = Literal["openai", "azure", "ollama", "huggingfacetei", "local"]

# Model used when a provider is chosen but EMBEDDINGS_MODEL is not set (rag_api's defaults, plus ours).
DEFAULT_MODELS: dict[str, str] = {
    "openai": "text-embedding-3-small",
    "azure": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
    "huggingfacetei": "http://huggingfacetei:3000",
    "local": "all-MiniLM-L6-v2",
}
# The offline model (app/clients/embeddings/local.py): the names it answers to, and its dimension.
LOCAL_MODEL_ALIASES = frozenset(
    {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2-onnx-int8"}
)
LOCAL_DIMENSIONS = 384
# The opt-in offline multilingual models (app/clients/embeddings/multilingual.py), under the same
# provider: EMBEDDINGS_PROVIDER=local with EMBEDDINGS_MODEL set to one of these names.
MULTILINGUAL_E5 = "multilingual-e5-small"
MULTILINGUAL_USE = "universal-sentence-encoder-multilingual-3"
# Every name the local provider answers to -> the model it runs (its canonical name)
LOCAL_MODELS: dict[str, str] = {
    **{alias: DEFAULT_MODELS["local"] for alias in LOCAL_MODEL_ALIASES},
    MULTILINGUAL_E5: MULTILINGUAL_E5,
    "intfloat/multilingual-e5-small": MULTILINGUAL_E5,
    MULTILINGUAL_USE: MULTILINGUAL_USE,
}
# The dimension of each local model, by canonical name
LOCAL_MODEL_DIMENSIONS: dict[str, int] = {
    DEFAULT_MODELS["local"]: LOCAL_DIMENSIONS,
    MULTILINGUAL_E5: 384,
    MULTILINGUAL_USE: 512,
}


def local_model_choices() -> str:
    """What to set when EMBEDDINGS_MODEL names no model the local provider runs."""
    names = ", ".join(sorted(LOCAL_MODEL_DIMENSIONS))
    return (
        f"EMBEDDINGS_PROVIDER=local runs {names}; unset EMBEDDINGS_MODEL (the default "
        f"{DEFAULT_MODELS['local']}), set one of these, or choose another EMBEDDINGS_PROVIDER"
    )


def _env(*names: str) -> AliasChoices:
    """Accept any of `names` (first wins) as the environment variable for a field."""
    return AliasChoices(*names)


# A Tesseract language (traineddata) name: "deu", "eng", "chi_sim", "deu_latf"
_OCR_LANGUAGE = re.compile(r"[a-z]{3}(?:_[a-z]{2,8})?")

# One MCP_API_KEYS entry: the key's sha256 (hex), the principal it acts as, its namespaces.
MCP_API_KEY_ENTRY = re.compile(r"[0-9a-f]{64}:[^:|,\s]{1,200}(:[^:|,\s]{1,200}(\|[^:|,\s]{1,200})*)?")


class Settings(TuningKnobs):
    """All runtime settings of the service: the operator's, declared here, and `TuningKnobs`."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        case_sensitive=True,
        # docker-compose and .env files often carry `NAME=`: that means "not configured", not ""
        env_ignore_empty=True,
        # nested knobs (Settings.v2) are RAG_V2__FUSION__RRF_K and so on
        env_nested_delimiter=ENV_DELIMITER,
    )

    # --- server -----------------------------------------------------------------------------
    host: str = Field("0.0.0.0", validation_alias=_env("RAG_HOST"))
    port: int = Field(8000, ge=1, le=65535, validation_alias=_env("RAG_PORT", "PORT"))
    data_dir: Path = Field(Path("./data"), validation_alias=_env("DATA_DIR"))
    # service processes behind the port (app/runtime/workers.py); WEB_CONCURRENCY as uvicorn reads it
    workers: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = Field(
        1, validation_alias=_env("RAG_WORKERS", "WEB_CONCURRENCY")
    )
    debug: bool = Field(False, validation_alias=_env("DEBUG_RAG_API"))
    console_json: bool = Field(False, validation_alias=_env("CONSOLE_JSON"))

    # --- auth ---------------------------------------------------------------------------------
    jwt_secret: str | None = Field(None, validation_alias=_env("JWT_SECRET"))
    allow_unauthenticated: bool = Field(False, validation_alias=_env("ALLOW_UNAUTHENTICATED"))
    admin_user_ids: CsvList = Field(default_factory=list, validation_alias=_env("RAG_ADMIN_USER_IDS"))
    delete_scope: Literal["owner", "caller"] = Field("owner", validation_alias=_env("DELETE_SCOPE"))
    _entity_id_regex: re.Pattern[str] = PrivateAttr(
        default_factory=lambda: re.compile(DEFAULT_ENTITY_ID_PATTERN)
    )

    # --- operations: /metrics (app/api/metrics.py) -----------------------------------------------
    metrics_token: str | None = Field(None, min_length=16, validation_alias=_env("METRICS_TOKEN"))

    # --- database -----------------------------------------------------------------------------
    database_url: str | None = Field(None, validation_alias=_env("DATABASE_URL"))
    # streaming standbys that searches read from (app/store/standby.py), comma-separated
    database_read_urls: CsvList = Field(default_factory=list, validation_alias=_env("DATABASE_READ_URLS"))
    postgres_db: str = Field("mydatabase", validation_alias=_env("POSTGRES_DB"))
    postgres_user: str = Field("myuser", validation_alias=_env("POSTGRES_USER"))
    postgres_password: str = Field("mypassword", validation_alias=_env("POSTGRES_PASSWORD"))
    db_host: str | None = Field(None, validation_alias=_env("DB_HOST"))
    db_port: int = Field(5432, validation_alias=_env("DB_PORT"))
    collection_name: str = Field("testcollection", min_length=1, validation_alias=_env("COLLECTION_NAME"))

    # --- ingestion ----------------------------------------------------------------------------
    chunk_size: int = Field(1500, ge=50, validation_alias=_env("CHUNK_SIZE"))
    chunk_overlap: int = Field(100, ge=0, validation_alias=_env("CHUNK_OVERLAP"))
    rag_upload_dir: Path | None = Field(None, validation_alias=_env("RAG_UPLOAD_DIR"))
    max_upload_bytes: int = Field(100 * 1024 * 1024, ge=1, validation_alias=_env("MAX_UPLOAD_BYTES"))
    pdf_extract_images: bool = Field(False, validation_alias=_env("PDF_EXTRACT_IMAGES"))
    # --- OCR of scans and pictures (app/ingest/loaders/ocr.py), inside the parsing worker ------
    ocr_engine: Literal["auto", "tesseract", "off"] = Field("auto", validation_alias=_env("OCR_ENGINE"))
    ocr_languages: CsvList = Field(
        default_factory=lambda: ["deu", "eng"], validation_alias=_env("OCR_LANGUAGES")
    )

    # --- blob store ---------------------------------------------------------------------------
    s3_bucket: str | None = Field(None, validation_alias=_env("S3_BUCKET"))
    s3_endpoint_url: str | None = Field(None, validation_alias=_env("S3_ENDPOINT_URL"))
    s3_region: str = Field(
        "us-east-1", validation_alias=_env("S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION")
    )
    s3_access_key_id: str | None = Field(None, validation_alias=_env("S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"))
    s3_secret_access_key: str | None = Field(
        None, validation_alias=_env("S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")
    )
    s3_session_token: str | None = Field(None, validation_alias=_env("S3_SESSION_TOKEN", "AWS_SESSION_TOKEN"))
    s3_force_path_style: bool = Field(False, validation_alias=_env("S3_FORCE_PATH_STYLE"))

    # --- embeddings ---------------------------------------------------------------------------
    embeddings_provider: Provider | None = Field(None, validation_alias=_env("EMBEDDINGS_PROVIDER"))
    embeddings_model: str | None = Field(None, validation_alias=_env("EMBEDDINGS_MODEL"))
    embeddings_dimensions: int | None = Field(
        None, ge=1, le=16000, validation_alias=_env("EMBEDDINGS_DIMENSIONS")
    )
    openai_api_key: str | None = Field(None, validation_alias=_env("RAG_OPENAI_API_KEY", "OPENAI_API_KEY"))
    openai_base_url: str | None = Field(None, validation_alias=_env("RAG_OPENAI_BASEURL"))
    openai_proxy: str | None = Field(None, validation_alias=_env("RAG_OPENAI_PROXY"))
    azure_api_key: str | None = Field(
        None, validation_alias=_env("RAG_AZURE_OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")
    )
    azure_endpoint: str | None = Field(
        None, validation_alias=_env("RAG_AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_ENDPOINT")
    )
    ollama_base_url: str = Field("http://ollama:11434", validation_alias=_env("OLLAMA_BASE_URL"))
    hf_token: str | None = Field(None, validation_alias=_env("HF_TOKEN"))
    embedding_batch_size: int = Field(
        0, ge=0, validation_alias=_env("EMBEDDING_BATCH_SIZE", "EMBEDDINGS_CHUNK_SIZE")
    )

    # --- contextual chunking (app/ingest/contextual.py): a sentence situating each chunk, embedded --
    contextual_chunking_enabled: bool = Field(False, validation_alias=_env("CONTEXTUAL_CHUNKING_ENABLED"))
    contextual_chunking_base_url: str | None = Field(
        None, validation_alias=_env("CONTEXTUAL_CHUNKING_BASE_URL")
    )
    contextual_chunking_model: str | None = Field(None, validation_alias=_env("CONTEXTUAL_CHUNKING_MODEL"))
    # a SecretStr: the settings' repr (and any log of it) shows stars, never the key
    contextual_chunking_api_key: SecretStr | None = Field(
        None, validation_alias=_env("CONTEXTUAL_CHUNKING_API_KEY")
    )

    # --- personal data (app/text/pii.py): redacted on its way to each destination named ---------
    # embeddings (a remote provider), reranker (RAG_V2__RERANK__BACKEND=http), contextual (the
    # contextual-chunking chat endpoint), logs (e-mail, phone, IBAN, card in log lines); "all", or
    # "none". What is stored and what LibreChat reads stay as uploaded (docs/privacy.md)
    pii_redact: CsvList = Field(default_factory=lambda: ["logs"], validation_alias=_env("PII_REDACT"))

    # --- evidence search: the V2 index and /query_v2 (app/evidence/) ------------------------------
    v2_namespace_ids: CsvList = Field(default_factory=list, validation_alias=_env("RAG_V2_NAMESPACE_IDS"))
    # every V2 tuning knob, as RAG_V2__<SECTION>__<FIELD> (app/evidence/settings.py: them and their defaults)
    v2: V2Settings = Field(default_factory=V2Settings, validation_alias=_env(V2_ENV_PREFIX))

    # --- LibreChat catalogue re-check (app/access/allowlist.py; CONTRACT section 7) -----------
    allowlist_verify: Literal["off", "mongo"] = Field("off", validation_alias=_env("ALLOWLIST_VERIFY"))
    librechat_mongo_uri: str | None = Field(None, validation_alias=_env("LIBRECHAT_MONGO_URI"))

    # --- MCP server (app/mcp/; CONTRACT section 9) ----------------------------------------------
    mcp_enabled: bool = Field(True, validation_alias=_env("MCP_ENABLED"))
    # `sha256hex:principal[:ns1|ns2...]` entries, comma-separated (app/mcp/auth.py parses them)
    mcp_api_keys: CsvList = Field(default_factory=list, validation_alias=_env("MCP_API_KEYS"))
    mcp_gateway_key_sha256: str | None = Field(None, validation_alias=_env("MCP_GATEWAY_KEY_SHA256"))

    @field_validator("admin_user_ids", "v2_namespace_ids", "mcp_api_keys", mode="before")
    @classmethod
    def _split_csv(cls, value: object) -> list[str]:
        return split_csv(value)

    @field_validator("pii_redact", mode="before")
    @classmethod
    def _pii_destinations(cls, value: object) -> list[str]:
        names = [name.lower() for name in split_csv(value)]
        if names in (["all"], ["*"]):
            return list(PII_DESTINATIONS)
        if names == ["none"]:
            return []
        unknown = [name for name in names if name not in PII_DESTINATIONS]
        if unknown:
            raise ValueError(
                f"unknown destinations {unknown}: name some of {', '.join(PII_DESTINATIONS)}, or all, or none"
            )
        return names

    @field_validator("database_read_urls", mode="before")
    @classmethod
    def _read_urls(cls, value: object) -> list[str]:
        return [postgres_url(url) for url in split_csv(value)]

    @field_validator("ocr_engine", mode="before")
    @classmethod
    def _ocr_engine_lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("ocr_languages", mode="before")
    @classmethod
    def _ocr_languages(cls, value: object) -> list[str]:
        # Tesseract's own spelling "deu+eng" is accepted as well as a comma-separated list
        names = split_csv(value.replace("+", ",") if isinstance(value, str) else value)
        for name in names:
            if not _OCR_LANGUAGE.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a Tesseract language code (three letters such as deu, eng, fra; "
                    "a few have a suffix, such as chi_sim)"
                )
        if not names:
            raise ValueError("name at least one language, such as deu,eng (or set OCR_ENGINE=off)")
        return names

    @field_validator("allowlist_verify", "workers", mode="before")
    @classmethod
    def _verify_lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("embeddings_provider", mode="before")
    @classmethod
    def _provider_lower(cls, value: object) -> object:
        if isinstance(value, str):
            return value.strip().lower() or None
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("CHUNK_OVERLAP must be smaller than CHUNK_SIZE")
        if self.db_pool_min_size > self.db_pool_max_size:
            raise ValueError("DB_POOL_MIN_SIZE must not exceed DB_POOL_MAX_SIZE")
        provider = self.provider
        if provider == "azure" and not self.azure_endpoint:
            raise ValueError("EMBEDDINGS_PROVIDER=azure needs RAG_AZURE_OPENAI_ENDPOINT")
        if provider == "azure" and not self.azure_api_key:
            raise ValueError("EMBEDDINGS_PROVIDER=azure needs RAG_AZURE_OPENAI_API_KEY")
        if provider == "openai" and not self.openai_api_key and not self.openai_base_url:
            raise ValueError(
                "EMBEDDINGS_PROVIDER=openai needs RAG_OPENAI_API_KEY (or RAG_OPENAI_BASEURL for a "
                "self-hosted OpenAI-compatible server)"
            )
        if provider == "local" and self.model not in LOCAL_MODELS:
            raise ValueError(local_model_choices())
        if provider == "local":
            dims = LOCAL_MODEL_DIMENSIONS[LOCAL_MODELS[self.model]]
            if self.embeddings_dimensions not in (None, dims):
                raise ValueError(
                    f"EMBEDDINGS_DIMENSIONS={self.embeddings_dimensions} but the local model "
                    f"{self.model} has {dims} dimensions"
                )
        if provider == "huggingfacetei" and not self.model.startswith(("http://", "https://")):
            raise ValueError(
                "EMBEDDINGS_PROVIDER=huggingfacetei needs EMBEDDINGS_MODEL to be the TEI server URL "
                "(e.g. http://huggingfacetei:3000)"
            )
        if self.contextual_chunking_enabled and not (
            self.contextual_chunking_base_url and self.contextual_chunking_model
        ):
            raise ValueError(
                "CONTEXTUAL_CHUNKING_ENABLED=true needs CONTEXTUAL_CHUNKING_BASE_URL (an OpenAI-compatible "
                "API, such as https://api.openai.com/v1) and CONTEXTUAL_CHUNKING_MODEL (a chat model)"
            )
        if bool(self.s3_access_key_id) != bool(self.s3_secret_access_key):
            raise ValueError(
                "S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY must be set together (or neither, to use "
                "the default AWS credential chain)"
            )
        if self.embedded_postgres == "true" and (self.database_url or self.db_host):
            raise ValueError("EMBEDDED_POSTGRES=true conflicts with DATABASE_URL/DB_HOST")
        if self.embedded_postgres == "false" and not (self.database_url or self.db_host):
            raise ValueError("EMBEDDED_POSTGRES=false needs DATABASE_URL or DB_HOST")
        if self.allowlist_verify == "mongo" and not self.librechat_mongo_uri:
            raise ValueError("ALLOWLIST_VERIFY=mongo needs LIBRECHAT_MONGO_URI (LibreChat's MongoDB URI)")
        if self.allowlist_verify == "mongo" and not self.jwt_secret:
            raise ValueError(
                "ALLOWLIST_VERIFY=mongo needs JWT_SECRET: without tokens there is no LibreChat user to check"
            )
        if self.mcp_gateway_key_sha256 and self.allowlist_verify != "mongo":
            raise ValueError(
                "MCP_GATEWAY_KEY_SHA256 (LibreChat's MCP gateway mode) needs ALLOWLIST_VERIFY=mongo: the "
                "user id header proves nothing, so the user's files must come from LibreChat's catalogue"
            )
        if self.mcp_gateway_key_sha256 and not re.fullmatch(r"[0-9a-f]{64}", self.mcp_gateway_key_sha256):
            raise ValueError("MCP_GATEWAY_KEY_SHA256 must be 64 lower-case hex digits (sha256 of the key)")
        for entry in self.mcp_api_keys:
            if not MCP_API_KEY_ENTRY.fullmatch(entry):
                raise ValueError(
                    "MCP_API_KEYS entries are sha256hex:principal or sha256hex:principal:ns1|ns2 (64 "
                    "lower-case hex digits, then names without ':', '|' or ','); one entry does not match"
                )
        # compiled once here; every request full-matches against it
        self._entity_id_regex = re.compile(self.entity_id_pattern)
        return self

    # --- derived values -----------------------------------------------------------------------
    @property
    def provider(self) -> Provider:
        """The embedding provider in effect: explicit, else openai when a key is set, else local."""
        if self.embeddings_provider:
            return self.embeddings_provider
        # rag_api defaults to openai; we keep that when a key says the operator meant it.
        return "openai" if self.openai_api_key else "local"

    @property
    def model(self) -> str:
        """The embedding model in effect."""
        return self.embeddings_model or DEFAULT_MODELS[self.provider]

    @property
    def auth_enabled(self) -> bool:
        """True when JWT_SECRET is set: every route but /health and the docs needs a token."""
        return bool(self.jwt_secret)

    @property
    def entity_id_regex(self) -> re.Pattern[str]:
        """ENTITY_ID_PATTERN, compiled: an `entity_id` is honoured only when it matches in full."""
        return self._entity_id_regex

    @property
    def use_embedded_postgres(self) -> bool:
        """True when the service should start its own PostgreSQL under DATA_DIR."""
        if self.embedded_postgres == "auto":
            return not (self.database_url or self.db_host)
        return self.embedded_postgres == "true"

    @property
    def bind_host(self) -> str:
        """Host to bind: without auth, loopback only unless ALLOW_UNAUTHENTICATED=true."""
        if not self.auth_enabled and not self.allow_unauthenticated:
            return "127.0.0.1"
        return self.host

    @property
    def upload_dir(self) -> Path:
        """Folder for streamed uploads and `/local/embed` sources."""
        return (self.rag_upload_dir or self.data_dir / "uploads").resolve()

    @property
    def blob_folder(self) -> Path:
        """Folder of the local blob store (used when S3_BUCKET is unset)."""
        return (self.blob_dir or self.data_dir / "blobs").resolve()

    @property
    def postgres_data_dir(self) -> Path:
        """PGDATA of the embedded PostgreSQL."""
        return (self.data_dir / "postgres").resolve()

    def external_dsn(self) -> str:
        """The DSN of an external PostgreSQL, from DATABASE_URL or rag_api's POSTGRES_*/DB_* names."""
        if self.database_url:
            return without_driver(self.database_url)
        user = quote_plus(self.postgres_user)
        password = quote_plus(self.postgres_password)
        db = quote_plus(self.postgres_db)
        host = self.db_host or "localhost"
        if self.postgres_use_unix_socket:
            return f"postgresql://{user}:{password}@/{db}?host={quote(host, safe='')}&port={self.db_port}"
        return f"postgresql://{user}:{password}@{host}:{self.db_port}/{db}"


def without_driver(url: str) -> str:
    """`url` without a SQLAlchemy driver prefix (rag_api's docs use them; asyncpg does not know them)."""
    for prefix in ("postgresql+psycopg2://", "postgresql+psycopg://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def postgres_url(url: str) -> str:
    """A PostgreSQL URL as asyncpg takes it; ValueError when it is not one."""
    url = without_driver(url)
    parts = urlsplit(url)
    # the URL itself is never repeated: it may hold a password
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(
            f"each URL must start with postgresql:// (one has the scheme {parts.scheme or 'none'!r})"
        )
    if not parts.hostname and "host=" not in parts.query:
        raise ValueError("each URL must name a host (postgresql://user:password@host:5432/database)")
    return url


def load_settings(**overrides: Any) -> Settings:
    """Build Settings from the environment (plus overrides), raising ConfigError on bad values."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            lines.append(f"  {_env_name(err.get('loc', ()))}: {err.get('msg')}")
        raise ConfigError("Invalid configuration:\n" + "\n".join(lines)) from None


def _env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable an error's location names (RAG_V2__FUSION__RRF_K for a nested knob)."""
    if not loc:
        return "settings"
    head, *rest = (str(part) for part in loc)
    field = Settings.model_fields.get(head)
    if field is not None and isinstance(field.validation_alias, AliasChoices):
        head = str(field.validation_alias.choices[0])
    return ENV_DELIMITER.join([head, *(part.upper() for part in rest)])


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, built on first use (never at import time)."""
    return load_settings()


# Silence a noisy tokenizers warning once, for every entry point that imports config.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
