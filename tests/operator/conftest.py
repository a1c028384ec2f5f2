"""Fixtures of the operator-script tests: our service as a process, a real MongoDB wire-protocol server."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from app.config_env import without_service_variables
from tests.fixtures.mongo_server import mongo_server
from tests.fixtures.serve import free_port, serving
from tests.operator.catalogue_seed import database

OPERATOR_JWT_SECRET = "ragoverlay-operator-test-secret-0123456789abcdef"


@pytest.fixture(scope="session")
def mongo_uri() -> Iterator[str]:
    """URI of an nx-27017 server shared by the operator tests (each test uses its own database)."""
    with mongo_server() as uri:
        yield uri


@pytest.fixture
def mongo_db(mongo_uri: str, request: pytest.FixtureRequest) -> Iterator[Database[dict[str, Any]]]:
    """A database of this test's own on the shared server."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    with database(mongo_uri, name) as db:
        yield db


# Agents with V2 enabled on the operator service (tests/operator/test_validate_e2e.py --v2)
V2_AGENTS = ("agent_validator_v2_a", "agent_validator_v2_b")


@dataclass(frozen=True)
class RagService:
    """Our own service started by `scripts/serve` on embedded defaults, with a JWT secret."""

    url: str
    jwt_secret: str
    data_dir: Path


@pytest.fixture(scope="session")
def rag_service() -> Iterator[RagService]:
    """scripts/serve as a process (embedded PostgreSQL, local blobs, offline model), shared by this folder."""
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-operator-"))
    data_dir.chmod(0o755)  # the embedded server may run as another user when tests run as root
    port = free_port()
    env = without_service_variables(os.environ)
    env.update(
        {
            "RAG_PORT": str(port),
            "RAG_HOST": "127.0.0.1",
            "DATA_DIR": str(data_dir),
            "JWT_SECRET": OPERATOR_JWT_SECRET,
            # the default once the entity_id rule of CONTRACT.md section 3 is in; harmless before
            "ENTITY_ID_PATTERN": r"^agent_[A-Za-z0-9_-]{1,100}$",
            # /query_v2 for the V2 validator test's Agents (their first upload builds the index)
            "RAG_V2_NAMESPACE_IDS": ",".join(V2_AGENTS),
        }
    )
    try:
        with serving(env, data_dir / "serve.log", timeout_s=240):
            yield RagService(f"http://127.0.0.1:{port}", OPERATOR_JWT_SECRET, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
