"""The environment variables the Settings read: their names, for docs, tests and benchmarks.

Kept beside app/config.py (which defines the fields) so the settings module holds the fields only.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import AliasChoices

from app.config import Settings
from app.evidence.settings import ENV_DELIMITER, leaf_defaults
from app.evidence.settings import ENV_PREFIX as V2_ENV_PREFIX


def env_names(field_name: str) -> list[str]:
    """All environment variable names a field reads, in priority order (every leaf for `v2`)."""
    if field_name == "v2":
        return list(leaf_defaults())
    field = Settings.model_fields[field_name]
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(c) for c in alias.choices]
    return [field_name.upper()]


def all_env_names() -> list[str]:
    """Every environment variable the service reads."""
    return [name for field in Settings.model_fields for name in env_names(field)]


def without_service_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` minus every variable that would configure the service (for tests and benchmarks)."""
    read = set(all_env_names())
    nested = V2_ENV_PREFIX + ENV_DELIMITER
    return {k: v for k, v in environ.items() if k not in read and not k.startswith(nested)}
