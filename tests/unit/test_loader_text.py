"""Text formats: plain text and code, encodings, Markdown, HTML, JSON and XML."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from app.errors import EMPTY_FILE_DETAIL, NoExtractableText
from app.ingest.limits import ParseLimitExceeded
from app.ingest.loaders import load_document
from app.ingest.loaders.markdown import parse_markdown
from app.ingest.loaders.text import NotText, decode_text
from tests.fixtures.documents import make_html, make_text

GERMAN = "Grüße aus Köln: Straße, Äpfel, Öl und Übermut.\nZweite Zeile mit ß."


@pytest.mark.parametrize(
    ("encoding", "reported"),
    [
        ("utf-8", "utf-8"),
        ("utf-8-sig", "utf-8"),
        ("utf-16", "utf-16-le"),  # Python writes a BOM and little-endian
        ("utf-16-be", "utf-16-be"),  # no BOM: recognised by its zero high bytes
        ("utf-32", "utf-32-le"),
        ("cp1252", "cp1252"),
    ],
)
def test_text_encodings(tmp_path: Path, encoding: str, reported: str) -> None:
    doc = load_document(make_text(tmp_path / "g.txt", GERMAN, encoding=encoding), "g.txt")
    assert doc.text == GERMAN  # no BOM character left at the start
    assert doc.encoding == reported
    assert doc.kind == "text" and doc.content_type == "text/plain"


def test_bom_variants() -> None:
    assert decode_text(codecs.BOM_UTF8 + "é".encode()) == ("é", "utf-8")
    assert decode_text(codecs.BOM_UTF16_BE + "é".encode("utf-16-be")) == ("é", "utf-16-be")
    assert decode_text(codecs.BOM_UTF32_LE + "é".encode("utf-32-le")) == ("é", "utf-32-le")


def test_newlines_are_normalised(tmp_path: Path) -> None:
    doc = load_document(make_text(tmp_path / "n.txt", "a\r\nb\rc\nd"), "n.txt")
    assert doc.text == "a\nb\nc\nd"


def test_utf8_cut_mid_character_is_still_utf8() -> None:
    data = "naïve café".encode()[:-1]  # the last "é" lost its second byte
    text, encoding = decode_text(data)
    assert encoding == "utf-8" and text.startswith("naïve caf")


def test_binary_is_not_text() -> None:
    with pytest.raises(NotText):
        decode_text(bytes(range(256)) * 16)


def test_nul_bytes_are_removed(tmp_path: Path) -> None:
    # One stray NUL in a long text is a glitch, not a binary file; PostgreSQL cannot store it.
    doc = load_document(make_text(tmp_path / "nul.txt", "before " * 500 + "\x00" + "after " * 500), "nul.txt")
    assert "\x00" not in doc.text and "before after" in doc.text


def test_an_empty_text_file_is_refused_as_empty(tmp_path: Path) -> None:
    for name, text in (("e.txt", ""), ("w.txt", "  \n\n ")):
        with pytest.raises(NoExtractableText) as refused:
            load_document(make_text(tmp_path / name, text), name)
        assert refused.value.detail == EMPTY_FILE_DETAIL


def test_source_code_blocks(tmp_path: Path) -> None:
    code = "import os\n\n\ndef main():\n    return os.getcwd()\n"
    doc = load_document(make_text(tmp_path / "m.py", code), "m.py")
    assert doc.text == code
    assert [(b.kind, b.text) for b in doc.blocks] == [
        ("code", "import os"),
        ("code", "def main():\n    return os.getcwd()"),
    ]


def test_dockerfile_without_extension_is_text(tmp_path: Path) -> None:
    doc = load_document(make_text(tmp_path / "Dockerfile", "FROM python:3.11\nRUN true\n"), "Dockerfile")
    assert doc.kind == "text" and doc.text.startswith("FROM python")


def test_json_is_text(tmp_path: Path) -> None:
    doc = load_document(make_text(tmp_path / "d.json", '{"key": "value", "n": [1, 2]}'), "d.json")
    assert doc.kind == "json" and doc.content_type == "application/json"
    assert doc.text == '{"key": "value", "n": [1, 2]}'


def test_markdown_keeps_text_and_parses_blocks(tmp_path: Path) -> None:
    text = (
        "# Guide\n\nIntro line one\nline two.\n\n## Setup ##\n\n- install it\n  carefully\n- run it\n"
        "1. first\n\n| Name | Value |\n| :--- | ---: |\n| a \\| b | 1 |\n| c | 2 |\n\n"
        "```bash\nmake test\n\n# not a heading\n```\n\nEnd."
    )
    doc = load_document(make_text(tmp_path / "g.md", text), "g.md")
    assert doc.kind == "markdown" and doc.title == "Guide"
    assert doc.text == text
    assert [(b.kind, b.level, b.text) for b in doc.blocks] == [
        ("heading", 1, "Guide"),
        ("paragraph", None, "Intro line one\nline two."),
        ("heading", 2, "Setup"),
        ("list_item", 1, "install it carefully"),
        ("list_item", 1, "run it"),
        ("list_item", 1, "first"),
        ("table", None, "Name | Value\na | b | 1\nc | 2"),
        ("code", None, "make test\n\n# not a heading"),
        ("paragraph", None, "End."),
    ]
    table = doc.blocks[6]
    assert table.headers == ["Name", "Value"] and table.rows == [["a | b", "1"], ["c", "2"]]
    assert doc.blocks[7].title == "bash"


def test_markdown_edge_cases() -> None:
    # "a | b" over "---" is a setext heading (CommonMark), not a table (cell counts differ);
    # "#5" is no heading; an unclosed fence runs to the end; nested lists keep their depth.
    blocks = parse_markdown(
        "a | b\n---\n\n#5 is a tag\n\nTitle\n=====\n\n- outer\n  - inner\n\n> quoted *text*\n\n```\nunclosed"
    )
    assert [(b.kind, b.level, b.text) for b in blocks] == [
        ("heading", 2, "a | b"),
        ("paragraph", None, "#5 is a tag"),
        ("heading", 1, "Title"),
        ("list_item", 1, "outer"),
        ("list_item", 2, "inner"),
        ("paragraph", None, "quoted text"),
        ("code", None, "unclosed"),
    ]


def test_markdown_inline_markup_never_splits_words() -> None:
    (paragraph,) = parse_markdown("Set `max`_size, **max**_size or max\\_size; see [the guide](http://x/y).")
    assert paragraph.text == "Set max_size, max_size or max_size; see the guide."
    (table,) = parse_markdown("| key | meaning |\n|---|---|\n| `max`_size | the **largest** size |")
    assert table.headers == ["key", "meaning"] and table.rows == [["max_size", "the largest size"]]


def test_markdown_hostile_inline_is_bounded() -> None:
    # markdown-it's inline parser slows down on runs like this; an overlong one stays raw text.
    blocks = parse_markdown("[" * 200_000)
    assert blocks[0].text == "[" * 200_000


def test_html_structure_and_noise(tmp_path: Path) -> None:
    body = (
        "<nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
        "<script>var tracking = 1;</script><style>p { color: red }</style><noscript>Enable JS</noscript>"
        "<main><h1>Release notes</h1><div>Version <b>2.0</b> is out.<br>Upgrade now.</div>"
        "<h3>Changes</h3><ul><li>Faster search</li><li>New loaders<ul><li>PDF</li></ul></li></ul>"
        "<table><thead><tr><th>Item</th><th>Status</th></tr></thead>"
        "<tbody><tr><td>Search</td><td>done</td></tr><tr><td>Docs</td><td>open</td></tr></tbody></table>"
        "<pre>pip install ragoverlay\n  --upgrade</pre></main>"
    )
    doc = load_document(make_html(tmp_path / "n.html", body, title="Notes"), "n.html")
    assert doc.kind == "html" and doc.title == "Notes"
    for noise in ("Home", "tracking", "color", "Enable JS"):
        assert noise not in doc.text
    # <nav> is kept as a marked block (V2 leaves it out), never in V1's text (as before).
    nav = doc.blocks.pop(0)
    assert (nav.kind, nav.text, nav.boilerplate) == ("paragraph", "Home | About", "nav")
    assert all(b.boilerplate is None for b in doc.blocks)
    assert [(b.kind, b.level, b.text) for b in doc.blocks] == [
        ("heading", 1, "Release notes"),
        ("paragraph", None, "Version 2.0 is out.\nUpgrade now."),
        ("heading", 3, "Changes"),
        ("list_item", None, "Faster search"),
        ("list_item", None, "New loaders"),
        ("list_item", None, "PDF"),
        ("table", None, "Item | Status\nSearch | done\nDocs | open"),
        ("code", None, "pip install ragoverlay\n  --upgrade"),
    ]
    assert doc.blocks[6].headers == ["Item", "Status"]
    assert doc.blocks[6].rows == [["Search", "done"], ["Docs", "open"]]
    assert doc.text == (
        "# Release notes\n\nVersion 2.0 is out.\nUpgrade now.\n\n### Changes\n\n"
        "- Faster search\n- New loaders\n- PDF\n\nItem | Status\nSearch | done\nDocs | open\n\n"
        "pip install ragoverlay\n  --upgrade"
    )


def test_html_in_cp1252(tmp_path: Path) -> None:
    doc = load_document(make_html(tmp_path / "l.htm", paragraphs=["Café crème"], encoding="cp1252"), "l.htm")
    assert doc.text == "Café crème"


def test_deeply_nested_html_is_read_up_to_the_depth_limit(tmp_path: Path) -> None:
    # 480 levels: past the walker's recursion depth (read as flat text), within PARSE_MAX_DEPTH.
    body = "<div>" * 480 + "deep <b>text</b>" + "</div>" * 480
    doc = load_document(make_html(tmp_path / "deep.html", body), "deep.html")
    assert doc.text == "deep text"
    with pytest.raises(ParseLimitExceeded) as info:
        load_document(make_html(tmp_path / "deeper.html", "<div>" * 3000 + "x"), "deeper.html")
    assert info.value.status_code == 422 and "PARSE_MAX_DEPTH" in info.value.detail


def test_xml_text_content(tmp_path: Path) -> None:
    xml = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<!-- c --><notes><n>Grüße</n><n>zwei</n></notes>'
    doc = load_document(make_text(tmp_path / "n.xml", xml, encoding="latin-1"), "n.xml")
    assert doc.kind == "xml" and doc.text == "Grüße\nzwei"


def test_xml_external_entities_are_not_resolved(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    xml = (
        f'<?xml version="1.0"?>\n<!DOCTYPE r [<!ENTITY xxe SYSTEM "file://{secret}">]>'
        "<r><a>before &xxe; after</a></r>"
    )
    doc = load_document(make_text(tmp_path / "x.xml", xml), "x.xml")
    assert "TOP-SECRET" not in doc.text
    assert "before" in doc.text


def test_xml_entity_expansion_is_not_performed(tmp_path: Path) -> None:
    lol = (
        '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(
            f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(10)
        )
        + "]><lolz>&lol9;</lolz>"
    )
    doc = load_document(make_text(tmp_path / "lol.xml", lol), "lol.xml")
    assert len(doc.text) < 1000


def test_malformed_xml_is_indexed_as_text(tmp_path: Path) -> None:
    doc = load_document(make_text(tmp_path / "bad.xml", "<a><b>unclosed</a>"), "bad.xml")
    assert doc.kind == "xml" and "unclosed" in doc.text
    assert doc.warnings == ["the XML is not well-formed; indexed as plain text"]


def test_encoding_of_a_large_file_is_found_past_an_ascii_head() -> None:
    # 1 MiB of ASCII, then accented cp1252 lines: detection samples the head plus the non-ASCII
    # lines (the file is over 2 x 256 KiB), and must still see the accents.
    data = b"plain ascii line\n" * 62_000 + ("Café crème brûlée à la carte\n" * 2_000).encode("cp1252")
    text, encoding = decode_text(data)
    assert encoding == "cp1252"
    assert text.endswith("Café crème brûlée à la carte\n") and "\ufffd" not in text
