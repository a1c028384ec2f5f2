"""Admin routes, uploads accepted as jobs (202), a caller's own job, the V2 registration point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.store.migrate import load_migrations
from tests.fixtures.patience import until
from tests.fixtures.service import SettingsFactory, auth, new_id, running_app

pytestmark = pytest.mark.timeout(120)

ADMIN_ROUTES = [
    ("GET", "/admin/status"),
    ("GET", "/admin/jobs"),
    ("GET", "/admin/jobs/1"),
    ("POST", "/admin/jobs/1/retry"),
    ("POST", "/admin/reindex?namespace=agent_x"),
]


@pytest.fixture(scope="module")
async def app(settings_factory: SettingsFactory) -> AsyncIterator[httpx.AsyncClient]:
    """An app of its own (its queue is its collection), with fast retries."""
    settings = settings_factory(indexer_retry_base_ms=50, indexer_retry_max_ms=200)
    async with running_app(settings) as client:
        yield client


def admin() -> dict[str, str]:
    return auth(new_id("admin"), role="ADMIN")


async def wait_job(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], *statuses: str
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        r = await client.get(url, headers=headers)
        assert r.status_code == 200, r.text
        return dict(r.json()) if r.json()["status"] in statuses else None

    found = await until(reached, what=f"{url} to be {' or '.join(statuses)}", within_s=60)
    assert found is not None
    return found


async def test_admin_routes_need_an_admin(app: httpx.AsyncClient) -> None:
    for method, url in ADMIN_ROUTES:
        r = await app.request(method, url)
        assert r.status_code == 401, (method, url)
        r = await app.request(method, url, headers=auth(new_id("user")))
        assert r.status_code == 403 and "admin" in r.json()["detail"], (method, url)


async def test_status_reports_queue_workers_versions_and_maintenance(app: httpx.AsyncClient) -> None:
    r = await app.get("/admin/status", headers=admin())
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body["queue"]) == {"queued", "due", "running", "done", "failed", "oldest_due_s"}
    assert body["worker"]["concurrency"] == 4 and body["worker"]["name"]
    assert {"index-upload", "maintenance", "reembed-missing"} <= set(body["worker"]["kinds"])
    latest = str(max(m.version for m in load_migrations()))
    assert (
        body["versions"]["schema"] == latest and body["versions"]["pgvector"] and body["versions"]["service"]
    )
    assert body["missing_vectors"]["v1"] == {"documents": 0, "chunks": 0}
    assert body["documents_missing_vectors"] == 0
    names = [t["name"] for t in body["maintenance"]]
    assert names[:2] == ["catalogue", "vector-copy"]
    # the maintenance passes run as periodic jobs of this service's queue
    # (the whole test run shares one database: other services' periodic jobs are listed too)
    listing = await app.get("/admin/jobs", params={"kind": "maintenance", "limit": 1000}, headers=admin())
    jobs = listing.json()["jobs"]
    assert {j["payload"]["task"] for j in jobs} >= {"catalogue", "vector-copy"}
    assert all(j["periodic_s"] for j in jobs)


async def test_an_upload_accepted_as_a_job_is_indexed_and_only_its_caller_sees_it(
    app: httpx.AsyncClient,
) -> None:
    user, file_id = new_id("user"), new_id()
    text = "The lighthouse keeper logged a northern gale on the third night."
    r = await app.post(
        "/embed",
        params={"async": "true"},
        data={"file_id": file_id},
        files={"file": ("log.txt", text.encode(), "text/plain")},
        headers=auth(user),
    )
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["file_id"] == file_id and body["state"] == "queued"
    assert r.headers["location"] == body["status_url"] == f"/jobs/{body['job_id']}"
    done = await wait_job(app, body["status_url"], auth(user), "done", "failed")
    assert done["status"] == "done", done
    assert done["result"]["chunks"] == 1 and done["progress"] == {"done": 1, "total": 1, "note": "stored"}
    assert "payload" not in done  # the caller's view
    assert (await app.get(body["status_url"], headers=auth(new_id("user")))).status_code == 404
    found = await app.post("/query", json={"query": "gale", "file_id": file_id, "k": 1}, headers=auth(user))
    assert found.status_code == 200 and found.json()[0][0]["page_content"] == text
    as_admin = await app.get(f"/admin/jobs/{body['job_id']}", headers=admin())
    assert as_admin.json()["payload"]["owner"] == user and as_admin.json()["created_by"] == user


async def test_a_failed_job_parks_and_an_admin_retries_it(app: httpx.AsyncClient) -> None:
    user = new_id("user")
    r = await app.post(
        "/embed",
        params={"async": "true"},
        data={"file_id": new_id()},
        files={"file": ("blob.bin", bytes(range(256)) * 64, "application/octet-stream")},
        headers=auth(user),
    )
    assert r.status_code == 202, r.text
    job_url = r.json()["status_url"]
    failed = await wait_job(app, job_url, auth(user), "failed")
    # a file that cannot be read never will be: parked after one attempt, with the service's sentence
    assert failed["attempts"] == 1 and failed["error"].startswith("UnsupportedFileType: ")
    job_id = r.json()["job_id"]
    listed = (await app.get("/admin/jobs", params={"status": "failed"}, headers=admin())).json()["jobs"]
    assert job_id in [j["id"] for j in listed] and all(j["status"] == "failed" for j in listed)
    retried = await app.post(f"/admin/jobs/{job_id}/retry", headers=admin())
    assert retried.status_code == 200 and retried.json()["status"] in ("queued", "running", "failed")
    await wait_job(app, job_url, auth(user), "failed")
    done_job = (await app.get("/admin/jobs", params={"status": "done", "limit": 1}, headers=admin())).json()
    assert done_job["jobs"], done_job
    conflict = await app.post(f"/admin/jobs/{done_job['jobs'][0]['id']}/retry", headers=admin())
    assert conflict.status_code == 409 and "not failed" in conflict.json()["detail"]
    missing = await app.post("/admin/jobs/999999999/retry", headers=admin())
    assert missing.status_code == 404
    bad = await app.get("/admin/jobs", params={"status": "sleeping"}, headers=admin())
    assert bad.status_code == 422


async def test_reindex_queues_the_v2_backfill_and_says_why_a_namespace_cannot_be_built(
    app: httpx.AsyncClient,
) -> None:
    namespace = new_id("agent")
    r = await app.post("/admin/reindex", params={"namespace": namespace}, headers=admin())
    assert r.status_code == 202, r.text
    job = r.json()["job"]
    assert r.json()["created"] and job["kind"] == "v2-backfill"
    assert job["payload"]["namespace"] == namespace and job["payload"]["force"] is False
    # a namespace without files can never be built: parked after one attempt, with the reason
    failed = await wait_job(app, f"/admin/jobs/{job['id']}", admin(), "failed")
    assert failed["attempts"] == 1 and "has no files to index" in failed["error"]
    forced = await app.post(
        "/admin/reindex", params={"namespace": namespace, "force": "true"}, headers=admin()
    )
    assert forced.status_code == 202 and forced.json()["job"]["payload"]["force"] is True
