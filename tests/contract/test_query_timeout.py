"""QUERY_TIMEOUT_MS is what docs/tuning.md says: how long a search may wait for a pooled
connection (and then run its statement); past it the request answers 503 (with a detail and
Retry-After) without waiting any longer."""

from __future__ import annotations

import time

from tests.contract.helpers import query, upload
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app


async def test_a_search_waits_for_a_connection_at_most_query_timeout_ms(
    settings_factory: SettingsFactory,
) -> None:
    settings = settings_factory(query_timeout_ms=300, db_pool_min_size=1, db_pool_max_size=1)
    async with running_app(settings) as c:
        user, fid = new_id("user"), new_id()
        assert (await upload(c, fid, "a.txt", b"Herons stand still.", auth(user))).status_code == 200
        assert (await query(c, "herons", fid, auth(user))).status_code == 200
        pool = resources(c).pool
        async with pool.acquire():  # the only connection is busy elsewhere
            started = time.monotonic()
            r = await query(c, "herons", fid, auth(user))
            waited = time.monotonic() - started
        assert r.status_code == 503
        assert r.json()["detail"].startswith("No database connection became free within 0.3 s")
        assert r.json()["request_id"] and r.headers["retry-after"] == "2"
        assert waited >= 0.3
        assert waited < ceiling(2.0), out_of_time("the 503 after QUERY_TIMEOUT_MS (0.3 s)", waited)
        assert (await query(c, "herons", fid, auth(user))).status_code == 200  # and it recovers
