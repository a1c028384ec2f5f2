"""Parsing in a worker process: the bombs of tests/fixtures/bombs.py refused with a 4xx within 30 s, the
worker's memory and time limits (a budget that grows with the pages read, and a stall limit),
cancellation, and the refusal seen over HTTP with nothing stored."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from app.errors import RagError
from app.ingest.limits import ParseLimits
from app.ingest.loaders import load_document
from app.ingest.worker import parse_in_worker
from tests.contract.helpers import upload
from tests.fixtures.bombs import docx_bomb, nested_html, xlsx_huge_sheet, xlsx_shared_string_bomb
from tests.fixtures.documents import make_docx, make_text
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.service import auth, new_id
from tests.fixtures.slow_loaders import crawls, stalls, steady

MIB = 1024 * 1024
DEFAULTS = ParseLimits()


@pytest.mark.parametrize(
    ("name", "build", "status", "limit"),
    [
        # a 3.5 MB DOCX whose document.xml is 190 MB (here ~0.6 MB on disk)
        ("doc.docx", lambda p: docx_bomb(p, 190 * MIB), 413, "PARSE_MAX_ELEMENTS"),
        # the same, padded with stored random bytes to an ordinary compression ratio
        ("padded.docx", lambda p: docx_bomb(p, 190 * MIB, padding=4 * MIB), 413, "PARSE_MAX_ELEMENTS"),
        # an XLSX with a 200 MB sheet (within PARSE_MAX_UNZIPPED_BYTES: the cells refuse it)
        ("sheet.xlsx", lambda p: xlsx_huge_sheet(p, 200 * MIB), 413, "PARSE_MAX_CELLS"),
        # an XLSX with a 380 MB sheet: its declared size refuses it
        ("bigger.xlsx", lambda p: xlsx_huge_sheet(p, 380 * MIB), 413, "PARSE_MAX_UNZIPPED_BYTES"),
        # a ~10 KB XLSX whose cells all point to one 20 KB shared string
        ("strings.xlsx", xlsx_shared_string_bomb, 413, "PARSE_MAX_CHARS"),
        # 800 KB of 100,000 unclosed <ul><li>
        ("nested.html", nested_html, 422, "PARSE_MAX_DEPTH"),
    ],
)
async def test_bombs_are_refused_quickly(
    tmp_path: Path, name: str, build: Callable[[Path], Path], status: int, limit: str
) -> None:
    path = build(tmp_path / name)
    assert path.stat().st_size < 6 * MIB
    started = time.monotonic()
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, name, limits=DEFAULTS)
    took = time.monotonic() - started
    assert took < ceiling(30), out_of_time(f"the refusal of {name}", took)
    assert info.value.status_code == status
    assert limit in info.value.detail and info.value.detail.startswith(f"{name} was refused")


async def test_worker_returns_what_the_loader_returns(tmp_path: Path) -> None:
    path = make_docx(tmp_path / "r.docx", ["Body."], headings=[(1, "Title")], table=[["a", "b"], ["1", "2"]])
    assert await parse_in_worker(path, "r.docx", limits=DEFAULTS) == load_document(path, "r.docx")


async def test_worker_passes_loader_refusals_through(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "x.bin", limits=DEFAULTS)
    assert info.value.status_code == 415 and "binary data" in info.value.detail


def _slow_markdown(path: Path) -> Path:
    # markdown-it's inline parser takes ~20 ms per paragraph like this one: minutes in all.
    return make_text(path, ("[" * 9_000 + "\n\n") * 5_000)


async def test_worker_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    # markdown-it parses the whole text before the loader counts a character: nothing advances
    path = _slow_markdown(tmp_path / "slow.md")
    started = time.monotonic()
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "slow.md", limits=ParseLimits(timeout_s=1.0))
    took = time.monotonic() - started  # the parse itself would take minutes
    assert took < ceiling(10), out_of_time("the worker killed at PARSE_TIMEOUT_S (1 s)", took)
    assert info.value.status_code == 422
    assert info.value.detail.startswith(
        "slow.md was refused: reading it took longer than its time budget of 1 seconds: PARSE_TIMEOUT_S "
        "(1 s) plus PARSE_SECONDS_PER_PAGE (2 s) for each 3,000 characters of the 0 read."
    )


async def test_a_parse_that_keeps_advancing_is_not_cut_at_the_base_limit(tmp_path: Path) -> None:
    """The 1,400-page PDF on a busy machine, in small: it reads a page every 10 ms for 2 s, four
    times PARSE_TIMEOUT_S, which before was the whole file's limit (and refused it with 422)."""
    path = tmp_path / "long.pdf"
    path.write_text("2.0")
    limits = ParseLimits(timeout_s=0.5, seconds_per_page=0.5, stall_s=30)
    started = time.monotonic()
    doc = await parse_in_worker(path, "long.pdf", limits=limits, loader=steady)
    assert time.monotonic() - started > 4 * limits.timeout_s
    assert doc.text.endswith(" pages read") and int(doc.text.split()[0]) > 0


async def test_the_workers_cpu_limit_follows_the_budget_it_earns(tmp_path: Path) -> None:
    """On a quiet machine CPU time runs as fast as wall time: a CPU limit fixed at PARSE_TIMEOUT_S
    would cut the big file the parent lets run. The worker raises its own as its pages earn time."""
    path = tmp_path / "long.pdf"
    path.write_text("60")  # pages for a minute; the test stops it once it has seen the limit move
    limits = ParseLimits(timeout_s=1, seconds_per_page=1, stall_s=30)
    await parse_in_worker(make_text(tmp_path / "warm.txt", "warm up"), "warm.txt", limits=DEFAULTS)
    before = _descendants()
    task = asyncio.create_task(parse_in_worker(path, "long.pdf", limits=limits, loader=steady))
    try:
        child = psutil.Process(await _until(lambda: next(iter(_descendants() - before), None)))
        # once the worker has applied its limits (until then it has the fork server's: none)
        first = await _until(lambda: limit if (limit := child.rlimit(psutil.RLIMIT_CPU))[0] >= 0 else None)
        assert first[1] > 50_000_000 / 3000  # the hard limit: the largest budget a file can earn
        # it began at PARSE_TIMEOUT_S and 5 s of slack (6 s), and grows a second a page
        raised = await _until(lambda: child.rlimit(psutil.RLIMIT_CPU)[0] > 100 or None)
        assert raised is True
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def _until(probe: Callable[[], Any]) -> Any:
    """`probe()` once it answers something other than None (it is asked every 50 ms)."""
    while True:
        found = probe()
        if found is not None:
            return found
        await asyncio.sleep(0.05)


async def test_a_parse_that_stops_advancing_is_killed_at_the_stall_limit(tmp_path: Path) -> None:
    """A parser stuck after three pages (in C code, say): killed once nothing moved for the stall
    limit, although its budget (a minute, and two seconds a page) is far from spent."""
    path = make_text(tmp_path / "stuck.pdf", "")
    limits = ParseLimits(timeout_s=60, seconds_per_page=2, stall_s=1)
    await parse_in_worker(make_text(tmp_path / "warm.txt", "warm up"), "warm.txt", limits=DEFAULTS)
    before = _descendants()  # the fork server and multiprocessing's resource tracker stay
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "stuck.pdf", limits=limits, loader=stalls)
    assert info.value.status_code == 422
    assert info.value.detail.startswith(
        "stuck.pdf was refused: reading it made no progress for 1 seconds (PARSE_STALL_TIMEOUT_S; "
    )
    assert "pages read by then). The file may be damaged" in info.value.detail
    assert not _descendants() - before  # killed and reaped


async def test_a_parse_slower_than_its_pages_allow_is_stopped_at_its_budget(tmp_path: Path) -> None:
    """It advances (a page every 0.1 s, so never a stall), but a page earns only 0.01 s: the budget of
    0.5 s plus 0.01 s a page runs out, and the detail says how it was made up."""
    path = make_text(tmp_path / "crawl.pdf", "")
    limits = ParseLimits(timeout_s=0.5, seconds_per_page=0.01, stall_s=60)
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "crawl.pdf", limits=limits, loader=crawls)
    assert info.value.status_code == 422
    found = re.fullmatch(
        r"crawl\.pdf was refused: reading it took longer than its time budget of ([0-9.]+) seconds: "
        r"PARSE_TIMEOUT_S \(0\.5 s\) plus PARSE_SECONDS_PER_PAGE \(0\.01 s\) for each of the ([0-9]+) "
        r"pages read\. Split it into smaller files and upload them separately, or ask the operator to "
        r"raise the limits",
        info.value.detail,
    )
    assert found is not None, info.value.detail
    # how many pages it had read by then depends on the machine's load; the sum it names does not
    budget, pages = float(found[1]), int(found[2])
    assert pages >= 1 and budget == pytest.approx(0.5 + 0.01 * pages)


async def test_worker_memory_limit(tmp_path: Path) -> None:
    # 150 MB of text needs its bytes and its decoded copy at once: far over 128 MB.
    path = make_text(tmp_path / "big.txt", "lorem ipsum " * (150 * MIB // 12))
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "big.txt", limits=ParseLimits(memory_mb=128))
    assert info.value.status_code == 413
    assert "needs more than 128 MB of memory (PARSE_MEMORY_MB)" in info.value.detail


def _descendants() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True) if child.is_running()}


async def test_cancelled_parse_leaves_no_process(tmp_path: Path) -> None:
    path = _slow_markdown(tmp_path / "slow.md")
    await parse_in_worker(make_text(tmp_path / "warm.txt", "warm up"), "warm.txt", limits=DEFAULTS)
    before = _descendants()  # the fork server and multiprocessing's resource tracker stay
    task = asyncio.create_task(parse_in_worker(path, "slow.md", limits=DEFAULTS))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if _descendants() - before:
            break
    assert _descendants() - before, "the worker never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not _descendants() - before:
            break
        await asyncio.sleep(0.05)
    assert not _descendants() - before


async def test_embed_of_a_bomb_is_4xx_and_stores_nothing(client: httpx.AsyncClient, tmp_path: Path) -> None:
    user, fid = new_id("user"), new_id()
    content = nested_html(tmp_path / "n.html").read_bytes()
    r = await upload(client, fid, "n.html", content, auth(user), content_type="text/html")
    assert r.status_code == 422
    assert "PARSE_MAX_DEPTH" in r.json()["detail"]
    assert fid not in (await client.get("/ids", headers=auth(user))).json()
    shared = xlsx_shared_string_bomb(tmp_path / "s.xlsx").read_bytes()
    r = await upload(client, fid, "s.xlsx", shared, auth(user), content_type="application/octet-stream")
    assert r.status_code == 413 and "PARSE_MAX_CHARS" in r.json()["detail"]
    assert fid not in (await client.get("/ids", headers=auth(user))).json()
