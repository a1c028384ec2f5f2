"""Parsing limits in-process: counted zip reads, markup pre-scans, cells, shared strings, characters."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest

from app.config import load_settings
from app.ingest.codec import DocumentUnpickler
from app.ingest.limits import (
    PAGE_CHARS,
    PROGRESS_SLOTS,
    BoundedZipFile,
    ParseLimitExceeded,
    ParseLimits,
    ParseProgress,
    guarded,
    read_board,
)
from app.ingest.loaders import load_document
from app.ingest.loaders.prescan import scan_html
from tests.fixtures.bombs import docx_bomb, nested_html, xlsx_huge_sheet, xlsx_shared_string_bomb
from tests.fixtures.documents import make_html, make_pdf, make_text

MIB = 1024 * 1024


def _refused(path: Path, name: str, limits: ParseLimits | None = None) -> ParseLimitExceeded:
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(path, name, limits=limits)
    return info.value


def test_zip_members_are_counted_while_they_inflate(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("big.xml", b"<a/>" * (3 * MIB // 4))
    with guarded(ParseLimits(max_unzipped_bytes=2 * MIB), "a.zip") as guard, BoundedZipFile(path) as archive:
        with archive.open("big.xml") as member:
            assert len(member.read(MIB)) == MIB  # reading in steps is fine below the limit
        with archive.open("big.xml") as member:
            member.read(MIB)  # the same bytes again count once
        assert guard.unzipped == MIB
        with pytest.raises(ParseLimitExceeded) as info:
            archive.read("big.xml")  # a whole-member read is stopped part way, not after inflating
    assert info.value.status_code == 413
    assert "it unpacks to more than 2 MiB (PARSE_MAX_UNZIPPED_BYTES)" in info.value.detail


def test_office_libraries_read_through_the_bounded_zip(tmp_path: Path) -> None:
    import docx.opc.phys_pkg
    import openpyxl.reader.excel
    import pptx.opc.serialized
    from docx.package import Package

    import app.ingest.loaders  # noqa: F401 - installs the seams

    assert docx.opc.phys_pkg.ZipFile is BoundedZipFile
    assert openpyxl.reader.excel.ZipFile is BoundedZipFile
    assert pptx.opc.serialized.zipfile.ZipFile is BoundedZipFile
    # And the seam is really used: python-docx reading its package is counted.
    path = docx_bomb(tmp_path / "b.docx", 3 * MIB)
    with guarded(ParseLimits(max_unzipped_bytes=2 * MIB), "b.docx"), pytest.raises(ParseLimitExceeded):
        Package.open(str(path))


def test_declared_size_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    path = docx_bomb(tmp_path / "d.docx", 8 * MIB)
    error = _refused(path, "d.docx", ParseLimits(max_unzipped_bytes=4 * MIB))
    assert error.status_code == 413
    assert error.detail.startswith("d.docx was refused: it unpacks to 9 MiB, more than 4 MiB")


def test_padded_bomb_with_an_ordinary_ratio_is_refused(tmp_path: Path) -> None:
    # 40 MiB of XML behind 2 MiB of stored random bytes: the file inflates only ~20x, like a real
    # document, so a ratio test passes it; the element count does not.
    path = docx_bomb(tmp_path / "p.docx", 40 * MIB, padding=2 * MIB)
    with zipfile.ZipFile(path) as archive:
        assert sum(i.file_size for i in archive.infolist()) < 25 * path.stat().st_size
    error = _refused(path, "p.docx", ParseLimits(max_elements=500_000))
    assert error.status_code == 413
    assert "more than 500,000 markup elements (PARSE_MAX_ELEMENTS)" in error.detail


def test_huge_sheet_is_refused_by_its_cells_before_openpyxl(tmp_path: Path) -> None:
    path = xlsx_huge_sheet(tmp_path / "h.xlsx", 20 * MIB)  # ~1.1 M cells
    error = _refused(path, "h.xlsx", ParseLimits(max_cells=200_000))
    assert "more than 200,000 cells (PARSE_MAX_CELLS)" in error.detail


def test_shared_string_amplification_is_counted(tmp_path: Path) -> None:
    path = xlsx_shared_string_bomb(tmp_path / "s.xlsx", cells=100_000)
    assert path.stat().st_size < 20_000  # expands to 2 GB of cell text
    error = _refused(path, "s.xlsx")
    assert error.status_code == 413
    assert "more than 50,000,000 characters of text (PARSE_MAX_CHARS)" in error.detail


def test_shared_string_table_size_is_limited(tmp_path: Path) -> None:
    path = xlsx_shared_string_bomb(tmp_path / "t.xlsx", cells=100, string_chars=5, unique=50)
    doc = load_document(path, "t.xlsx", limits=ParseLimits(max_shared_strings=100))
    assert doc.blocks[0].rows[0][0] == "AAAAA0"
    error = _refused(path, "t.xlsx", ParseLimits(max_shared_strings=10))
    assert "shared-string table has more than 10 entries (PARSE_MAX_SHARED_STRINGS)" in error.detail


def test_nested_html_is_refused_at_once(tmp_path: Path) -> None:
    error = _refused(nested_html(tmp_path / "n.html"), "n.html")
    assert error.status_code == 422
    assert "nested more than 512 levels deep (PARSE_MAX_DEPTH)" in error.detail


@pytest.mark.parametrize(
    "markup",
    [
        "<p>a" * 5000,  # unclosed paragraphs close each other
        "<ul>" + "<li>item" * 5000 + "</ul>",
        "<table>" + "<tr><td>a<td>b" * 5000 + "</table>",
        "<dl>" + "<dt>t<dd>d" * 5000 + "</dl>",
        "<select>" + "<option>o" * 5000 + "</select>",
        "<p><a href=x>link<p>next" * 2000,
        "<svg>" + "<path/>" * 5000 + "</svg>",
        "<script>" + "<div>" * 5000 + "</script>",
        "<!--" + "<div>" * 5000 + "-->",
    ],
)
def test_sloppy_but_shallow_html_passes_the_depth_scan(markup: str) -> None:
    with guarded(ParseLimits(max_depth=64), "page.html") as guard:
        scan_html(markup, guard)
    # shallow indeed: implied end tags keep each of them within 4 levels, whatever its length
    with guarded(ParseLimits(max_depth=4), "page.html") as guard:
        scan_html(markup, guard)


@pytest.mark.parametrize("markup", ["<div>" * 100, "<div/>" * 100, "<b>" * 100, "<ul><li>" * 60])
def test_really_nested_html_fails_the_depth_scan(markup: str) -> None:
    with guarded(ParseLimits(max_depth=64), "page.html") as guard, pytest.raises(ParseLimitExceeded):
        scan_html(markup, guard)


def test_html_element_count(tmp_path: Path) -> None:
    path = make_html(tmp_path / "e.html", "<span>x</span>" * 2000)
    error = _refused(path, "e.html", ParseLimits(max_elements=1000))
    assert "more than 1,000 markup elements" in error.detail


def test_xml_depth_and_elements(tmp_path: Path) -> None:
    deep = make_text(tmp_path / "d.xml", "<a>" * 300 + "x" + "</a>" * 300)
    error = _refused(deep, "d.xml")
    assert error.status_code == 422 and "more than 256 levels deep" in error.detail
    wide = make_text(tmp_path / "w.xml", "<r>" + "<i>x</i>" * 2000 + "</r>")
    assert "markup elements" in _refused(wide, "w.xml", ParseLimits(max_elements=1000)).detail


def test_total_characters(tmp_path: Path) -> None:
    path = make_text(tmp_path / "t.txt", "word " * 1000)
    assert load_document(path, "t.txt", limits=ParseLimits(max_chars=5000)).text
    error = _refused(path, "t.txt", ParseLimits(max_chars=4999))
    assert "more than 4,999 characters of text (PARSE_MAX_CHARS)" in error.detail


def test_limit_errors_survive_pickling() -> None:
    error = pickle.loads(pickle.dumps(ParseLimitExceeded("too deep", 422)))  # noqa: S301 - our own bytes
    assert (error.status_code, error.detail) == (422, "too deep")


def test_worker_answers_are_read_with_an_allow_list() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, ...]:
            return (print, ("owned",))

    with pytest.raises(pickle.UnpicklingError):
        DocumentUnpickler(io.BytesIO(pickle.dumps(("ok", Evil())))).load()


# --- progress and the time budget ------------------------------------------------------------------


def test_a_pdf_publishes_its_pages_as_it_reads_them(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "five.pdf", [f"Page {n} says something." for n in range(1, 6)])
    board = [0] * PROGRESS_SLOTS  # the worker passes shared memory; any list of integers will do
    load_document(path, "five.pdf", board=board)
    progress = read_board(board)
    # two passes over five pages: the text of each first, then each page's blocks
    assert (progress.pages, progress.steps, progress.ocr_pages) == (5, 10, 0)
    assert progress.chars == sum(len(f"Page {n} says something.") for n in range(1, 6))


def test_formats_without_pages_publish_their_characters(tmp_path: Path) -> None:
    board = [0] * PROGRESS_SLOTS
    load_document(make_html(tmp_path / "a.html", "<p>" + "word " * 1200 + "</p>"), "a.html", board=board)
    progress = read_board(board)
    # 1,200 words of five characters, the last space trimmed: 5,999 characters, two pages' worth
    assert (progress.pages, progress.chars) == (0, 5999) and progress.elements > 0
    assert progress.work == 5999 / PAGE_CHARS


def test_the_budget_grows_with_the_pages_read_and_ocr_pages_begun() -> None:
    limits = ParseLimits()  # PARSE_TIMEOUT_S 300, PARSE_SECONDS_PER_PAGE 2, OCR_PAGE_TIMEOUT_S 30
    assert limits.budget_s(ParseProgress()) == 300
    # the 1,400-page manual: 300 + 2 * 1,400 = 3,100 s (it took ~1,280 s at load 10)
    assert limits.budget_s(ParseProgress(pages=1400, chars=1400 * 2500)) == 3100
    # 10 of them scanned: 3,100 + 30 * 10
    assert limits.budget_s(ParseProgress(pages=1400, ocr_pages=10)) == 3400
    # a text without pages: 30,000 characters are 10 pages, 300 + 2 * 10
    assert limits.budget_s(ParseProgress(chars=30_000)) == 320
    # counters that lie earn no more than the largest file within the size limits could:
    # 300 + 2 * 50,000,000 / 3,000 + 30 * 100 OCR pages
    assert limits.ceiling_s == pytest.approx(300 + 2 * 50_000_000 / 3000 + 3000)
    assert limits.budget_s(ParseProgress(pages=10**9)) == limits.ceiling_s


def test_parse_time_settings_reach_the_worker_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARSE_TIMEOUT_S", "600")  # existing deployments keep their value: now the base
    monkeypatch.setenv("PARSE_SECONDS_PER_PAGE", "1.5")
    monkeypatch.setenv("PARSE_STALL_TIMEOUT_S", "45")
    limits = ParseLimits.from_settings(load_settings(_env_file=None))
    assert (limits.timeout_s, limits.seconds_per_page, limits.stall_s) == (600, 1.5, 60)
    # 60, not 45: Tesseract reads a page for up to OCR_PAGE_TIMEOUT_S (30) without a word, plus 30 s
    monkeypatch.setenv("OCR_PAGE_TIMEOUT_S", "5")
    assert ParseLimits.from_settings(load_settings(_env_file=None)).stall_s == 45


def test_one_codec_reads_documents_and_refuses_every_other_class(tmp_path: Path) -> None:
    """The worker's pipe and the parse cache (expensive parses, surveys' parses) share `app.ingest.codec`."""
    from app.ingest import codec
    from app.ingest.types import Block, LoadedDocument, Section

    document = LoadedDocument([Section("text", 0)], [Block("paragraph", "text", 0)], "text", "text/plain")
    kept = tmp_path / "doc.pickle"
    with kept.open("wb") as handle:
        codec.dump(document, handle)
    with kept.open("rb") as handle:
        assert codec.load_document(handle) == document
    # a pickle naming any other class is refused, not run
    with kept.open("wb") as handle:
        codec.dump(Path("elsewhere"), handle)
    with kept.open("rb") as handle:
        assert codec.load_document(handle) is None
