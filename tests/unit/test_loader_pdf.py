"""PDF loading: pages 0-based as rag_api, words kept apart, blank pages, encryption, damaged files."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import UnsupportedFileType
from app.ingest.chunking import split_sections
from app.ingest.loaders import load_document
from app.ingest.loaders.pdf import GLUED_RUN, pdf_blocks, pdfium_text
from app.ingest.loaders.pdf_structure import is_heading_line
from tests.fixtures.documents import make_pdf

FIVE_PAGES = [f"Page {n} talks about topic number {n}." for n in range(1, 6)]


def test_sentence_on_page_three_has_page_two(tmp_path: Path) -> None:
    pages = list(FIVE_PAGES)
    pages[2] = "The lighthouse keeper logged the storm at dawn."
    doc = load_document(make_pdf(tmp_path / "log.pdf", pages), "log.pdf")
    assert doc.kind == "pdf" and doc.content_type == "application/pdf"
    assert doc.page_count == 5
    assert [s.page for s in doc.sections] == [0, 1, 2, 3, 4]
    (hit,) = [s for s in doc.sections if "lighthouse keeper" in s.text]
    assert hit.page == 2
    assert hit.metadata == {"total_pages": 5, "page_label": "3"}
    chunks = split_sections(doc.sections, 1500, 100)
    assert [c.page for c in chunks if "lighthouse" in c.text] == [2]
    assert doc.text == "\n".join(s.text for s in doc.sections)


def test_long_page_wraps_and_stays_on_its_page(tmp_path: Path) -> None:
    long = " ".join(f"word{i}" for i in range(500))  # about 4,400 characters
    doc = load_document(make_pdf(tmp_path / "long.pdf", [long, "second page"]), "long.pdf")
    assert doc.page_count == 2
    assert doc.sections[0].text.split() == long.split()
    assert doc.sections[1].text == "second page"


def test_blank_pages_are_skipped_with_a_warning(tmp_path: Path) -> None:
    doc = load_document(make_pdf(tmp_path / "scan.pdf", ["first", "", "third", ""]), "scan.pdf")
    assert [s.page for s in doc.sections] == [0, 2]
    assert doc.page_count == 4
    assert any("pages 2, 4" in w and "no extractable text" in w for w in doc.warnings)


def test_pdf_without_any_text_is_empty_not_an_error(tmp_path: Path) -> None:
    doc = load_document(make_pdf(tmp_path / "blank.pdf", [""]), "blank.pdf")
    assert doc.sections == [] and doc.text == ""
    assert doc.warnings == ["page 1 has no extractable text and no picture (blank)"]


def test_a_short_page_of_text_is_not_read_by_ocr(tmp_path: Path) -> None:
    """Fewer characters than OCR_MIN_CHARS, but only text objects: its text layer is all there is."""
    path = make_pdf(tmp_path / "a.pdf", ["hello"])
    doc = load_document(path, "a.pdf", pdf_extract_images=True)
    assert [s.text for s in doc.sections] == ["hello"]
    assert doc.ocr_pages == {} and doc.warnings == []
    assert "ocr" not in doc.sections[0].metadata


def test_title_from_metadata(tmp_path: Path) -> None:
    doc = load_document(make_pdf(tmp_path / "t.pdf", ["x"], title="Annual Report"), "t.pdf")
    assert doc.title == "Annual Report"


def test_permission_only_encryption_opens(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "locked.pdf", ["secret plans"], owner_password="owner")
    doc = load_document(path, "locked.pdf")
    assert [s.text for s in doc.sections] == ["secret plans"]


def test_password_protected_pdf_is_refused(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "locked.pdf", ["secret plans"], user_password="pw", owner_password="owner")
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "locked.pdf")
    assert info.value.status_code == 415
    assert info.value.detail == "locked.pdf is password-protected. Remove the password and upload it again"


@pytest.mark.parametrize(
    "content",
    [
        b"%PDF-1.4\nthis is not really a pdf\n",
        b"%PDF-1.7\n" + bytes(range(256)) * 20,
    ],
)
def test_damaged_pdf_is_415_with_a_fixed_detail(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "broken.pdf")
    assert info.value.detail == (
        "broken.pdf could not be read as a PDF: the file is damaged or not a PDF. "
        "Re-export or re-download it and upload it again"
    )


def test_truncated_pdf_loads_or_is_415(tmp_path: Path) -> None:
    full = make_pdf(tmp_path / "full.pdf", FIVE_PAGES).read_bytes()
    path = tmp_path / "cut.pdf"
    path.write_bytes(full[: len(full) // 2])
    try:
        doc = load_document(path, "cut.pdf")
    except UnsupportedFileType as exc:
        assert "could not be read as a PDF" in exc.detail
    else:
        # pypdf rebuilds the cross-reference table of a cut file when the pages survive.
        assert all(s.page is not None for s in doc.sections)


def test_pdf_named_txt_is_read_as_pdf(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "notes.txt", ["real pdf inside"])
    doc = load_document(path, "notes.txt")
    assert doc.kind == "pdf" and doc.sections[0].text == "real pdf inside"
    assert doc.warnings[0].startswith("the file is named like a text file but is a PDF file")


def test_pdf_by_content_type_without_extension(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "blob", ["by type"])
    assert load_document(path, "blob", "application/pdf").kind == "pdf"
    assert load_document(path, "blob", None).kind == "pdf"  # the bytes say so too


def test_heading_guess() -> None:
    assert is_heading_line("2.1 Scope of Work", "The work covers")
    assert is_heading_line("INTRODUCTION", "This report")
    assert is_heading_line("Results and Discussion", "We found")
    assert not is_heading_line("This sentence ends with a period.", "Next")
    assert not is_heading_line("lower case start", "Next")
    assert not is_heading_line("Last Line", None)
    blocks = pdf_blocks("INTRODUCTION\nWe measured things.\nMore text.\n2.1 Method\nWe did it.", 3)
    assert [(b.kind, b.text, b.level, b.page) for b in blocks] == [
        ("heading", "INTRODUCTION", 1, 3),
        ("paragraph", "We measured things.\nMore text.", None, 3),
        ("heading", "2.1 Method", 2, 3),
        ("paragraph", "We did it.", None, 3),
    ]


@pytest.mark.parametrize("method", ["AES_128", "AES_256"])
def test_aes_permission_only_encryption_opens(tmp_path: Path, method: str) -> None:
    # pypdf (and fpdf2, to write it) need the `cryptography` package for AES.
    pytest.importorskip("cryptography")
    from fpdf import FPDF
    from fpdf.enums import EncryptionMethod

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.text(10, 20, "aes protected text")
    pdf.set_encryption(owner_password="owner", encryption_method=getattr(EncryptionMethod, method))
    path = tmp_path / "aes.pdf"
    pdf.output(str(path))
    assert load_document(path, "aes.pdf").text == "aes protected text"


def test_cipher_without_crypto_support_is_415(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    def no_aes(self: PdfReader, password: str) -> None:
        raise DependencyError("cryptography>=3.1 is required for AES algorithm")

    monkeypatch.setattr(PdfReader, "decrypt", no_aes)
    path = make_pdf(tmp_path / "locked.pdf", ["x"], owner_password="owner")
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, "locked.pdf")
    assert info.value.detail == (
        "locked.pdf is encrypted with a cipher this server cannot open. "
        "Remove the encryption (for example, print it to a new PDF) and upload it again"
    )


# Two pages of the Debian Reference (GPL-2+), typeset with TeX: page 9 of the English edition and
# page 26 of the German one (printed "xxv"), cut with pypdf, page labels kept. TeX positions the
# words of a justified line without space characters; pypdf returns such lines as one token.
TEX_PAGES = Path(__file__).parent.parent / "fixtures" / "tex_pages.pdf"


def test_tex_typeset_pdf_keeps_words_apart() -> None:
    doc = load_document(TEX_PAGES, "debian-reference.pdf")
    assert [s.page for s in doc.sections] == [0, 1]
    assert [s.metadata["page_label"] for s in doc.sections] == ["8", "xxv"]
    lines = [line for s in doc.sections for line in s.text.split("\n") if line.strip()]
    assert len(lines) > 40
    assert [line for line in lines if GLUED_RUN.search(line)] == []
    english, german = (s.text for s in doc.sections)
    assert "modern Linux kernels have developed this idea ever further" in english
    assert "Alle Befehlsbeispiele in dieser Referenz wurden mit der englischen" in german
    # words hyphenated at a line end come back whole; a hyphen of the word itself stays
    assert "Umgebungsvariablen" in german and "ausgeführt" in german
    assert "Gebietsschema-Einstellung" in german


def test_tex_typeset_pdf_blocks_keep_words_apart() -> None:
    doc = load_document(TEX_PAGES, "debian-reference.pdf")
    assert {b.page for b in doc.blocks} == {0, 1}
    glued = [b.text for b in doc.blocks if any(GLUED_RUN.search(line) for line in b.text.split("\n"))]
    assert glued == []
    assert {b.page_label for b in doc.blocks} == {"8", "xxv"}


def test_pypdf_text_when_pdfium_cannot_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pypdfium2

    def refuse(*args: object, **kwargs: object) -> None:
        raise pypdfium2.PdfiumError("unreadable")

    monkeypatch.setattr(pypdfium2, "PdfDocument", refuse)
    doc = load_document(make_pdf(tmp_path / "a.pdf", ["first page", "second page"]), "a.pdf")
    assert [(s.page, s.text) for s in doc.sections] == [(0, "first page"), (1, "second page")]


def test_pdfium_text_is_made_plain() -> None:
    # U+FFFE: a hyphen PDFium removed at a line end, the two lines joined
    assert pdfium_text("einge\ufffebunden und PDF\ufffeFormat\r\nnext\x10 line\r") == (
        "eingebunden und PDF-Format\nnext line\n"
    )
    assert pdfium_text("plain\ttext") == "plain\ttext"
