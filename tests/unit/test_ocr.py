"""OCR as a loader stage: pictures and scanned pages read in English and German (upright, turned,
photographed), PDF_EXTRACT_IMAGES, what is reported, and each bound with a hostile file the test builds.

Every image is a few lines at 150 dpi, so each read takes a fraction of a second."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PIL import Image

from app.config import Settings
from app.errors import NoExtractableText, UnsupportedFileType
from app.ingest.limits import PROGRESS_SLOTS, OcrOptions, ParseLimitExceeded, ParseLimits, read_board
from app.ingest.loaders import load_document
from app.ingest.loaders.ocr import WORK_PIXELS, OcrReader, engine_status, prepare, tidy
from tests.fixtures.scans import (
    image_pdf,
    jpeg_declaring,
    mixed_pdf,
    pdf_with_huge_picture,
    png_bomb,
    save,
    table_image,
    text_image,
)

GERMAN = ["Die Größe der Prüfspannung beträgt 230 V.", "Der Wärmeübertrager für Außenluft ist wartungsfrei."]
ENGLISH = ["The relief valve opens at 6.5 bar.", "Replace the filter cartridge every 400 hours."]
TABLE = [["Modell", "Leistung", "Gewicht"], ["K 28", "2,8 kW", "12 kg"], ["K 35", "3,5 kW", "14 kg"]]


def limits(**ocr: object) -> ParseLimits:
    """The default parse limits with some OCR options changed."""
    return ParseLimits(ocr=dataclasses.replace(OcrOptions(), **ocr))  # type: ignore[arg-type]


def words(text: str) -> list[str]:
    return text.split()


# --- reading ---------------------------------------------------------------------------------------


def test_the_default_engine_is_installed_with_german_and_english() -> None:
    status = engine_status(OcrOptions())
    assert status.engine == "tesseract", status.detail
    assert "deu+eng" in status.detail


@pytest.mark.parametrize("suffix", ["png", "jpg", "tif"])
def test_a_german_picture_keeps_its_umlauts_and_sharp_s(tmp_path: Path, suffix: str) -> None:
    path = save(text_image(GERMAN), tmp_path / f"schild.{suffix}")
    doc = load_document(path, path.name)
    assert doc.kind == "image"
    assert words(doc.text) == words(" ".join(GERMAN))
    (section,) = doc.sections
    assert section.page == 0 and section.metadata["ocr"] is True
    assert 0.8 <= section.metadata["ocr_confidence"] <= 1.0
    assert doc.ocr_pages == {0: section.metadata["ocr_confidence"]}
    assert doc.warnings == [f"page 1 read by OCR (mean confidence {section.metadata['ocr_confidence']:.2f})"]


@pytest.mark.parametrize("turn", [90, 180, 270])
def test_a_picture_scanned_sideways_or_upside_down_is_turned_upright(tmp_path: Path, turn: int) -> None:
    path = save(text_image(ENGLISH, turn=turn), tmp_path / "sideways.png")
    assert words(load_document(path, path.name).text) == words(" ".join(ENGLISH))


def test_a_photo_of_a_table_reads_row_by_row(tmp_path: Path) -> None:
    path = save(table_image(TABLE), tmp_path / "typenschild.jpg", quality=70)
    lines = [" ".join(line.split()) for line in load_document(path, path.name).text.splitlines()]
    # one line per row, cells in order; OCR may drop the space inside "14 kg"
    assert lines[:2] == ["Modell Leistung Gewicht", "K 28 2,8 kW 12 kg"]
    assert lines[2].replace(" ", "") == "K353,5kW14kg"


def test_a_multi_page_tiff_is_one_page_per_frame(tmp_path: Path) -> None:
    first, second = text_image(ENGLISH), text_image(GERMAN)
    path = tmp_path / "fax.tif"
    first.save(path, save_all=True, append_images=[second])
    doc = load_document(path, "fax.tif")
    assert [s.page for s in doc.sections] == [0, 1] and sorted(doc.ocr_pages) == [0, 1]
    assert words(doc.sections[1].text) == words(" ".join(GERMAN))
    assert {b.page for b in doc.blocks} == {0, 1}


def test_tidy_joins_words_hyphenated_at_a_line_end() -> None:
    assert tidy("Um das System wiederher-\nzustellen, booten\n\n\n\nSie") == (
        "Um das System wiederherzustellen, booten\n\nSie"
    )
    assert tidy("die Debian-\nSystem Datei") == "die Debian-\nSystem Datei"  # a compound's own hyphen


def test_a_large_picture_is_read_at_a_working_size() -> None:
    prepared = prepare(Image.new("RGBA", (6000, 4000), (0, 0, 0, 0)))
    assert prepared.mode == "L" and prepared.width * prepared.height <= WORK_PIXELS
    assert prepared.getpixel((0, 0)) == 255  # transparent is paper, not ink


# --- PDFs ------------------------------------------------------------------------------------------


def test_an_image_only_pdf_is_read_page_by_page(tmp_path: Path) -> None:
    path = image_pdf(tmp_path / "scan.pdf", [text_image(GERMAN), text_image(ENGLISH, turn=90)])
    doc = load_document(path, "scan.pdf")
    assert [s.page for s in doc.sections] == [0, 1]
    assert words(doc.sections[0].text) == words(" ".join(GERMAN))
    assert words(doc.sections[1].text) == words(" ".join(ENGLISH))
    assert all(s.metadata["ocr"] is True and s.metadata["total_pages"] == 2 for s in doc.sections)
    assert sorted(doc.ocr_pages) == [0, 1] and doc.unreadable_pages == []
    assert doc.warnings[0].startswith("pages 1, 2 were read by OCR (mean confidence 0.")
    assert {b.page for b in doc.blocks} == {0, 1}


@pytest.mark.parametrize("extract", [True, False])
def test_pdf_extract_images_reads_the_pictures_on_text_pages(tmp_path: Path, extract: bool) -> None:
    picture = text_image(["Inside the picture: the seal kit is part 4711."])
    path = mixed_pdf(tmp_path / "mixed.pdf", "This page has a text layer about pumps.", picture)
    doc = load_document(path, "mixed.pdf", pdf_extract_images=extract)
    assert doc.sections[0].text == "This page has a text layer about pumps."
    assert "ocr" not in doc.sections[0].metadata
    if not extract:
        assert len(doc.sections) == 1 and doc.ocr_pages == {}
        return
    assert len(doc.sections) == 2
    assert doc.sections[1].page == 0 and doc.sections[1].metadata["ocr"] is True
    assert words(doc.sections[1].text) == words("Inside the picture: the seal kit is part 4711.")
    assert any("part 4711" in b.text for b in doc.blocks)


def test_ocr_off_refuses_a_scan_and_a_picture_saying_how_to_turn_it_on(tmp_path: Path) -> None:
    off = limits(engine="off")
    scan = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH)])
    with pytest.raises(NoExtractableText) as info:
        load_document(scan, "scan.pdf", limits=off)
    assert info.value.detail == (
        "scan.pdf has no text layer (its pages are scanned images), and reading them needs OCR: OCR is "
        "turned off (OCR_ENGINE=off). To index it, ask the operator to set OCR_ENGINE=auto, or upload a "
        "PDF with a text layer"
    )
    picture = save(text_image(ENGLISH), tmp_path / "photo.png")
    with pytest.raises(NoExtractableText) as info:
        load_document(picture, "photo.png", limits=off)
    assert "photo.png is a picture" in info.value.detail and "OCR_ENGINE=auto" in info.value.detail


def test_missing_language_data_is_named(tmp_path: Path) -> None:
    status = engine_status(OcrOptions(languages=("deu", "xyz")))
    assert status.engine is None and "no language data for deu+xyz (OCR_LANGUAGES)" in status.detail
    picture = save(text_image(ENGLISH), tmp_path / "photo.png")
    with pytest.raises(NoExtractableText) as info:
        load_document(picture, "photo.png", limits=limits(languages=("xyz",)))
    assert "tesseract-ocr-<language>" in info.value.detail


def test_a_blank_picture_is_refused_as_holding_no_text(tmp_path: Path) -> None:
    path = save(Image.new("L", (400, 300), 255), tmp_path / "blank.png")
    with pytest.raises(NoExtractableText) as info:
        load_document(path, "blank.png")
    assert info.value.detail.startswith("OCR read no text in blank.png.")


# --- bounds ----------------------------------------------------------------------------------------


def test_a_png_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    path = png_bomb(tmp_path / "bomb.png")  # 30,000 x 30,000 pixels in ~110 KB
    assert path.stat().st_size < 200_000
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, "bomb.png")
    assert info.value.status_code == 413
    assert info.value.detail.startswith(
        "bomb.png was refused: the picture is 30,000 x 30,000 pixels, more than OCR reads (50,000,000 "
        "pixels, OCR_MAX_PIXELS). Scale it down"
    )


def test_a_jpeg_declaring_a_huge_frame_is_refused(tmp_path: Path) -> None:
    path = jpeg_declaring(tmp_path / "huge.jpg", 65_000, 40_000)
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, "huge.jpg")
    assert info.value.status_code == 413 and "65,000 x 40,000 pixels" in info.value.detail


def test_a_tiff_with_a_huge_later_frame_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pages.tif"
    Image.new("1", (64, 64), 1).save(path, save_all=True, append_images=[Image.new("1", (3000, 2000), 1)])
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, "pages.tif", limits=limits(max_pixels=5_000_000))
    assert "3,000 x 2,000 pixels" in info.value.detail and "5,000,000 pixels" in info.value.detail


def test_a_pdf_page_showing_a_huge_picture_is_not_rendered(tmp_path: Path) -> None:
    path = pdf_with_huge_picture(tmp_path / "bomb.pdf")
    with pytest.raises(NoExtractableText) as info:
        load_document(path, "bomb.pdf")
    assert info.value.detail == (
        "bomb.pdf has no text layer, and OCR read no text on its pages (page 1 holds a picture of more "
        "than 50,000,000 pixels (OCR_MAX_PIXELS)). Scan it again at 300 dpi or less, or ask the "
        "operator to raise OCR_MAX_PIXELS"
    )


def test_ocr_max_pages_reads_the_first_pages_and_reports_the_rest(tmp_path: Path) -> None:
    path = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH), text_image(GERMAN), text_image(ENGLISH)])
    doc = load_document(path, "scan.pdf", limits=limits(max_pages=1))
    assert [s.page for s in doc.sections] == [0] and doc.unreadable_pages == [1, 2]
    assert doc.warnings[1] == (
        "pages 2, 3 show a picture but gave no text: pages 2, 3 not read: OCR reads at most 1 pages or "
        "pictures per file (OCR_MAX_PAGES)"
    )


def test_ocr_max_pages_stops_a_picture_of_many_frames(tmp_path: Path) -> None:
    path = tmp_path / "fax.tif"
    frames = [text_image(ENGLISH) for _ in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    doc = load_document(path, "fax.tif", limits=limits(max_pages=2))
    assert sorted(doc.ocr_pages) == [0, 1]
    assert "page 3 and any after it were not read: OCR reads at most 2 pages" in doc.warnings[-1]


def test_the_file_time_budget_stops_ocr_and_says_so(tmp_path: Path) -> None:
    path = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH), text_image(GERMAN)])
    # the first page starts the clock and is cut off by the (tiny) budget; the second is not begun
    with pytest.raises(NoExtractableText) as info:
        load_document(path, "scan.pdf", limits=limits(file_timeout_s=0.001))
    assert "page 1 stopped at its deadline (OCR_PAGE_TIMEOUT_S or OCR_FILE_TIMEOUT_S)" in info.value.detail
    assert "page 2 not read: OCR stopped after 0.001 seconds for the file (OCR_FILE_TIMEOUT_S" in (
        info.value.detail
    )
    assert info.value.detail.endswith("Split it into smaller files, or ask the operator to raise the limit")


def test_each_page_ocr_begins_is_published_as_progress(tmp_path: Path) -> None:
    """The worker's budget grows by OCR_PAGE_TIMEOUT_S for each of them (and the stall clock restarts)."""
    path = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH), text_image(GERMAN)])
    board = [0] * PROGRESS_SLOTS
    doc = load_document(path, "scan.pdf", board=board)
    progress = read_board(board)
    assert sorted(doc.ocr_pages) == [0, 1]
    # two pages, each reached twice (text, then blocks) and each read once by OCR: 2 + 2 + 2 steps
    assert (progress.pages, progress.ocr_pages, progress.steps) == (2, 2, 6)


def test_the_page_deadline_stops_tesseract() -> None:
    reader = OcrReader(dataclasses.replace(OcrOptions(), page_timeout_s=0.001), "slow.png")
    try:
        found = reader.read(text_image(ENGLISH * 6, dpi=300))
    finally:
        reader.close()
    assert found is not None and found.timed_out
    assert len(found.text) < len(" ".join(ENGLISH * 6))


# --- settings --------------------------------------------------------------------------------------


def test_ocr_settings_reach_the_worker_limits() -> None:
    settings = Settings(
        ocr_engine="OFF",  # type: ignore[arg-type]
        ocr_languages="deu+eng+fra",  # type: ignore[arg-type]
        parse_timeout_s=100,
        ocr_file_timeout_s=240,
    )
    ocr = ParseLimits.from_settings(settings).ocr
    assert ocr.engine == "off" and ocr.languages == ("deu", "eng", "fra")
    # kept as set: the worker's budget grows with each OCR page, so OCR no longer has to stop at
    # 80 % of PARSE_TIMEOUT_S to keep what it read
    assert ocr.file_timeout_s == 240
    # unset (the default): no cap but OCR_PAGE_TIMEOUT_S for each page begun
    assert ParseLimits.from_settings(Settings()).ocr.file_timeout_s is None


def test_a_language_that_is_no_tesseract_code_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="'German' is not a Tesseract language code"):
        Settings(ocr_languages="German")  # type: ignore[arg-type]


def test_pillow_opens_only_the_formats_we_read(tmp_path: Path) -> None:
    """An icon named .png: Pillow could open it, but only PNG, JPEG, TIFF, GIF, BMP and WebP are let in
    (never its EPS reader, which would run Ghostscript)."""
    path = tmp_path / "icon.png"
    Image.new("L", (64, 64), 255).save(path, format="ICO")
    with Image.open(path) as icon:
        assert icon.format == "ICO"
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "icon.png")
    assert "could not be read as a picture" in info.value.detail
