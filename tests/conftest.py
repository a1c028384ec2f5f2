"""Test-wide fixtures live in tests/fixtures/ as plugins, so every layer can use them."""

import os
from collections.abc import Iterator

import pytest

from app.config_env import without_service_variables
from tests.fixtures.patience import ceiling

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


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """pytest-timeout's limit of each test (its mark, else `timeout` in pyproject.toml), stretched for
    how busy the machine is as the test starts (tests/fixtures/patience.py): a hang still fails, a
    busy machine does not. Runs before pytest-timeout's own wrapper reads the mark."""
    marker = item.get_closest_marker("timeout")
    limit = (
        float(marker.args[0]) if marker is not None and marker.args else float(item.config.getini("timeout"))
    )
    if limit > 0:
        item.add_marker(pytest.mark.timeout(ceiling(limit)), append=False)
    yield
