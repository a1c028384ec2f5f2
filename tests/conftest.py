"""Test-wide fixtures live in tests/fixtures/ as plugins, so every layer can use them."""

import os

import pytest

from app.config_env import without_service_variables

# Tests must never pick up a developer's .env or shell configuration of the service: every variable
# the service reads (the Settings class's own list) is cleared.
_KEEP = without_service_variables(os.environ)
for _name in list(os.environ):
    if _name not in _KEEP:
        del os.environ[_name]

pytest_plugins = [
    "tests.fixtures.service",
    "tests.fixtures.s3_server",
    "tests.fixtures.fake_providers",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first: they are pure and fast, and no session-wide app runs background tasks yet."""
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.path) else 1)
