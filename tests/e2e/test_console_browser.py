"""The operator console in a real browser: Debian's headless Chromium, driven by Selenium.

`scripts/serve` runs on its defaults (loopback, no JWT_SECRET: the local operator needs no login),
evidence search on for the `public` namespace. The test loads every page, uploads a file with
`?async=true` and watches its job's progress bar reach done on the jobs page, asks a question on
the search page and reads the "why", checks keyboard access and that the page's Content-Security-
Policy blocked nothing of ours, and writes a screenshot of each page to `test-artifacts/console/`
(with each page's weight and load time in `pages.json`). Skipped, saying why, only where the
browser is not installed (`scripts/test` installs `chromium` and `chromium-driver` with apt-get
when it runs as root).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.serve import REPO, free_port, serving

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("RAGOVERLAY_TEST_ARTIFACTS", str(REPO / "test-artifacts"))) / "console"
TEXT = (
    "Heater K 28 service notes\n\nThe K 28 heater weighs 12 kg and draws 2.8 kW at 230 V.\n"
    "Its air filter is changed every 6 months; the fuse is a 16 A type B.\n"
)


def _browser_or_skip() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "no headless browser here: install Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; scripts/test does it when run as root)"
        )
    return chromium, driver


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("console-serve")
    keep = ("RAG_", "JWT_", "DB_", "POSTGRES_", "DATABASE_", "EMBEDDINGS_", "S3_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(keep)}
    port = free_port()
    env.update({"RAG_PORT": str(port), "DATA_DIR": str(data_dir), "RAG_V2_NAMESPACE_IDS": "public"})
    with serving(env, data_dir / "serve.log", timeout_s=240):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser(service: str) -> Iterator[Any]:
    chromium, driver = _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    web = webdriver.Chrome(service=Service(driver), options=options)
    web.set_page_load_timeout(ceiling(60))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield web
    finally:
        web.quit()


def _visit(web: Any, url: str, name: str, pages: dict[str, Any]) -> None:
    """Load `url`, keep its weight and load time, write its screenshot."""
    web.get(url)
    timing = web.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "const r = performance.getEntriesByType('resource');"
        "return {html: n.transferSize || n.encodedBodySize, ms: n.duration,"
        " assets: r.reduce((a, e) => a + (e.transferSize || e.encodedBodySize || 0), 0)};"
    )
    pages[name] = {"url": url, **timing}
    web.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _wait(condition: Any, what: str, seconds: float) -> None:
    limit = ceiling(seconds)
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit:
            pytest.fail(out_of_time(what, time.monotonic() - started))
        time.sleep(0.2)


def _csp_errors(web: Any) -> list[str]:
    return [e["message"] for e in web.get_log("browser") if "Content Security Policy" in e["message"]]


def test_every_page_works_in_a_real_browser(service: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    pages: dict[str, Any] = {}
    _visit(browser, f"{service}/console", "overview", pages)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Knowledge bases"
    # keyboard: the first Tab lands on the skip link, which leads to the main content
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to content"

    reply = httpx.post(
        f"{service}/embed",
        params={"async": "true"},
        data={"file_id": "heater-notes"},
        files={"file": ("heater.txt", TEXT.encode(), "text/plain")},
        timeout=60,
    )
    assert reply.status_code == 202, reply.text
    job = reply.json()["job_id"]

    _visit(browser, f"{service}/console/jobs", "jobs", pages)

    def finished() -> bool:  # console.js updates the row in place, once a second
        rows = browser.find_elements(By.CSS_SELECTOR, f'tr[data-job="{job}"]')
        if not rows:
            return False
        bar = rows[0].find_element(By.TAG_NAME, "progress")
        status = rows[0].find_element(By.CSS_SELECTOR, "td.status").text
        return status == "done" and bar.get_attribute("value") == bar.get_attribute("max")

    _wait(finished, f"job {job}'s progress bar at done on the jobs page", 120)
    browser.save_screenshot(str(ARTIFACTS / "jobs-done.png"))

    _visit(browser, f"{service}/console", "overview-after-upload", pages)
    assert "public" in browser.find_element(By.TAG_NAME, "table").text
    _visit(browser, f"{service}/console/kb/public", "files", pages)
    assert "heater.txt" in browser.find_element(By.TAG_NAME, "main").text

    def searchable() -> bool:
        r = httpx.post(
            f"{service}/query_v2",
            json={"query": "How heavy is the K 28 heater?", "file_ids": ["heater-notes"]},
            timeout=30,
        )
        return r.status_code == 200 and not r.json().get("degraded") and bool(r.json()["results"])

    _wait(searchable, "evidence search answering from the upload", 120)
    _visit(browser, f"{service}/console/search", "search-form", pages)
    browser.find_element(By.ID, "q").send_keys("How heavy is the K 28 heater?")
    browser.find_element(By.CSS_SELECTOR, "form[role=search] button").click()
    _wait(lambda: bool(browser.find_elements(By.ID, "why")), "the search page's answer", 30)
    why = browser.find_element(By.ID, "why").text
    assert why.startswith("Answered"), why
    assert (
        "12 kg" in browser.find_element(By.ID, "v2").text
        and "12 kg" in browser.find_element(By.ID, "v1").text
    )
    browser.save_screenshot(str(ARTIFACTS / "search.png"))

    _visit(
        browser,
        f"{service}/console/search?namespace=public&q=Who+won+the+1954+football+world+cup%3F",
        "search-refused",
        pages,
    )
    assert browser.find_element(By.ID, "why").text.startswith("Refused")

    _visit(browser, f"{service}/console/runs", "runs", pages)
    runs = browser.find_element(By.TAG_NAME, "table").text
    assert "public" in runs and "active" in runs
    _wait(
        lambda: browser.find_element(By.ID, "live").text.startswith("Followed at"),
        "the runs page following its runs",
        30,
    )
    assert "active" in browser.find_element(By.ID, "runs").text  # the script kept the words

    _visit(browser, f"{service}/console/metrics", "metrics", pages)
    assert browser.find_elements(By.CSS_SELECTOR, "figure svg rect")
    assert "Ingestion over the last 24 hours" in browser.find_element(By.TAG_NAME, "main").text
    browser.execute_script("document.getElementById('ingest-h').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "metrics-ingestion.png"))

    assert _csp_errors(browser) == []  # the policy blocked nothing of ours: no inline code anywhere
    (ARTIFACTS / "pages.json").write_text(json.dumps(pages, indent=2) + "\n")
    print("console pages:", json.dumps(pages))
