"""The two settings pages and the code never drift apart; settings validate.

docs/configuration.md holds the operator's table (short, grouped by task) and docs/tuning.md the
knobs no operator needs. Which page a variable belongs on is the code's call (`variable_groups`:
where a field is declared, or the OPERATOR mark of a `RAG_V2__*` leaf), and each row is one
variable with its aliases, so the operator table cannot be shortened by packing rows.
"""

import inspect
import re
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from app.config import Settings, load_settings
from app.config_env import all_env_names, env_names
from app.config_tuning import TuningKnobs
from app.errors import ConfigError
from app.evidence.settings import ENV_DELIMITER, ENV_PREFIX, OPERATOR, V2Settings, leaf_defaults
from tests.unit.docs_text import page

# The operator table's length today. A new operator setting must push out one that no operator
# needs (declare it in app/config_tuning.py), or raise this with a reason in the commit: the
# table is meant to stay readable in one sitting (datasette documents 24, rag_api about 48).
# 61: PII_REDACT, the one privacy control, is an operator's to find (a German deployment that must
# not send personal data to a hosted model decides it on day one)
OPERATOR_TABLE_MAX = 61

Tier = Literal["operator", "tuning"]
PAGES: dict[Tier, str] = {"operator": "configuration.md", "tuning": "tuning.md"}

Row = tuple[tuple[str, ...], str]


def operator_knobs(model: type[BaseModel] = V2Settings, prefix: str = ENV_PREFIX) -> set[str]:
    """The `RAG_V2__*` leaves app/evidence/settings.py marks OPERATOR (every other leaf is tuning)."""
    out: set[str] = set()
    for name, field in model.model_fields.items():
        env = f"{prefix}{ENV_DELIMITER}{name.upper()}"
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out |= operator_knobs(field.annotation, env)
        elif field.json_schema_extra == OPERATOR:
            out.add(env)
    return out


def variable_groups() -> dict[tuple[str, ...], Tier]:
    """The code's own split: each variable with its aliases (one row), and who sets it."""
    groups: dict[tuple[str, ...], Tier] = {}
    for field in Settings.model_fields:
        if field == "v2":
            marked = operator_knobs()
            for leaf in leaf_defaults():
                groups[(leaf,)] = "operator" if leaf in marked else "tuning"
        else:
            # declared in TuningKnobs (app/config_tuning.py): no operator's; in Settings: an operator's
            groups[tuple(env_names(field))] = "tuning" if field in TuningKnobs.model_fields else "operator"
    return groups


def settings_rows(name: str) -> list[Row]:
    """The rows of every settings table of docs/<name> (headed `| Variable | Default |`): names, default."""
    rows: list[Row] = []
    in_table = False
    for line in page(name).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            in_table = False
        elif cells[:2] == ["Variable", "Default"]:
            in_table = True
        elif in_table and cells[0].startswith("`"):
            rows.append((tuple(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])), cells[1]))
    return rows


def documented_variables() -> dict[str, str]:
    """Every variable of both pages: name -> default column."""
    rows = [row for name in PAGES.values() for row in settings_rows(name)]
    return {name: default for names, default in rows for name in names}


def test_every_setting_has_a_tier_in_code() -> None:
    # a field belongs to Settings (an operator's) or to TuningKnobs (no operator's): nothing else
    declared = set(inspect.get_annotations(Settings)) | set(inspect.get_annotations(TuningKnobs))
    stray = sorted(set(Settings.model_fields) - declared)
    assert not stray, f"declare these in app/config.py (operator) or app/config_tuning.py (tuning): {stray}"
    assert sorted(n for names in variable_groups() for n in names) == sorted(all_env_names())


@pytest.mark.parametrize("tier", PAGES)
def test_each_page_documents_exactly_its_tier(tier: Tier) -> None:
    rows = [names for names, _ in settings_rows(PAGES[tier])]
    wanted = {names for names, who in variable_groups().items() if who == tier}
    known = set(all_env_names())
    stale = sorted(n for names in rows for n in names if n not in known)
    assert not stale, f"docs/{PAGES[tier]} documents variables the service does not read: {stale}"
    missing = sorted(" ".join(names) for names in wanted - set(rows))
    assert not missing, f"add a row for each of these to docs/{PAGES[tier]}: {missing}"
    # a row is one variable and its aliases, in the order the code reads them
    misplaced = sorted(" ".join(names) for names in set(rows) - wanted)
    assert not misplaced, (
        f"these rows of docs/{PAGES[tier]} are not one variable with its aliases, or belong on the other "
        f"page (the code's tier: app/config_tuning.py, OPERATOR in app/evidence/settings.py): {misplaced}"
    )
    doubled = sorted({" ".join(names) for names in rows if rows.count(names) > 1})
    assert not doubled, f"docs/{PAGES[tier]} documents these twice: {doubled}"


def test_the_operator_table_stays_short() -> None:
    rows = settings_rows(PAGES["operator"])
    assert len(rows) <= OPERATOR_TABLE_MAX, (
        f"docs/configuration.md has {len(rows)} rows, at most {OPERATOR_TABLE_MAX}: move a knob no "
        "operator needs to app/config_tuning.py and docs/tuning.md"
    )


def documented_defaults() -> dict[str, object]:
    """Each setting's first (documented) variable name and its default."""
    out: dict[str, object] = {}
    for field_name, field in Settings.model_fields.items():
        if field_name == "v2":
            out.update(leaf_defaults())
        else:
            out[env_names(field_name)[0]] = field.get_default(call_default_factory=True)
    return out


def test_documented_defaults_match() -> None:
    documented = documented_variables()
    for name, default in documented_defaults().items():
        cell = documented[name]
        if isinstance(default, bool):
            assert cell.strip("`").lower() == str(default).lower(), name
        elif isinstance(default, (int, float, str)):
            assert str(default) in cell, f"{name}: the table says {cell!r}, the code says {default!r}"
        elif isinstance(default, (tuple, list)):
            assert all(str(item) in cell for item in default), f"{name}: {cell!r} vs {default!r}"


def test_nested_v2_knobs_are_read_from_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_V2__FUSION__WEIGHTS__LEXICAL", "1.5")
    monkeypatch.setenv("RAG_V2__REFUSAL__REFUSE_AT", "2")
    monkeypatch.setenv("RAG_V2__INDEX__BOILERPLATE__KINDS", '["paragraph"]')
    v2 = load_settings(_env_file=None).v2
    assert v2.fusion.weights.lexical == 1.5 and v2.refusal.refuse_at == 2.0
    assert v2.index.boilerplate.kinds == ("paragraph",)
    assert v2.fusion.rrf_k == 20.0  # the rest keep the shipped defaults


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RAG_V2__FUSION__RRF_K": "0"}, "RAG_V2__FUSION__RRF_K"),
        ({"RAG_V2__FUSION__WEIGHTS__LEXCAL": "1"}, "RAG_V2__FUSION__WEIGHTS__LEXCAL: Extra inputs"),
        ({"RAG_V2__RERANK__BACKEND": "http"}, "RAG_V2__RERANK__URL"),
        ({"RAG_V2__INDEX__OVERLAP_TOKENS": "300"}, "RAG_V2__INDEX__OVERLAP_TOKENS"),
    ],
)
def test_bad_v2_knobs_name_their_variable(monkeypatch: pytest.MonkeyPatch, env: dict, needle: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as exc:
        load_settings(_env_file=None)
    assert needle in str(exc.value)


# Variables moved from the operator's table to the tuning reference (TuningKnobs): each is still
# read from its environment variable, with the default it had. name: (field, set to, read as)
MOVED_TO_TUNING: dict[str, tuple[str, str, object]] = {
    "RAG_CORS_ORIGINS": (
        "cors_origins",
        "https://a.example, https://b.example",
        ["https://a.example", "https://b.example"],
    ),
    "RAG_JWT_AUDIENCE": ("jwt_audience", "librechat", "librechat"),
    "LEGACY_UNOWNED_READABLE": ("legacy_unowned_readable", "true", True),
    "SEARCH_RATE_PER_MINUTE": ("search_rate_per_minute", "120", 120),
    "EMBED_RATE_PER_MINUTE": ("embed_rate_per_minute", "30", 30),
    "EMBEDDED_POSTGRES": ("embedded_postgres", "true", "true"),
    "DB_POOL_MAX_SIZE": ("db_pool_max_size", "20", 20),
    "INDEXER_CONCURRENCY": ("indexer_concurrency", "0", 0),
    "BLOB_DIR": ("blob_dir", "/srv/blobs", Path("/srv/blobs")),
    "S3_PREFIX": ("s3_prefix", "kb/", "kb/"),
    "LIBRECHAT_MONGO_DB": ("librechat_mongo_db", "chat", "chat"),
    "ALLOWLIST_FAIL_OPEN": ("allowlist_fail_open", "true", True),
    "MCP_GATEWAY_USER_HEADER": ("mcp_gateway_user_header", "X-User", "X-User"),
    "POSTGRES_USE_UNIX_SOCKET": ("postgres_use_unix_socket", "true", True),
}
MOVED_DEFAULTS: dict[str, object] = {
    "cors_origins": ["*"],
    "jwt_audience": None,
    "legacy_unowned_readable": False,
    "search_rate_per_minute": 0,
    "embed_rate_per_minute": 0,
    "embedded_postgres": "auto",
    "db_pool_max_size": 30,
    "indexer_concurrency": 4,
    "blob_dir": None,
    "s3_prefix": "ragoverlay/originals/",
    "librechat_mongo_db": None,
    "allowlist_fail_open": False,
    "mcp_gateway_user_header": "X-LibreChat-User-Id",
    "postgres_use_unix_socket": False,
}


def test_variables_moved_to_tuning_are_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = load_settings(_env_file=None)
    assert {field: getattr(defaults, field) for field, _, _ in MOVED_TO_TUNING.values()} == MOVED_DEFAULTS
    assert (defaults.v2.index.http_window_chars, defaults.v2.rerank.flavour) == (1500, "cohere")
    for name, (field, raw, _) in MOVED_TO_TUNING.items():
        assert field in TuningKnobs.model_fields, name
        monkeypatch.setenv(name, raw)
    monkeypatch.setenv("RAG_V2__INDEX__HTTP_WINDOW_CHARS", "500")
    monkeypatch.setenv("RAG_V2__RERANK__FLAVOUR", "tei")
    s = load_settings(_env_file=None)
    assert {name: getattr(s, field) for name, (field, _, _) in MOVED_TO_TUNING.items()} == {
        name: value for name, (_, _, value) in MOVED_TO_TUNING.items()
    }
    assert (s.v2.index.http_window_chars, s.v2.rerank.flavour) == (500, "tei")


def test_the_pool_check_still_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_POOL_MIN_SIZE", "5")
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "4")
    with pytest.raises(ConfigError, match="DB_POOL_MIN_SIZE must not exceed DB_POOL_MAX_SIZE"):
        load_settings(_env_file=None)


def test_rag_api_names_keep_working(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_PORT", "8123")
    monkeypatch.setenv("COLLECTION_NAME", "legacy")
    monkeypatch.setenv("CHUNK_SIZE", "900")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("DB_HOST", "db.internal")
    monkeypatch.setenv("POSTGRES_DB", "rag")
    s = load_settings(_env_file=None)
    assert s.port == 8123 and s.collection_name == "legacy" and s.chunk_size == 900
    assert s.provider == "openai"  # rag_api's default provider when a key is configured
    assert not s.use_embedded_postgres
    assert s.external_dsn() == "postgresql://myuser:mypassword@db.internal:5432/rag"


def test_defaults_are_embedded_and_offline() -> None:
    s = load_settings(_env_file=None)
    assert s.provider == "local" and s.use_embedded_postgres and s.s3_bucket is None
    assert s.bind_host == "127.0.0.1"  # no JWT_SECRET: loopback only


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"CHUNK_SIZE": "100", "CHUNK_OVERLAP": "200"}, "CHUNK_OVERLAP"),
        ({"RAG_PORT": "not-a-port"}, "RAG_PORT"),
        ({"EMBEDDINGS_PROVIDER": "azure"}, "RAG_AZURE_OPENAI_ENDPOINT"),
        ({"DELETE_SCOPE": "everyone"}, "DELETE_SCOPE"),
        ({"S3_BUCKET": "b", "S3_ACCESS_KEY_ID": "AKIA"}, "S3_SECRET_ACCESS_KEY"),
        ({"S3_BUCKET": "b", "S3_SECRET_ACCESS_KEY": "secret"}, "S3_ACCESS_KEY_ID"),
        ({"EMBEDDINGS_PROVIDER": "huggingfacetei", "EMBEDDINGS_MODEL": "bge-small"}, "EMBEDDINGS_MODEL"),
        ({"EMBEDDINGS_MODEL": "text-embedding-3-large"}, "EMBEDDINGS_PROVIDER=local"),
        ({"EMBEDDINGS_DIMENSIONS": "512"}, "384"),
        ({"EMBEDDED_POSTGRES": "false"}, "DATABASE_URL"),
        ({"DATABASE_READ_URLS": "mysql://u:p@standby/db"}, "DATABASE_READ_URLS: Value error, each URL"),
        ({"DATABASE_READ_URLS": "postgresql://h1/db, postgresql:///db"}, "DATABASE_READ_URLS: Value error"),
        ({"DATABASE_READ_URLS": "standby-1:5432"}, "DATABASE_READ_URLS"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, env: dict, needle: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as exc:
        load_settings(_env_file=None)
    assert needle in str(exc.value)


def test_sqlalchemy_style_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg2://u:p@h:5432/d")
    assert load_settings(_env_file=None).external_dsn() == "postgresql://u:p@h:5432/d"


def test_read_urls_are_a_comma_separated_list_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_env_file=None).database_read_urls == []
    monkeypatch.setenv("DATABASE_READ_URLS", "postgresql+psycopg2://u:p@s1:5432/d, postgres://u:p@s2/d,")
    assert load_settings(_env_file=None).database_read_urls == [
        "postgresql://u:p@s1:5432/d",
        "postgres://u:p@s2/d",
    ]
    monkeypatch.setenv("DATABASE_READ_URLS", "mysql://u:hunter2@s1/d")
    with pytest.raises(ConfigError) as exc:
        load_settings(_env_file=None)
    assert "hunter2" not in str(exc.value)  # a URL may carry a password


BLANK_MEANS_UNSET = {
    "JWT_SECRET": ("jwt_secret", None),
    "DATABASE_URL": ("database_url", None),
    "S3_BUCKET": ("s3_bucket", None),
    "EMBEDDINGS_PROVIDER": ("embeddings_provider", None),
    "EMBEDDINGS_DIMENSIONS": ("embeddings_dimensions", None),
    "RAG_DISTANCE_THRESHOLD": ("rag_distance_threshold", None),
    "RAG_PORT": ("port", 8000),
    "CHUNK_SIZE": ("chunk_size", 1500),
}


def test_blank_variables_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # docker-compose writes `NAME=` for a variable the operator left empty: the default applies
    for name in BLANK_MEANS_UNSET:
        monkeypatch.setenv(name, "")
    s = load_settings(_env_file=None)
    for name, (field, default) in BLANK_MEANS_UNSET.items():
        assert getattr(s, field) == default, name
    assert not s.auth_enabled and s.use_embedded_postgres and s.provider == "local"


def test_blank_lines_of_a_dotenv_file_mean_unset(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("JWT_SECRET=\nS3_BUCKET=\nEMBEDDINGS_DIMENSIONS=\nCHUNK_SIZE=900\n")
    s = load_settings(_env_file=env_file)
    assert (s.jwt_secret, s.s3_bucket, s.embeddings_dimensions, s.chunk_size) == (None, None, None, 900)


def test_the_cleared_environment_drops_every_variable_the_service_reads() -> None:
    from app.config_env import without_service_variables

    environ = {name: "x" for name in all_env_names()}
    environ |= {"RAG_V2__FUSION__NEW_KNOB": "1", "PATH": "/bin", "HOME": "/root"}
    assert without_service_variables(environ) == {"PATH": "/bin", "HOME": "/root"}
    # rag_api's alias names are read too (AWS_REGION for S3_REGION), so they go as well
    assert "AWS_REGION" in all_env_names() and "ALLOWLIST_FAIL_OPEN" in all_env_names()
