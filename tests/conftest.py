"""Test-wide fixtures live in tests/fixtures/ as plugins, so every layer can use them."""

import os

# Tests must never pick up a developer's .env or shell configuration of the service.
for _name in list(os.environ):
    if _name.startswith(("RAG_", "POSTGRES_", "DB_", "JWT_", "EMBEDDINGS_", "S3_", "DATABASE_URL")):
        del os.environ[_name]

pytest_plugins = [
    "tests.fixtures.service",
    "tests.fixtures.s3_server",
    "tests.fixtures.fake_providers",
]
