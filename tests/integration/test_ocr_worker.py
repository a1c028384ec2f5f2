"""OCR inside the parsing worker: hostile pictures refused by their declared size with the worker's limits
around them, a scan read across the process boundary, and the service process not growing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from app.errors import NoExtractableText, RagError
from app.ingest.limits import ParseLimits
from app.ingest.worker import parse_in_worker
from tests.fixtures.patience import ceiling, out_of_time
from tests.fixtures.scans import image_pdf, jpeg_declaring, pdf_with_huge_picture, png_bomb, text_image

MIB = 1024 * 1024
DEFAULTS = ParseLimits()


@pytest.mark.parametrize(
    ("name", "build", "status", "words"),
    [
        # 900 million pixels in ~110 KB: decoded as gray it would need 900 MB
        ("bomb.png", png_bomb, 413, "30,000 x 30,000 pixels"),
        ("huge.jpg", lambda p: jpeg_declaring(p, 30_000, 30_000), 413, "30,000 x 30,000 pixels"),
        # a scan whose only page shows that picture: PDFium would decode it whole to render the page
        ("bomb.pdf", pdf_with_huge_picture, 422, "more than 50,000,000 pixels (OCR_MAX_PIXELS)"),
    ],
)
async def test_hostile_pictures_are_refused_by_their_declared_size(
    tmp_path: Path, name: str, build: Callable[[Path], Path], status: int, words: str
) -> None:
    path = build(tmp_path / name)
    started = time.monotonic()
    with pytest.raises(RagError) as info:
        await parse_in_worker(path, name, limits=DEFAULTS)
    took = time.monotonic() - started  # the figure (well under a second) is in the benchmark
    assert took < ceiling(30), out_of_time(f"the refusal of {name}", took)
    assert info.value.status_code == status
    assert words in info.value.detail and "OCR_MAX_PIXELS" in info.value.detail


async def test_the_service_does_not_grow_with_hostile_pictures(tmp_path: Path) -> None:
    bomb = png_bomb(tmp_path / "bomb.png")
    await parse_in_worker(
        image_pdf(tmp_path / "warm.pdf", [text_image(["warm up"])]), "w.pdf", limits=DEFAULTS
    )
    before = psutil.Process().memory_info().rss
    for _ in range(5):
        with pytest.raises(RagError):
            await parse_in_worker(bomb, "bomb.png", limits=DEFAULTS)
    # each bomb would take 900 MB decoded; the service holds only the refusal
    assert psutil.Process().memory_info().rss - before < 50 * MIB


async def test_a_scan_is_read_in_the_worker_with_its_report(tmp_path: Path) -> None:
    path = image_pdf(tmp_path / "scan.pdf", [text_image(["Die Prüfspannung beträgt 230 V."])])
    doc = await parse_in_worker(path, "scan.pdf", limits=DEFAULTS)
    assert doc.text.split() == ["Die", "Prüfspannung", "beträgt", "230", "V."]
    assert list(doc.ocr_pages) == [0] and doc.sections[0].metadata["ocr"] is True


async def test_ocr_refusals_keep_their_class_across_the_worker(tmp_path: Path) -> None:
    path = image_pdf(tmp_path / "scan.pdf", [text_image(["Nothing to see without OCR."])])
    off = ParseLimits(ocr=DEFAULTS.ocr.__class__(engine="off"))
    with pytest.raises(NoExtractableText) as info:
        await parse_in_worker(path, "scan.pdf", limits=off)
    assert info.value.status_code == 422 and "OCR_ENGINE=auto" in info.value.detail
