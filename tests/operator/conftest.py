"""Fixtures of the operator-script tests: a real MongoDB wire-protocol server (nx-27017)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.database import Database

from tests.fixtures.mongo_server import mongo_server
from tests.operator.catalogue_seed import database


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
