"""Test-wide fixtures live in tests/fixtures/ as plugins, so every layer can use them."""

import os

import pytest

# Tests must never pick up a developer's .env or shell configuration of the service.
for _name in list(os.environ):
    if _name.startswith(("RAG_", "POSTGRES_", "DB_", "JWT_", "EMBEDDINGS_", "S3_", "DATABASE_URL")):
        del os.environ[_name]

pytest_plugins = [
    "tests.fixtures.service",
    "tests.fixtures.s3_server",
    "tests.fixtures.fake_providers",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first: they are pure and fast, and no session-wide app runs background tasks yet."""
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.path) else 1)
