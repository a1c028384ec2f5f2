"""Entities and language: domain-neutral patterns, configurable lists."""

from __future__ import annotations

import itertools

import pytest

from app.text.entities import EntityConfig, EntityExtractor, detect_language, parse_number


def kinds(text: str, language: str | None = None, extractor: EntityExtractor | None = None) -> list[tuple]:
    found = (extractor or EntityExtractor()).extract(text, language)
    return [(e.kind, e.raw, e.normalized) for e in found]


def test_identifiers() -> None:
    found = kinds("Set max_size on B-DETECTION_PLUS / K 28 via getValue in config.yaml, e.g. on x86_64.")
    assert ("identifier", "max_size", "max size") in found
    assert ("identifier", "B-DETECTION_PLUS", "b detection plus") in found
    assert ("identifier", "K 28", "k 28") in found
    assert ("identifier", "getValue", "getvalue") in found
    assert ("identifier", "config.yaml", "config yaml") in found
    assert ("identifier", "x86_64", "x 86 64") in found
    # plain words, abbreviations and sentence punctuation are not identifiers
    raws = {raw for _, raw, _ in found}
    assert not raws & {"Set", "e.g", "e.g.", "via", "on"}


def test_plain_words_and_acronyms_are_not_identifiers() -> None:
    assert kinds("The USB port and the U.S.A. and state-of-the-art e-mail.") == []


def test_standards_claim_their_designation() -> None:
    found = kinds("Tested to DIN EN ISO 13849-1:2015, IEC 61508-3 and ASTM D638; see RFC 9110.")
    standards = [(raw, norm) for kind, raw, norm in found if kind == "standard"]
    assert standards == [
        ("DIN EN ISO 13849-1:2015", "din en iso 13849 1 2015"),
        ("IEC 61508-3", "iec 61508 3"),
        ("ASTM D638", "astm d 638"),
        ("RFC 9110", "rfc 9110"),
    ]
    # the designation is not also an identifier or a quantity
    assert all(kind == "standard" for kind, _, _ in found)


def test_quantities_value_and_unit() -> None:
    extractor = EntityExtractor()
    found = [e for e in extractor.extract("1,5 mm, 10MB, 230 V, 20 °C, 50 %, 3 mW and 3 MW, 5 KG", "de")]
    pairs = [(e.value, e.unit, e.normalized) for e in found if e.kind == "quantity"]
    assert pairs == [
        (1.5, "mm", "1.5 mm"),  # German decimal comma
        (10.0, "MB", "10 MB"),
        (230.0, "V", "230 V"),
        (20.0, "°C", "20 °C"),
        (50.0, "%", "50 %"),
        (3.0, "mW", "3 mW"),  # case decides between milli and mega
        (3.0, "MW", "3 MW"),
        (5.0, "kg", "5 kg"),  # an unambiguous alias in any case
    ]


def test_range_is_two_quantities_and_words_after_numbers_are_not_units() -> None:
    found = EntityExtractor().extract("from 10-20 mm, 5 to 7 kg, for 3 months at 5 more", "en")
    assert [(e.value, e.unit) for e in found] == [(10.0, "mm"), (20.0, "mm"), (5.0, "kg"), (7.0, "kg")]


def test_units_are_configurable() -> None:
    extractor = EntityExtractor(EntityConfig(units={"widgets": "widget"}))
    found = extractor.extract("12 widgets and 12 mm")
    assert [(e.value, e.unit) for e in found if e.kind == "quantity"] == [(12.0, "widget")]


@pytest.mark.parametrize(
    ("raw", "language", "value"),
    [
        ("1,5", "de", 1.5),
        ("1,5", "en", 1.5),  # one comma, not three digits after it: decimal
        ("1,000", "en", 1000.0),  # English thousands
        ("1,000", "de", 1.0),  # German decimal
        ("1.000", "de", 1000.0),  # German thousands
        ("1.000", "en", 1.0),
        ("1.000.000", None, 1_000_000.0),
        ("1,234.5", None, 1234.5),
        ("1.234,5", None, 1234.5),
        ("-3", None, -3.0),
        ("abc", None, None),
    ],
)
def test_parse_number(raw: str, language: str | None, value: float | None) -> None:
    assert parse_number(raw, language) == value


def test_dates_in_iso_form() -> None:
    found = kinds(
        "Issued 5 January 2024, revised 2024-02-03, 05.03.2024, March 7, 2024, 5. März 2024, May 2021"
    )
    dates = [norm for kind, _, norm in found if kind == "date"]
    assert dates == ["2024-01-05", "2024-02-03", "2024-03-05", "2024-03-07", "2024-03-05", "2021-05"]


def test_slash_dates_follow_the_language_or_stay_unparsed() -> None:
    assert [n for k, _, n in kinds("on 03/04/2020", "de") if k == "date"] == ["2020-04-03"]
    assert [n for k, _, n in kinds("on 03/04/2020", "en") if k == "date"] == ["2020-03-04"]
    assert [n for k, _, n in kinds("on 03/04/2020") if k == "date"] == []  # ambiguous
    assert [n for k, _, n in kinds("on 31/04/2020") if k == "date"] == []  # no such day


def test_document_numbers_and_revisions() -> None:
    found = kinds("Doc. No. 12-345-A, Rev. C, Version 2.1, Stand: 03/2020. Please review 3 items.")
    assert ("document_number", "12-345-A", "12 345 a") in found
    assert ("revision", "C", "c") in found
    assert ("revision", "2.1", "2.1") in found
    assert ("revision", "03/2020", "03 2020") in found
    assert not any(kind == "revision" and raw == "3" for kind, raw, _ in found)  # "review" is no label


def test_extra_identifier_patterns() -> None:
    extractor = EntityExtractor(EntityConfig(identifier_patterns=(r"\bPN\s?\d{3}-\d{2}\b",)))
    assert ("identifier", "PN 123-45", "pn 123 45") in kinds("order PN 123-45 now", extractor=extractor)


def test_spans_never_overlap() -> None:
    found = EntityExtractor().extract("ISO 9001 K28 10mm 2024-01-05 Rev. 3 max_size")
    spans = sorted((e.start, e.end) for e in found)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start


def test_language_detection() -> None:
    assert (
        detect_language("Die Maschine ist mit der Steuerung verbunden und wird über das Menü bedient.")
        == "de"
    )
    assert (
        detect_language("The machine is connected to the controller and is operated from the menu.") == "en"
    )
    assert detect_language("K 28 B-DETECTION 12 mm") is None  # no stopwords: unknown


def test_document_metadata() -> None:
    from app.evidence.index.metadata import document_metadata
    from app.ingest.types import Block, LoadedDocument

    blocks = [
        Block("paragraph", "Doc. No. 4711-A Rev. C", 0, boilerplate="footer"),
        Block("paragraph", "Home", 0, boilerplate="nav"),  # navigation is never read for metadata
        Block("heading", "Betriebsanleitung", 0, level=1),
        Block(
            "paragraph", "Ausgabe vom 5. März 2024. Die Maschine ist für den Betrieb in Hallen bestimmt.", 0
        ),
    ]
    document = LoadedDocument(sections=[], blocks=blocks, kind="pdf", content_type="application/pdf")
    meta = document_metadata(document, "manual.pdf")
    assert meta.title == "Betriebsanleitung"
    assert (meta.language, meta.document_number, meta.revision) == ("de", "4711-A", "C")
    assert meta.publication_date == "2024-03-05"
    declared = LoadedDocument(
        sections=[],
        blocks=[Block("paragraph", "Just text", 0)],
        kind="docx",
        content_type="x",
        title="Spec",
        properties={"language": "en-GB", "created": "2021-06-01T10:00:00Z"},
    )
    meta = document_metadata(declared, "spec.docx")
    assert (meta.title, meta.language, meta.publication_date, meta.revision) == (
        "Spec",
        "en",
        "2021-06-01",
        None,
    )
    bare = LoadedDocument(sections=[], blocks=[], kind="txt", content_type="text/plain")
    assert document_metadata(bare, "notes.txt").title == "notes"
