"""Parsing in a worker process: the bombs of tests/fixtures/bombs.py refused with a 4xx within 30 s, the
worker's memory and time limits, cancellation, and the refusal seen over HTTP with nothing stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

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
    path = _slow_markdown(tmp_path / "slow.md")
    started = time.monotonic()
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, "slow.md", limits=ParseLimits(timeout_s=1.0))
    took = time.monotonic() - started  # the parse itself would take minutes
    assert took < ceiling(10), out_of_time("the worker killed at PARSE_TIMEOUT_S (1 s)", took)
    assert info.value.status_code == 422
    assert "took longer than 1 seconds (PARSE_TIMEOUT_S)" in info.value.detail


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
