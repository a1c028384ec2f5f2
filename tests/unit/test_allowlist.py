"""The allow-list re-check's pure parts: the grant cache (TTL, weight bound), the editor rule, settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from bson import ObjectId

from app.access.allowlist import Grant, GrantCache, OpenAllowList, describe
from app.access.librechat_rule import agent_bits, editable_agent_ids, user_principals
from app.access.principal import Principal as Caller
from app.access.viewer import Viewer
from app.catalogue.documents import DELETE, EDIT, SHARE, VIEW
from app.config import load_settings
from app.config_sections import AllowlistSettings
from app.errors import ConfigError

NOW = datetime(2026, 7, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def grant(clock: Clock, ttl: float, files: int = 0, user: str = "u") -> Grant:
    viewer = Viewer(user, None, user_principals(user), None, ())
    g = Grant(viewer, expires_at=clock() + ttl)
    g.records.update({f"f{i}": None for i in range(files)})
    return g


def test_grants_expire_after_their_ttl() -> None:
    clock = Clock()
    cache = GrantCache(30.0, 1000, clock)
    g = grant(clock, 30.0)
    cache.put(("u", "a"), g)
    clock.now += 29.9
    assert cache.get(("u", "a")) is g
    clock.now += 0.1
    assert cache.get(("u", "a")) is None and len(cache) == 0 and cache.weight == 0


def test_weight_bound_evicts_least_recently_used() -> None:
    clock = Clock()
    cache = GrantCache(30.0, 25, clock)
    first, second = grant(clock, 30, files=9), grant(clock, 30, files=9)  # weight 10 each
    cache.put(("u", "1"), first)
    cache.put(("u", "2"), second)
    assert cache.get(("u", "1")) is first  # now the most recently used
    cache.put(("u", "3"), grant(clock, 30, files=9))
    assert cache.get(("u", "2")) is None and cache.get(("u", "1")) is first
    assert cache.weight == 20
    # a grant that learns more file records is re-weighed; alone over the bound it is not kept
    first.records.update({f"x{i}": None for i in range(30)})
    cache.put(("u", "1"), first)
    assert cache.get(("u", "1")) is None and cache.weight <= 25


@pytest.mark.parametrize(("ttl", "size"), [(0.0, 1000), (30.0, 0)])
def test_zero_ttl_or_size_disables_the_cache(ttl: float, size: int) -> None:
    clock = Clock()
    cache = GrantCache(ttl, size, clock)
    cache.put(("u", "a"), grant(clock, ttl))
    assert cache.get(("u", "a")) is None and not cache.enabled


def test_agent_bits_and_editors() -> None:
    author, editor, viewer, stranger = (str(ObjectId()) for _ in range(4))
    agent_a = {"_id": ObjectId(), "id": "agent_a", "author": ObjectId(author)}
    agent_b = {"_id": ObjectId(), "id": "agent_b", "author": ObjectId(author)}
    entries = [
        {"principalType": "user", "principalId": ObjectId(editor), "resourceType": "agent",
         "resourceId": agent_a["_id"], "permBits": VIEW | EDIT},
        {"principalType": "user", "principalId": ObjectId(viewer), "resourceType": "agent",
         "resourceId": agent_a["_id"], "permBits": VIEW},
        {"principalType": "user", "principalId": ObjectId(editor), "resourceType": "agent",
         "resourceId": agent_b["_id"], "permBits": VIEW | EDIT, "expiredAt": NOW - timedelta(seconds=1)},
    ]  # fmt: skip

    def bits(user: str, agent: dict[str, object] | None = agent_a) -> int:
        return agent_bits(
            user_id=user, agent=agent, acl_entries=entries, principals=user_principals(user), now=NOW
        )

    assert bits(author) == VIEW | EDIT | DELETE | SHARE
    assert bits(editor) == VIEW | EDIT and bits(viewer) == VIEW and bits(stranger) == 0
    assert bits(editor, None) == 0  # an unknown Agent grants nothing

    def editable(user: str) -> set[str]:
        return set(
            editable_agent_ids(
                user_id=user,
                agents=[agent_a, agent_b],
                acl_entries=entries,
                principals=user_principals(user),
                now=NOW,
            )
        )

    assert editable(author) == {"agent_a", "agent_b"}
    assert editable(editor) == {"agent_a"}  # the EDIT entry on agent_b expired
    assert editable(viewer) == set() and editable(stranger) == set()


async def test_off_passes_ids_unchanged() -> None:
    allowlist = OpenAllowList()
    caller = Caller("u")
    assert await allowlist.searchable(caller, "agent_x", ["a", "b"]) == ["a", "b"]
    assert await allowlist.agent_visible(caller, "agent_x") and await allowlist.editable_agents(caller) == []


def test_settings_need_a_uri_and_a_secret() -> None:
    with pytest.raises(ConfigError, match="LIBRECHAT_MONGO_URI"):
        load_settings(_env_file=None, allowlist_verify="mongo", jwt_secret="s")
    with pytest.raises(ConfigError, match="JWT_SECRET"):
        load_settings(_env_file=None, allowlist_verify="mongo", librechat_mongo_uri="mongodb://m/LibreChat")
    with pytest.raises(ConfigError, match="ALLOWLIST_CACHE_TTL_S"):
        load_settings(_env_file=None, allowlist_cache_ttl_s=3600)
    settings = load_settings(
        _env_file=None,
        allowlist_verify="MONGO",
        jwt_secret="s",
        librechat_mongo_uri="mongodb://reader:hunter2@mongo-1:27017,mongo-2/LibreChat?authSource=admin",
    )
    assert settings.allowlist_verify == "mongo"
    line = describe(AllowlistSettings.from_settings(settings))
    assert "hunter2" not in line and "reader" not in line and "mongo-1:27017,mongo-2" in line
