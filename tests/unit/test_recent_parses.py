"""Parses kept by content and options: a scan's OCR paid once by V1's ingest and the V2 index."""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app.ingest.limits import OcrOptions, ParseLimits
from app.ingest.recent import RecentParses, parse_remembered
from app.ingest.types import LoadedDocument, Section

DOC = LoadedDocument(
    sections=[Section(text="Die Prüfspannung beträgt 1500 V.", page=0, metadata={"ocr": True})],
    blocks=[],
    kind="pdf",
    content_type="application/pdf",
    page_count=1,
    ocr_pages={0: 0.91},
)
SHA = "a" * 64


def _key(**changes: object) -> str:
    args: dict[str, object] = {
        "sha256": SHA,
        "filename": "scan.pdf",
        "content_type": "application/pdf",
        "limits": ParseLimits(),
        "pdf_extract_images": False,
    }
    args.update(changes)
    return RecentParses.key(**args)  # type: ignore[arg-type]


def test_the_key_changes_with_anything_that_shapes_a_parse() -> None:
    base = _key()
    assert _key(filename="other-name.pdf") == base  # the suffix counts, not the name
    for changed in (
        _key(sha256="b" * 64),
        _key(filename="scan.txt"),
        _key(content_type="text/plain"),
        _key(pdf_extract_images=True),
        _key(limits=replace(ParseLimits(), ocr=OcrOptions(languages=("eng",)))),
        _key(limits=replace(ParseLimits(), max_chars=10)),
    ):
        assert changed != base


def test_only_expensive_parses_are_kept_and_only_for_a_while(tmp_path: Path) -> None:
    recent = RecentParses(tmp_path, max_age_s=60, min_seconds=2.0)
    text_layer = replace(DOC, ocr_pages={})
    recent.put("cheap", text_layer, seconds=0.5)
    assert recent.get("cheap") is None
    recent.put("long", text_layer, seconds=2.5)
    assert recent.get("long") == text_layer
    recent.put("ocr", DOC, seconds=0.5)  # OCR read a page: kept however quick it was
    assert recent.get("ocr") == DOC
    old = time.time() - 120
    os.utime(tmp_path / "ocr.pickle", (old, old))
    assert recent.get("ocr") is None


def test_at_most_max_entries_stay_the_newest(tmp_path: Path) -> None:
    recent = RecentParses(tmp_path, max_entries=2, min_seconds=0)
    for i, name in enumerate(("a", "b", "c")):
        recent.put(name, DOC, seconds=1)
        stamp = time.time() - 10 + i
        os.utime(tmp_path / f"{name}.pickle", (stamp, stamp))
    recent.prune()
    assert sorted(p.stem for p in tmp_path.glob("*.pickle")) == ["b", "c"]


def test_a_pickle_of_anything_but_the_document_model_is_refused(tmp_path: Path) -> None:
    recent = RecentParses(tmp_path, min_seconds=0)
    (tmp_path / "evil.pickle").write_bytes(pickle.dumps({"not": "a document"}))
    assert recent.get("evil") is None
    (tmp_path / "os.pickle").write_bytes(pickle.dumps(os.getcwd))  # a callable: refused on load
    assert recent.get("os") is None
    (tmp_path / "torn.pickle").write_bytes(pickle.dumps(DOC)[:20])
    assert recent.get("torn") is None


async def test_the_second_parse_of_the_same_bytes_reads_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def parse(path: Path, filename: str, content_type: str | None, **_: object) -> LoadedDocument:
        calls.append(filename)
        return DOC

    monkeypatch.setattr("app.ingest.recent.parse_in_worker", parse)
    recent = RecentParses(tmp_path / "kept", min_seconds=0)
    limits = ParseLimits()
    source = tmp_path / "scan.pdf"
    source.write_bytes(b"%PDF-1.4")
    first = await parse_remembered(
        recent, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=False
    )
    again = await parse_remembered(
        recent, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=False
    )
    other = await parse_remembered(
        recent, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=True
    )
    assert first == again == other == DOC
    assert calls == ["scan.pdf", "scan.pdf"]  # the third asked with other options
    # without a checksum nothing is kept or read
    await parse_remembered(None, None, source, "scan.pdf", None, limits=limits, pdf_extract_images=False)
    assert len(calls) == 3
