"""Format dispatch: extension, content type, sniffing; refusals; safe_basename; robustness."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import pytest

from app.errors import EMPTY_FILE_DETAIL, NoExtractableText, RagError, UnsupportedFileType
from app.ingest.loaders import extension, load_document, safe_basename
from app.ingest.loaders.sniff import sniff_kind, sniff_markup
from tests.fixtures.documents import (
    make_csv,
    make_docx,
    make_epub,
    make_html,
    make_pdf,
    make_pptx,
    make_text,
    make_xlsx,
)

BINARY_DETAIL = (
    "{name} looks like binary data (not text, PDF, or an Office document); upload a supported "
    "type: PDF, DOCX, PPTX, XLSX, CSV, HTML, Markdown, text, JSON, source code or a picture (PNG, JPEG, TIFF)"
)
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def ole2(stream_name: str) -> bytes:
    """Enough of an OLE2 compound file for sniffing: the magic and a directory entry name."""
    return OLE2_MAGIC + b"\x00" * 504 + stream_name.encode("utf-16-le") + b"\x00" * 1024


def refusal(path: Path, filename: str, content_type: str | None = None) -> str:
    with pytest.raises(UnsupportedFileType) as info:
        load_document(path, filename, content_type)
    assert info.value.status_code == 415
    return info.value.detail


# --------------------------------------------------------------------------- unknown extensions


def test_unknown_extension_with_text_is_indexed(tmp_path: Path) -> None:
    doc = load_document(make_text(tmp_path / "notes.xyz", "plain words here\nand more"), "notes.xyz")
    assert doc.kind == "text" and doc.text == "plain words here\nand more"


def test_unknown_extension_with_binary_is_415(tmp_path: Path) -> None:
    path = tmp_path / "file.bin"
    path.write_bytes(random.Random(1).randbytes(4096))
    assert refusal(path, "file.bin") == BINARY_DETAIL.format(name="file.bin")


def test_text_extension_with_binary_content_is_415(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(bytes(range(256)) * 8)
    assert refusal(path, "data.txt") == BINARY_DETAIL.format(name="data.txt")


def test_no_extension_html_is_read_as_html(tmp_path: Path) -> None:
    path = make_html(tmp_path / "page", "<h2>Hello</h2><p>World</p>")
    doc = load_document(path, "page", "application/octet-stream")
    assert doc.kind == "html" and doc.text == "## Hello\n\nWorld"


def test_content_type_decides_without_a_known_extension(tmp_path: Path) -> None:
    path = make_csv(tmp_path / "export.dat", [["a", "b"], ["1", "2"]])
    doc = load_document(path, "export.dat", "text/csv; charset=utf-8")
    assert doc.kind == "csv" and doc.sections[0].text == "a: 1\nb: 2"


def test_extension_beats_content_type(tmp_path: Path) -> None:
    # Browsers on Windows send CSV files as application/vnd.ms-excel.
    path = make_csv(tmp_path / "p.csv", [["a"], ["1"]])
    assert load_document(path, "p.csv", "application/vnd.ms-excel").kind == "csv"


@pytest.mark.parametrize(
    ("builder", "kind"),
    [
        (lambda p: make_pdf(p, ["x"]), "pdf"),
        (lambda p: make_docx(p, ["x"]), "docx"),
        (lambda p: make_pptx(p, ["x"]), "pptx"),
        (lambda p: make_xlsx(p, {"S": [["x"]]}), "xlsx"),
        (lambda p: make_epub(p, [("x", "y")]), "epub"),
    ],
)
def test_binary_formats_sniffed_without_a_name(tmp_path: Path, builder: object, kind: str) -> None:
    path = builder(tmp_path / "upload")  # type: ignore[operator]
    assert sniff_kind(path) == kind
    assert load_document(path, "upload").kind == kind


# ---------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("name", "stream", "needle"),
    [
        ("old.doc", "WordDocument", "save it as .docx or PDF"),
        ("old.ppt", "PowerPoint Document", "save it as .pptx or PDF"),
        ("mystery.bin", "WordDocument", "legacy Word document (.doc)"),
        ("mail.msg", "__substg1.0_0037001F", "Outlook message"),
    ],
)
# .xls is read with xlrd when installed: see test_loader_tabular.py.
def test_legacy_office_is_415_with_conversion_advice(
    tmp_path: Path, name: str, stream: str, needle: str
) -> None:
    path = tmp_path / name
    path.write_bytes(ole2(stream))
    detail = refusal(path, name)
    assert needle in detail and detail.startswith(name)


def test_password_protected_office_file(tmp_path: Path) -> None:
    # Encrypted DOCX/XLSX/PPTX are OLE2 containers holding an "EncryptedPackage" stream.
    path = tmp_path / "secret.xlsx"
    path.write_bytes(ole2("EncryptedPackage"))
    assert refusal(path, "secret.xlsx") == (
        "secret.xlsx is a password-protected Office document. "
        "Remove the password, save it, and upload it again"
    )


@pytest.mark.parametrize(
    ("name", "head"),
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
        ("photo.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"),
        ("scan.txt", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"),  # an image whatever its name says
        ("pic.webp", b"RIFF\x24\x00\x00\x00WEBPVP8 "),
    ],
)
def test_damaged_pictures_are_415(tmp_path: Path, name: str, head: bytes) -> None:
    """A picture's magic and nothing after it: read as a picture (OCR), refused as a damaged one."""
    path = tmp_path / name
    path.write_bytes(head + b"\x00" * 200)
    assert refusal(path, name) == (
        f"{name} could not be read as a picture: the file is damaged or a kind of picture this service "
        "does not read (it reads PNG, JPEG, TIFF, GIF, BMP and WebP). Save it as PNG or JPEG and upload "
        "it again"
    )


def test_zip_archive_is_415(tmp_path: Path) -> None:
    path = tmp_path / "docs.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.txt", "hello")
    assert refusal(path, "docs.zip") == (
        "docs.zip is an archive (zip, gzip, tar...); upload the documents inside it one by one"
    )


def test_gzip_named_txt_is_415(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "log.txt"
    path.write_bytes(gzip.compress(b"hello " * 100))
    assert "is an archive" in refusal(path, "log.txt")


def test_executable_is_415(tmp_path: Path) -> None:
    path = tmp_path / "tool"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 500)
    assert refusal(path, "tool").startswith("tool is a program, not a document")


def test_html_named_xls_is_read_as_html(tmp_path: Path) -> None:
    path = make_html(tmp_path / "report.xls", "<table><tr><th>a</th></tr><tr><td>1</td></tr></table>")
    doc = load_document(path, "report.xls", "application/vnd.ms-excel")
    assert doc.kind == "html" and doc.blocks[0].rows == [["1"]]


def test_errors_are_rag_errors_with_status(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(RagError) as info:
        load_document(path, "x.bin")
    assert info.value.status_code == 415


# ------------------------------------------------------------------------------ robustness


BUILDERS = {
    "a.pdf": lambda p: make_pdf(p, ["alpha " * 200, "beta " * 200]),
    "a.docx": lambda p: make_docx(p, ["alpha"] * 30, table=[["a", "b"], ["1", "2"]]),
    "a.pptx": lambda p: make_pptx(p, [{"title": "t", "body": "alpha", "notes": "n"}] * 3),
    "a.xlsx": lambda p: make_xlsx(p, {"S": [["a", "b"]] + [[i, i * 2] for i in range(50)]}),
    "a.epub": lambda p: make_epub(p, [("One", "alpha " * 50), ("Two", "beta " * 50)]),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_damaged_files_never_leak_library_errors(tmp_path: Path, name: str) -> None:
    original = BUILDERS[name](tmp_path / name).read_bytes()
    rng = random.Random(name)
    variants = [original[: int(len(original) * f)] for f in (0.05, 0.3, 0.6, 0.95)]
    for _ in range(6):
        damaged = bytearray(original)
        for _ in range(20):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        variants.append(bytes(damaged))
    for i, data in enumerate(variants):
        path = tmp_path / f"v{i}-{name}"
        path.write_bytes(data)
        try:
            load_document(path, name)
        except UnsupportedFileType as exc:
            assert exc.detail.startswith(name)  # a fixed detail of ours, not library text


# ----------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\Desktop\\report.pdf", "report.pdf"),
        ("a/b\\c.txt", "c.txt"),
        ("", "upload"),
        ("/", "upload"),
        ("dir/", "upload"),
        ("..", "upload"),
        ("bad\x00na\x1fme\x7f.txt", "badname.txt"),
        ("  spaced name.txt \n", "spaced name.txt"),
        ("invoice\u202efdp.exe", "invoicefdp.exe"),  # no right-to-left override to disguise the extension
        ("e\u0301te\u0301.txt", "été.txt"),  # NFC
        ("Dockerfile", "Dockerfile"),
        (".env", ".env"),
    ],
)
def test_safe_basename(raw: str, safe: str) -> None:
    assert safe_basename(raw) == safe


def test_safe_basename_caps_bytes_and_keeps_extension() -> None:
    long_ascii = safe_basename("a" * 300 + ".pdf")
    assert len(long_ascii.encode()) == 255 and long_ascii.endswith("a.pdf")
    # 200 two-byte characters = 400 bytes: cut on a character boundary to at most 255 bytes.
    long_utf8 = safe_basename("é" * 200 + ".docx")
    assert len(long_utf8.encode()) <= 255 and long_utf8.endswith("é.docx")
    long_utf8.encode("utf-8").decode("utf-8")
    assert len(safe_basename("x" * 400).encode()) == 255


@pytest.mark.parametrize(
    ("name", "ext"),
    [
        ("a.PDF", "pdf"),
        ("archive.tar.gz", "gz"),
        ("Dockerfile", "dockerfile"),
        (".env", "env"),
        ("x.", ""),
    ],
)
def test_extension(name: str, ext: str) -> None:
    assert extension(name) == ext


def test_sniff_markup() -> None:
    assert sniff_markup("\ufeff  <!DOCTYPE html><html>") == "html"
    assert sniff_markup('<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml">') == "html"
    assert sniff_markup('<?xml version="1.0"?><root/>') == "xml"
    assert sniff_markup("just text <html> later") is None


def test_text_mentioning_pdf_header_is_not_a_pdf(tmp_path: Path) -> None:
    path = make_text(tmp_path / "notes.md", "# PDF internals\n\nEvery file starts with %PDF-1.7 and ...")
    assert sniff_kind(path) is None
    assert load_document(path, "notes.md").kind == "markdown"


@pytest.mark.parametrize(
    "name",
    [
        *("empty.txt", "empty.csv", "empty.md", "empty.html", "empty.json", "empty"),
        # binary formats by name: before, 415 "could not be read as a PDF", "is damaged: its zip
        # container cannot be read", "legacy Excel workbook"
        *("empty.pdf", "empty.docx", "empty.xlsx", "empty.pptx", "empty.xls", "empty.png", "empty.epub"),
    ],
)
@pytest.mark.parametrize("content", [b"", b" \n\r\n\t"], ids=["0-bytes", "blank"])
def test_empty_files_are_refused_as_empty_whatever_their_format(
    tmp_path: Path, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(NoExtractableText) as refused:
        load_document(path, name)
    assert refused.value.status_code == 422
    assert refused.value.detail == EMPTY_FILE_DETAIL


def test_a_pdf_of_junk_is_still_damaged_not_empty(tmp_path: Path) -> None:
    path = tmp_path / "junk.pdf"
    path.write_bytes(bytes(range(256)) * 4)
    assert "could not be read as a PDF" in refusal(path, "junk.pdf")
