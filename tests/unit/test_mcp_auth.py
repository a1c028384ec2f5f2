"""Who may call the MCP server: the four modes, each failing closed (pure, no sockets)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from app.config import Settings, load_settings
from app.config_sections import McpSettings
from app.errors import BadRequest, ConfigError, Unauthorized
from app.mcp.auth import McpAuthenticator, parse_api_keys, stdio_caller
from tests.fixtures.service import TEST_JWT_SECRET, make_token

KEY = "k-0123456789abcdef"
GATEWAY = "g-0123456789abcdef"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"_env_file": None, "database_url": "postgresql://u@localhost/d"}
    values.update(overrides)
    return load_settings(**values)


def mcp(**overrides: Any) -> McpSettings:
    """The MCP section of `settings(**overrides)`, as the app builds it."""
    return McpSettings.from_settings(settings(**overrides))


def test_api_key_entries_parse_with_and_without_namespaces() -> None:
    keys = parse_api_keys([f"{sha(KEY)}:svc", f"{sha('other')}:bot:agent_a|agent_b|agent_a"])
    assert keys[0].principal == "svc" and keys[0].namespaces == ("svc",)
    assert keys[1].namespaces == ("agent_a", "agent_b")  # de-duplicated, order kept


@pytest.mark.parametrize(
    "entry", ["nothex:svc", f"{sha(KEY)}", f"{sha(KEY)}:a:b:c", f"{sha(KEY).upper()}:svc"]
)
def test_malformed_api_key_entries_refuse_to_start(entry: str) -> None:
    with pytest.raises(ConfigError, match="MCP_API_KEYS"):
        settings(mcp_api_keys=[entry])


def test_the_gateway_mode_refuses_to_start_without_the_catalogue() -> None:
    with pytest.raises(ConfigError, match="ALLOWLIST_VERIFY=mongo"):
        settings(jwt_secret=TEST_JWT_SECRET, mcp_gateway_key_sha256=sha(GATEWAY))


def test_nothing_configured_means_public_as_on_the_http_routes() -> None:
    caller = McpAuthenticator(mcp()).authenticate([], [])
    assert caller.mode == "anonymous" and caller.owners(None) == ["public"]


def test_a_configured_key_closes_the_open_door() -> None:
    auth = McpAuthenticator(mcp(mcp_api_keys=[f"{sha(KEY)}:svc:ns1|ns2"]))
    with pytest.raises(Unauthorized):
        auth.authenticate([], [])
    with pytest.raises(Unauthorized, match="not a configured MCP key"):
        auth.authenticate(["Bearer wrong"], [])
    caller = auth.authenticate([f"Bearer {KEY}"], [])
    assert caller.mode == "api_key" and caller.owners(None) == ["ns1", "ns2"] and caller.uploader is None
    assert caller.owners(caller.entity("ns2", settings().entity_id_regex)) == ["ns2"]
    with pytest.raises(BadRequest, match="one of this caller's namespaces"):
        caller.entity("agent_elsewhere", settings().entity_id_regex)


def test_jwt_mode_uses_the_http_rules() -> None:
    auth = McpAuthenticator(mcp(jwt_secret=TEST_JWT_SECRET, admin_user_ids=["boss"]))
    caller = auth.authenticate([f"Bearer {make_token('alice')}"], [])
    assert caller.mode == "jwt" and caller.owners("agent_kb") == ["alice", "agent_kb"]
    assert auth.authenticate([f"Bearer {make_token('boss')}"], []).principal.is_admin
    with pytest.raises(Unauthorized, match="expired"):
        auth.authenticate([f"Bearer {make_token('alice', ttl=-60)}"], [])
    with pytest.raises(Unauthorized):
        auth.authenticate(["Bearer a", "Bearer b"], [])  # two headers: which one would count?
    with pytest.raises(BadRequest, match="ENTITY_ID_PATTERN"):
        caller.entity(
            "bob", settings().entity_id_regex
        )  # a user id cannot be named to read another user's files


def test_gateway_mode_needs_exactly_one_user_header() -> None:
    gateway = settings(
        jwt_secret=TEST_JWT_SECRET,
        allowlist_verify="mongo",
        librechat_mongo_uri="mongodb://127.0.0.1:1/LibreChat",
        mcp_gateway_key_sha256=sha(GATEWAY),
    )
    auth = McpAuthenticator(McpSettings.from_settings(gateway))
    caller = auth.authenticate([f"Bearer {GATEWAY}"], ["6650f0c2a1b2c3d4e5f60718"])
    assert caller.mode == "gateway" and caller.principal.user_id == "6650f0c2a1b2c3d4e5f60718"
    assert caller.uses_catalogue
    for headers in ([], ["a", "b"], ["  "], ["public"], ["x\x00y"]):
        with pytest.raises(Unauthorized):
            auth.authenticate([f"Bearer {GATEWAY}"], headers)


def test_stdio_is_one_explicit_principal() -> None:
    caller = stdio_caller(frozenset(), "alice", [])
    assert caller.mode == "stdio" and caller.owners(None) == ["alice"]
    assert stdio_caller(frozenset(), "alice", ["agent_a", "alice"]).owners(None) == ["agent_a", "alice"]
    with pytest.raises(ValueError, match="principal"):
        stdio_caller(frozenset(), " ", [])
