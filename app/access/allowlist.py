"""Allow-lists re-checked against LibreChat's own catalogue (`ALLOWLIST_VERIFY=mongo`, CONTRACT.md section 7).

LibreChat is the primary authorisation boundary: it sends only file ids the user passed its checks
for. With the re-check on, every route that reads file contents narrows its file ids to those the
token's user may search by LibreChat's rule (`librechat_rule`, read with `viewer` and
`app/catalogue/mongo.py`) *before* they become the `Scope`'s allow-list, so the SQL predicate carries
the narrowed list; nothing is filtered after ranking.

What is read once per (user, Agent) (the user's principals, the Agent, its ACL entries) and the
file records looked up for it are cached together for `ALLOWLIST_CACHE_TTL_S`, in an LRU bounded
by `ALLOWLIST_CACHE_SIZE` (an entry counts 1 plus each file record and ACL entry it holds). The
rule itself is evaluated on every request, so an ACL entry's `expiredAt` counts to the second.

pymongo is synchronous here on purpose: the readers in `app/catalogue/mongo.py` are shared with
`scripts/validate_deployment.py` and tested against a real wire-protocol server, and a cache miss
(one per pair and TTL) is the only time a request waits for MongoDB. Misses run in a small thread
pool of their own (a slow MongoDB cannot occupy the default executor other work uses), each bounded
by pymongo's client-side operation timeout (`pymongo.timeout`, which also sends `maxTimeMS`) and by
an `asyncio` deadline behind it. Concurrent misses on one pair share one read.

MongoDB unreachable (or any read failing): 503 with a detail that says so (fail closed), unless
`ALLOWLIST_FAIL_OPEN=true`, which logs a warning and lets the request through unchecked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import pymongo
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from app.access.librechat_rule import agent_bits, is_ephemeral_agent_id
from app.access.principal import Principal
from app.access.viewer import Viewer, read_viewer, user_editable_agents
from app.catalogue import mongo
from app.catalogue.documents import VIEW, Document
from app.config_sections import AllowlistSettings
from app.errors import ConfigError, ServiceUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")

MONGO_THREADS = 4  # catalogue reads in flight at once; more wait for a thread (each is a few ms)
UNAVAILABLE_DETAIL = (
    "LibreChat's catalogue (MongoDB) could not be read to check which files you may use, so nothing "
    "was searched or read; try again shortly. Operators: check LIBRECHAT_MONGO_URI and that MongoDB "
    "answers (ALLOWLIST_FAIL_OPEN=true lets requests through unchecked while it is down)"
)


class CatalogueUnavailable(ServiceUnavailable):
    """LibreChat's catalogue could not be read, and the re-check fails closed."""

    default_detail = UNAVAILABLE_DETAIL


class AllowList(Protocol):
    """Narrows a caller's file ids to those LibreChat's catalogue lets them use."""

    enabled: bool

    async def searchable(
        self, principal: Principal, entity_id: str | None, file_ids: Sequence[str]
    ) -> list[str]:
        """The file ids (in request order) this caller may search or read through `entity_id`."""
        ...

    async def agent_visible(self, principal: Principal, entity_id: str) -> bool:
        """True when the caller may use the Agent at all (its author, or the VIEW bit)."""
        ...

    async def editable_agents(self, principal: Principal) -> list[str]:
        """The Agent ids whose files this caller may delete as an editor (author or EDIT bit)."""
        ...

    async def aclose(self) -> None:
        """Release the client and threads."""
        ...


class OpenAllowList:
    """`ALLOWLIST_VERIFY=off`: every id passes unchanged; the scope predicate alone decides."""

    enabled = False

    async def searchable(
        self, principal: Principal, entity_id: str | None, file_ids: Sequence[str]
    ) -> list[str]:
        """The ids unchanged."""
        return list(file_ids)

    async def agent_visible(self, principal: Principal, entity_id: str) -> bool:
        """Always True."""
        return True

    async def editable_agents(self, principal: Principal) -> list[str]:
        """None: without the catalogue nobody is an editor."""
        return []

    async def aclose(self) -> None:
        """Nothing to release."""


@dataclass
class Grant:
    """What was read for one (user, Agent): the viewer and the file records looked up since."""

    viewer: Viewer
    expires_at: float
    # file id -> its record (`file_id`, `user` only), or None when the catalogue has no such file
    records: dict[str, Document | None] = field(default_factory=dict)
    editable: frozenset[str] | None = None

    @property
    def weight(self) -> int:
        """What this entry costs in the cache: 1, plus its file records, ACL entries and Agent ids."""
        return 1 + len(self.records) + len(self.viewer.acl_entries) + len(self.editable or ())


class GrantCache:
    """An LRU of grants that each live `ttl_s` from their read, with their total weight bounded."""

    def __init__(self, ttl_s: float, max_weight: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_weight = max_weight
        self.clock = clock
        self._items: OrderedDict[tuple[str, str], Grant] = OrderedDict()
        self._weights: dict[tuple[str, str], int] = {}
        self.weight = 0

    @property
    def enabled(self) -> bool:
        """False when the TTL or the size is 0: every request reads the catalogue."""
        return self.ttl_s > 0 and self.max_weight > 0

    def get(self, key: tuple[str, str]) -> Grant | None:
        """The live grant for `key` (refreshed as most recently used), or None; expired ones are dropped."""
        grant = self._items.get(key)
        if grant is None:
            return None
        if grant.expires_at <= self.clock():
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return grant

    def put(self, key: tuple[str, str], grant: Grant) -> None:
        """Store or re-weigh `grant`, then evict the least recently used beyond the size bound."""
        if not self.enabled or grant.expires_at <= self.clock():
            self._drop(key)
            return
        if key in self._items and self._items[key] is not grant:
            self._drop(key)
        self.weight += grant.weight - self._weights.get(key, 0)
        self._weights[key] = grant.weight
        self._items[key] = grant
        self._items.move_to_end(key)
        while self.weight > self.max_weight and self._items:
            self._drop(next(iter(self._items)))

    def _drop(self, key: tuple[str, str]) -> None:
        if self._items.pop(key, None) is not None:
            self.weight -= self._weights.pop(key, 0)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Forget everything."""
        self._items.clear()
        self._weights.clear()
        self.weight = 0


def _record(doc: Document) -> Document:
    """The two fields of a file record the rule reads."""
    return {"file_id": str(doc.get("file_id")), "user": doc.get("user")}


class CatalogueAllowList:
    """The re-check against LibreChat's MongoDB: cached per (user, Agent), fail closed by default."""

    enabled = True

    def __init__(
        self,
        db: Database[dict[str, Any]],
        *,
        timeout_ms: int = 2000,
        ttl_s: float = 30.0,
        cache_size: int = 100_000,
        fail_open: bool = False,
        clock: Callable[[], float] = time.monotonic,
        close: Callable[[], None] | None = None,
    ) -> None:
        self._db = db
        self._timeout_s = timeout_ms / 1000
        self._fail_open = fail_open
        self.cache = GrantCache(ttl_s, cache_size, clock)
        self._loading: dict[tuple[str, str], asyncio.Future[Grant]] = {}
        self._pool = ThreadPoolExecutor(MONGO_THREADS, thread_name_prefix="catalogue")
        self._close = close
        self.reads = 0  # catalogue round trips started (the caching tests count them)

    @classmethod
    def from_settings(cls, settings: AllowlistSettings) -> CatalogueAllowList:
        """A client for LIBRECHAT_MONGO_URI (it connects lazily: start-up never waits for MongoDB)."""
        assert settings.mongo_uri, "Settings refuses ALLOWLIST_VERIFY=mongo without a URI"
        timeout = settings.timeout_ms
        try:
            client = mongo.connect(
                settings.mongo_uri,
                timeout_ms=timeout,
                timeoutMS=timeout,
                maxPoolSize=MONGO_THREADS,
                appname="ragoverlay",
            )
        except (ConfigurationError, ValueError, TypeError) as exc:
            # pymongo's message names the bad option, never the password
            raise ConfigError(f"LIBRECHAT_MONGO_URI is not a usable MongoDB URI: {exc}") from None
        return cls(
            mongo.catalogue_database(client, settings.mongo_db),
            timeout_ms=timeout,
            ttl_s=settings.cache_ttl_s,
            cache_size=settings.cache_size,
            fail_open=settings.fail_open,
            close=client.close,
        )

    # --- the three questions --------------------------------------------------------------------
    async def searchable(
        self, principal: Principal, entity_id: str | None, file_ids: Sequence[str]
    ) -> list[str]:
        """The file ids (in request order) this caller may search or read through `entity_id`."""
        ids = list(dict.fromkeys(file_ids))
        user = principal.user_id
        if not user:
            return []  # Settings refuses the re-check without JWT_SECRET; never widen if it happens
        if not ids:
            return ids
        try:
            grant, key = await self._grant(user, entity_id)
            missing = [i for i in ids if i not in grant.records]
            if missing:
                found = {
                    str(d.get("file_id")): _record(d) for d in await self._read(mongo.read_files, missing)
                }
                for file_id in missing:
                    grant.records[file_id] = found.get(file_id)
                self._reweigh(key, grant)
            files = [r for i in ids if (r := grant.records.get(i)) is not None]
            allowed = grant.viewer.searchable(ids, files, datetime.now(UTC))
        except (PyMongoError, TimeoutError) as exc:
            self._unavailable("searching or reading files", exc)
            return ids
        return [i for i in ids if i in allowed]

    async def agent_visible(self, principal: Principal, entity_id: str) -> bool:
        """True when the caller may use the Agent at all (its author, or the VIEW bit)."""
        user = principal.user_id
        if not user:
            return False
        if is_ephemeral_agent_id(entity_id):
            return True
        try:
            grant, _ = await self._grant(user, entity_id)
        except (PyMongoError, TimeoutError) as exc:
            self._unavailable("listing an Agent's files", exc)
            return True
        viewer = grant.viewer
        bits = agent_bits(
            user_id=user,
            agent=viewer.agent,
            acl_entries=viewer.acl_entries,
            principals=viewer.principals,
            now=datetime.now(UTC),
        )
        return bool(bits & VIEW)

    async def editable_agents(self, principal: Principal) -> list[str]:
        """The Agent ids this caller may delete files of (author or EDIT bit); [] when unreadable."""
        user = principal.user_id
        if not user:
            return []
        try:
            grant, key = await self._grant(user, None)
            if grant.editable is None:
                grant.editable = await self._read(
                    user_editable_agents, user_id=user, principals=grant.viewer.principals
                )
                self._reweigh(key, grant)
        except (PyMongoError, TimeoutError) as exc:
            # only ever a widening: without it a delete is what it is with the re-check off
            logger.warning(
                "LibreChat's catalogue could not be read (%s): Agent editors' deletes fall back to the "
                "owner/uploader rule for this request",
                type(exc).__name__,
            )
            return []
        return sorted(grant.editable)

    # --- cache and reads --------------------------------------------------------------------------
    async def _grant(self, user: str, agent_id: str | None) -> tuple[Grant, tuple[str, str]]:
        key = (user, agent_id or "")
        grant = self.cache.get(key)
        if grant is not None:
            return grant, key
        future = self._loading.get(key)
        if future is None:
            future = asyncio.ensure_future(self._load(key, user, agent_id))
            self._loading[key] = future
            future.add_done_callback(functools.partial(self._loaded, key))
        # shield: one waiter being cancelled must not cancel the read the others wait on
        return await asyncio.shield(future), key

    def _loaded(self, key: tuple[str, str], future: asyncio.Future[Grant]) -> None:
        if self._loading.get(key) is future:
            del self._loading[key]
        if not future.cancelled():
            future.exception()  # retrieved: a failure nobody waits for any more is not "never retrieved"

    def _reweigh(self, key: tuple[str, str], grant: Grant) -> None:
        """Account for what a cached grant learned (a grant already evicted stays out)."""
        if self.cache.get(key) is grant:
            self.cache.put(key, grant)

    async def _load(self, key: tuple[str, str], user: str, agent_id: str | None) -> Grant:
        started = self.cache.clock()
        viewer = await self._read(read_viewer, user_id=user, agent_id=agent_id)
        grant = Grant(viewer, expires_at=started + self.cache.ttl_s)
        self.cache.put(key, grant)
        return grant

    async def _read(self, reader: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one catalogue reader in the pool, bounded by pymongo's timeout and a deadline behind it."""
        self.reads += 1
        call = functools.partial(self._bounded, reader, *args, **kwargs)
        loop = asyncio.get_running_loop()
        # the thread ends by pymongo's own timeout; this deadline only guards against a stuck pool
        return await asyncio.wait_for(loop.run_in_executor(self._pool, call), self._timeout_s * 3 + 1)

    def _bounded(self, reader: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # every operation in the block shares one client-side deadline (pymongo's CSOT)
        with pymongo.timeout(self._timeout_s * 2):
            return reader(self._db, *args, **kwargs)

    def _unavailable(self, what: str, exc: BaseException) -> None:
        if self._fail_open:
            logger.warning(
                "LibreChat's catalogue (MongoDB) could not be read (%s); ALLOWLIST_FAIL_OPEN=true, so %s "
                "goes on WITHOUT the allow-list re-check",
                type(exc).__name__,
                what,
            )
            return
        logger.error(
            "LibreChat's catalogue (MongoDB) could not be read (%s); refusing %s (503)",
            type(exc).__name__,
            what,
        )
        raise CatalogueUnavailable()

    async def aclose(self) -> None:
        """Close the MongoDB client and stop the reader threads."""
        for future in list(self._loading.values()):
            future.cancel()
        self.cache.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._close is not None:
            await asyncio.to_thread(self._close)


def build_allowlist(settings: AllowlistSettings) -> AllowList:
    """The allow-list check ALLOWLIST_VERIFY asks for."""
    if settings.verify == "mongo":
        return CatalogueAllowList.from_settings(settings)
    return OpenAllowList()


def describe(settings: AllowlistSettings) -> str:
    """A start-up line naming the catalogue's hosts, never its credentials."""
    if settings.verify != "mongo":
        return "off"
    rest = (settings.mongo_uri or "").split("://", 1)[-1]
    hosts = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    return f"mongo ({hosts}, cache {settings.cache_ttl_s:g} s)"


__all__ = [
    "UNAVAILABLE_DETAIL",
    "AllowList",
    "CatalogueAllowList",
    "CatalogueUnavailable",
    "Grant",
    "GrantCache",
    "OpenAllowList",
    "build_allowlist",
    "describe",
]
