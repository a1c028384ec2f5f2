"""The operator console's doors and pages, in process: who gets in, the headers every page carries,
the CSRF guard of its actions, escaping, and a search that keeps the chosen user's rights."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from PIL import Image

from app.api.console import CSP
from app.console.views import page_ranges
from tests.contract.helpers import upload
from tests.fixtures.patience import until
from tests.fixtures.scans import image_pdf, text_image
from tests.fixtures.service import SettingsFactory, auth, make_token, new_id, resources, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-console"
OWNER = "owner-console"
STRANGER = "stranger-console"
NAME = "<img src=x onerror=alert(1)>.txt"  # a file name is the uploader's text: escaped everywhere
PRIVATE = b"The spare key of the workshop lies under the blue flower pot."
TEXT = b"The K 28 heater weighs 12 kg and draws 2.8 kW. Its filter is changed every 6 months."


@dataclass
class World:
    client: httpx.AsyncClient
    agent: str
    file_id: str


@pytest.fixture(scope="module")
async def world(
    settings_factory: SettingsFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    agent = f"agent_{new_id('console')}"
    settings = settings_factory(admin_user_ids=[ADMIN], v2_namespace_ids=[agent])
    async with running_app(settings) as client:
        file_id = new_id("heater")
        r = await upload(client, file_id, NAME, TEXT, auth(OWNER), entity_id=agent)
        assert r.status_code == 200, r.text
        r = await upload(
            client, new_id("private"), "notes.txt", PRIVATE, auth(OWNER)
        )  # OWNER's own namespace
        assert r.status_code == 200, r.text
        # a scan whose second page is a blank sheet: page 1 read by OCR, page 2 without text
        scan = image_pdf(
            tmp_path_factory.mktemp("console") / "scan.pdf",
            [text_image(["The boiler's safety valve opens at 3 bar."]), Image.new("L", (600, 800), 255)],
        )
        r = await upload(client, new_id("scan"), "scan.pdf", scan.read_bytes(), auth(OWNER), entity_id=agent)
        assert r.status_code == 200, r.text

        async def active() -> bool:  # the first upload of a namespace queues its evidence run
            status = (await client.get("/v2/status", headers=auth(ADMIN))).json()
            return (
                any(run["namespace"] == agent for run in status["active_runs"]) and not status["running_runs"]
            )

        await until(active, what=f"an active evidence run of {agent}", within_s=120, every_s=0.3)
        yield World(client, agent, file_id)


async def _login(client: httpx.AsyncClient, user: str) -> httpx.Response:
    return await client.post("/console/login", data={"token": make_token(user)}, follow_redirects=False)


async def test_without_a_session_every_page_sends_the_admin_to_the_login(world: World) -> None:
    world.client.cookies.clear()
    for path in (
        "/console",
        "/console/jobs",
        "/console/runs",
        "/console/search",
        "/console/metrics",
        f"/console/kb/{world.agent}",
    ):
        r = await world.client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login", path
    # a bearer token does not open the console: its pages read the console's cookie only
    r = await world.client.get("/console", headers=auth(ADMIN), follow_redirects=False)
    assert r.status_code == 303
    assert (await world.client.get("/console/api/jobs")).status_code == 401
    assert (await world.client.get("/console/api/runs")).status_code == 401


async def test_a_non_admin_token_is_refused_and_an_admins_opens_a_strict_session(world: World) -> None:
    world.client.cookies.clear()
    r = await _login(world.client, OWNER)
    assert r.status_code == 403 and "admin" in r.text and "set-cookie" not in r.headers
    r = await world.client.post("/console/login", data={"token": "not-a-jwt"}, follow_redirects=False)
    assert r.status_code == 401 and "set-cookie" not in r.headers
    r = await _login(world.client, ADMIN)
    assert r.status_code == 303 and r.headers["location"] == "/console"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    page = await world.client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP and "unsafe-inline" not in CSP
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"
    # the knowledge base, its file and its V1 chunks are on the first page
    assert world.agent in page.text and NAME not in page.text


async def test_file_names_are_escaped_and_files_can_be_searched_and_sorted(world: World) -> None:
    await _login(world.client, ADMIN)
    r = await world.client.get(f"/console/kb/{world.agent}", params={"q": "onerror", "sort": "chunks"})
    assert r.status_code == 200
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in r.text and NAME not in r.text
    assert world.file_id in r.text and "1 file;" in r.text
    assert '<td><span class="ok">text</span>' in r.text  # a text file: no page without text
    none = await world.client.get(f"/console/kb/{world.agent}", params={"q": "no such name"})
    assert "0 files;" in none.text
    # LIKE's wildcards are text here, not patterns
    assert "0 files;" in (await world.client.get(f"/console/kb/{world.agent}", params={"q": "%"})).text


async def test_actions_need_the_sessions_csrf_token_and_the_consoles_own_origin(world: World) -> None:
    await _login(world.client, ADMIN)
    page = await world.client.get("/console/jobs")
    token = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    r = await world.client.post("/console/jobs/999999/retry", data={}, follow_redirects=False)
    assert r.status_code == 403 and "token" in r.json()["detail"]
    r = await world.client.post(
        "/console/jobs/999999/retry",
        data={"csrf": token},
        headers={"origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "own pages" in r.json()["detail"]
    r = await world.client.post("/console/jobs/999999/retry", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303  # accepted (an unknown job is simply not retried)
    # a token of another session is stale
    r = await world.client.post("/console/logout", data={"csrf": token[::-1]}, follow_redirects=False)
    assert r.status_code == 403


async def test_a_search_keeps_the_chosen_users_rights_and_says_why(world: World) -> None:
    await _login(world.client, ADMIN)
    question = {"namespace": world.agent, "q": "How heavy is the K 28 heater?"}
    owner = await world.client.get("/console/search", params={**question, "user": OWNER})
    assert owner.status_code == 200
    assert "12 kg" in owner.text and world.file_id in owner.text
    assert 'id="why"' in owner.text and "Channels and scores" in owner.text
    # a user's own files: the owner finds them, another user asking about them gets that user's
    # answer (the namespace is no Agent this user may name), not the owner's text
    private = {"namespace": OWNER, "q": "Where is the spare key of the workshop?"}
    mine = await world.client.get("/console/search", params={**private, "user": OWNER})
    assert "blue flower pot" in mine.text
    theirs = await world.client.get("/console/search", params={**private, "user": STRANGER})
    assert theirs.status_code == 200
    assert "blue flower pot" not in theirs.text and 'role="alert"' in theirs.text


async def test_metrics_and_jobs_pages_draw_from_the_services_own_figures(world: World) -> None:
    await _login(world.client, ADMIN)
    r = await world.client.get("/console/metrics")
    assert r.status_code == 200 and "<svg" in r.text and "Requests per route" in r.text
    jobs = await world.client.get("/console/api/jobs")
    assert jobs.status_code == 200 and set(jobs.json()) == {"running", "recent"}
    css = await world.client.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert (await world.client.get("/console/static/../../config.py")).status_code == 404


async def test_a_scan_shows_its_ocr_and_empty_pages_in_its_files_and_namespaces_health(world: World) -> None:
    await _login(world.client, ADMIN)
    files = await world.client.get(f"/console/kb/{world.agent}", params={"q": "scan.pdf"})
    assert "OCR read page 1" in files.text and "no text on page 2" in files.text
    overview = await world.client.get("/console")
    row = overview.text.split(f">{world.agent}</a>", 1)[1].split("</tr>", 1)[0]
    assert "1 with OCR'd pages" in row and "1 with pages without text" in row


async def test_the_runs_page_shows_each_runs_files_and_chunks(world: World) -> None:
    await _login(world.client, ADMIN)
    runs = (await world.client.get("/v2/runs", headers=auth(ADMIN), params={"namespace": world.agent})).json()
    active = next(run for run in runs if run["status"] == "active")
    r = await world.client.get("/console/runs")
    assert r.status_code == 200 and r.headers["content-security-policy"] == CSP
    row = r.text.split(f'<th scope="row">{active["run_id"]}</th>', 1)[1].split("</tr>", 1)[0]
    assert world.agent in row and '<span class="ok">active</span>' in row
    assert 'aria-label="Run' in row and "files staged" in row
    # a failed run of another namespace: its error, and each failed file with its reason (escaped)
    services = resources(world.client)
    async with services.pool.acquire() as conn:
        run_id = await conn.fetchval(
            "INSERT INTO ragoverlay_v2_runs (collection_id, namespace, index_version, extractor_version, "
            "embedding_model, expected_files, status, error) VALUES ($1, 'agent_failing', 'v', 'x', 'm', 3, "
            "'failed', 'abandoned by its operator') RETURNING run_id",
            services.info.collection_id,
        )
        await conn.executemany(
            "INSERT INTO ragoverlay_v2_run_files (run_id, file_id, state, error) VALUES ($1, $2, $3, $4)",
            [
                (run_id, "bad-1", "failed", "<b>parse</b> failed"),
                (run_id, "bad-2", "failed", None),
                (run_id, "ok-3", "pending", None),
            ],
        )
    r = await world.client.get("/console/runs")
    row = r.text.split(f'<th scope="row">{run_id}</th>', 1)[1].split("</tr>", 1)[0]
    assert '<span class="bad">failed</span>' in row and "abandoned by its operator" in row
    assert "2 files failed" in row and "1 waiting" in row and "0 / 3" in row
    assert "<code>bad-1</code>: &lt;b&gt;parse&lt;/b&gt; failed" in row
    assert "<code>bad-2</code>: no reason kept" in row
    # the page's script follows the same figures
    live = (await world.client.get("/console/api/runs")).json()["runs"]
    failing = next(run for run in live if run["run_id"] == run_id)
    assert failing == {
        "run_id": run_id,
        "status": "failed",
        "expected": 3,
        "staged": 0,
        "staging": 0,
        "pending": 1,
        "failed": 2,
        "chunks": 0,
        "eta_s": None,  # a failed run has no time left
    }


async def test_the_metrics_page_draws_ingestion_per_hour_from_the_database(world: World) -> None:
    await _login(world.client, ADMIN)
    r = await world.client.get("/console/metrics")
    assert "Ingestion over the last 24 hours" in r.text and "V1 chunks stored" in r.text
    table = r.text.split("Files and chunks stored per hour", 1)[1].split("</table>", 1)[0]
    figures = [int(cell.split("<", 1)[0]) for cell in table.split('<td class="num">')[1:]]
    files, v1_chunks = sum(figures[0::3]), sum(figures[1::3])
    assert files >= 3 and v1_chunks >= 3  # this module's three uploads (an hour's boundary may split them)


def test_pages_are_written_as_ranges() -> None:
    assert page_ranges([5]) == "page 5"
    assert page_ranges([3, 1, 2, 5, 7, 8]) == "pages 1-3, 5, 7-8"


def test_a_building_runs_time_left_is_its_pace_so_far() -> None:
    from datetime import UTC, datetime

    from app.store.console import RunRow

    now = datetime.now(UTC)
    run = RunRow(
        run_id=1, namespace="n", status="running", origin="upload", created_by=None, error=None,
        created_at=now, updated_at=now, activated_at=None, expected_files=10, staged=4, staging=1,
        pending=4, failed=1, chunks=40, failures=[], running_s=60.0,
    )  # fmt: skip
    assert run.expected == 10 and run.eta_s == 60.0 * 5 / 4  # 5 files left (the failed one is not)
    assert RunRow(**{**run.__dict__, "staged": 0}).eta_s is None  # no pace yet
    assert RunRow(**{**run.__dict__, "status": "active"}).eta_s is None
    assert RunRow(**{**run.__dict__, "expected_files": 3}).expected == 10  # files joined since
