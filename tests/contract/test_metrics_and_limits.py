"""`/metrics` (who may read it, what it holds) and the per-client rate limits (429 + Retry-After)."""

from __future__ import annotations

import re

import httpx

from app import metrics
from tests.contract.helpers import query, upload
from tests.fixtures.service import SettingsFactory, auth, new_id, running_app

METRICS_TOKEN = "scraper-token-0123456789"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics_readers_and_contents(settings_factory: SettingsFactory) -> None:
    settings = settings_factory(metrics_token=METRICS_TOKEN, admin_user_ids=["admin-1"])
    async with running_app(settings) as c:
        user, fid = new_id("user"), new_id()
        assert (
            await upload(c, fid, "a.txt", b"Terns migrate from pole to pole.", auth(user))
        ).status_code == 200
        assert (await query(c, "terns", fid, auth(user))).status_code == 200
        jobs = metrics.gauge("ragoverlay_test_jobs", "Jobs by status (test)", ("status",))

        async def refresh() -> None:
            jobs.labels(status="queued").set(7)

        forget = metrics.on_scrape(refresh)
        try:
            assert (await c.get("/metrics")).status_code == 401
            assert (await c.get("/metrics", headers=auth(user))).status_code == 403
            wrong = await c.get("/metrics", headers={"Authorization": "Bearer not-the-token-at-all"})
            assert wrong.status_code == 401
            by_admin = await c.get("/metrics", headers=auth("admin-1"))
            assert by_admin.status_code == 200
            r = await c.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        finally:
            forget()
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        text = r.text
        route = {"route": "/query", "method": "POST", "status": "200"}
        assert sample(text, "ragoverlay_http_request_duration_seconds_count", **route) >= 1
        assert (
            sample(text, "ragoverlay_request_stage_duration_seconds_count", route="/query", stage="embed")
            >= 1
        )
        assert (
            sample(text, "ragoverlay_request_stage_duration_seconds_count", route="/query", stage="db") >= 1
        )
        assert sample(text, "ragoverlay_ingest_stage_duration_seconds_count", stage="parse") >= 1
        assert sample(text, "ragoverlay_ingest_stage_duration_seconds_count", stage="store") >= 1
        assert sample(text, "ragoverlay_embedding_calls_total", kind="documents", outcome="ok") >= 1
        assert sample(text, "ragoverlay_embedding_calls_total", kind="query", outcome="ok") >= 1
        assert sample(text, "ragoverlay_database_up") == 1.0
        assert sample(text, "ragoverlay_db_pool_size") >= 1
        assert sample(text, "ragoverlay_test_jobs", status="queued") == 7.0
        assert "process_resident_memory_bytes" in text
        # ids never become labels: the route template is used, unknown paths are one label
        await c.get(f"/documents/{fid}/context", headers=auth(user))
        await c.get(f"/no-such-path-{new_id()}", headers=auth(user))
        text = (await c.get("/metrics", headers=auth("admin-1"))).text
        assert fid not in text
        assert 'route="/documents/{file_id}/context"' in text and 'route="unmatched"' in text


async def test_search_and_embed_limits_answer_429_with_retry_after(settings_factory: SettingsFactory) -> None:
    settings = settings_factory(search_rate_per_minute=3, embed_rate_per_minute=1)
    async with running_app(settings) as c:
        me, you, fid = new_id("user"), new_id("user"), new_id()
        assert (await upload(c, fid, "a.txt", b"Auks swim with their wings.", auth(me))).status_code == 200
        refused = await upload(c, new_id(), "b.txt", b"Second upload.", auth(me))
        assert refused.status_code == 429
        assert "EMBED_RATE_PER_MINUTE" in refused.json()["detail"]
        assert int(refused.headers["retry-after"]) == 60
        statuses = [(await query(c, "auks", fid, auth(me))).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        limited = await query(c, "auks", fid, auth(me))
        assert limited.status_code == 429
        assert "SEARCH_RATE_PER_MINUTE allows 3 per minute" in limited.json()["detail"]
        assert int(limited.headers["retry-after"]) == 20
        many = await c.post("/query_multiple", json={"query": "auks", "file_ids": [fid]}, headers=auth(me))
        assert many.status_code == 429  # one budget for every search route
        assert (await query(c, "auks", fid, auth(you))).status_code == 200  # per client
        assert (await c.get("/ids", headers=auth(me))).status_code == 200  # not a limited route
        spec = (await c.get("/openapi.json")).json()
        assert "429" in spec["paths"]["/query"]["post"]["responses"]
        assert "429" in spec["paths"]["/embed"]["post"]["responses"]
        assert "429" not in spec["paths"]["/ids"]["get"]["responses"]


async def test_without_limits_a_librechat_fan_out_passes(client: httpx.AsyncClient) -> None:
    """The default (no search limit): 200 parallel /query from one user, as stock file_search sends."""
    import asyncio

    user, fid = new_id("user"), new_id()
    assert (await upload(client, fid, "a.txt", b"Shearwaters skim the waves.", auth(user))).status_code == 200
    answers = await asyncio.gather(*(query(client, "shearwaters", fid, auth(user)) for _ in range(200)))
    assert {r.status_code for r in answers} == {200}
