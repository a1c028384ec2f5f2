"""The one parse cache: a scan's OCR paid once by V1's ingest and the V2 index, and a backfill's
survey parse read back by its stage step, by content and options."""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app.ingest.limits import OcrOptions, ParseLimits
from app.ingest.parse_cache import ParseCache, parse_remembered
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
    return ParseCache.key(**args)  # type: ignore[arg-type]


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
    cache = ParseCache(tmp_path, max_age_s=60, min_seconds=2.0)
    text_layer = replace(DOC, ocr_pages={})
    cache.put("cheap", text_layer, seconds=0.5)
    assert cache.get("cheap") is None
    cache.put("long", text_layer, seconds=2.5)
    assert cache.get("long") == text_layer
    cache.put("ocr", DOC, seconds=0.5)  # OCR read a page: kept however quick it was
    assert cache.get("ocr") == DOC
    old = time.time() - 120
    os.utime(tmp_path / "ocr.pickle", (old, old))
    assert cache.get("ocr") is None


def test_at_most_max_entries_stay_the_newest(tmp_path: Path) -> None:
    cache = ParseCache(tmp_path, max_entries=2, min_seconds=0)
    for i, name in enumerate(("a", "b", "c")):
        cache.put(name, DOC, seconds=1)
        stamp = time.time() - 10 + i
        os.utime(tmp_path / f"{name}.pickle", (stamp, stamp))
    cache.prune()
    assert sorted(p.stem for p in tmp_path.glob("*.pickle")) == ["b", "c"]


def test_a_pickle_of_anything_but_the_document_model_is_refused(tmp_path: Path) -> None:
    cache = ParseCache(tmp_path, min_seconds=0)
    (tmp_path / "evil.pickle").write_bytes(pickle.dumps({"not": "a document"}))
    assert cache.get("evil") is None
    (tmp_path / "os.pickle").write_bytes(pickle.dumps(os.getcwd))  # a callable: refused on load
    assert cache.get("os") is None
    (tmp_path / "torn.pickle").write_bytes(pickle.dumps(DOC)[:20])
    assert cache.get("torn") is None


async def test_the_second_parse_of_the_same_bytes_reads_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def parse(path: Path, filename: str, content_type: str | None, **_: object) -> LoadedDocument:
        calls.append(filename)
        return DOC

    monkeypatch.setattr("app.ingest.parse_cache.parse_in_worker", parse)
    cache = ParseCache(tmp_path / "kept", min_seconds=0)
    limits = ParseLimits()
    source = tmp_path / "scan.pdf"
    source.write_bytes(b"%PDF-1.4")
    first = await parse_remembered(
        cache, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=False
    )
    again = await parse_remembered(
        cache, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=False
    )
    other = await parse_remembered(
        cache, SHA, source, "scan.pdf", "application/pdf", limits=limits, pdf_extract_images=True
    )
    assert first == again == other == DOC
    assert calls == ["scan.pdf", "scan.pdf"]  # the third asked with other options
    # without a checksum nothing is kept or read
    await parse_remembered(None, None, source, "scan.pdf", None, limits=limits, pdf_extract_images=False)
    assert len(calls) == 3


def test_a_survey_holds_its_parse_whatever_it_cost_until_the_stage_step_releases_it(tmp_path: Path) -> None:
    cache = ParseCache(tmp_path, max_entries=1, max_held=2, min_seconds=2.0)
    cheap = replace(DOC, ocr_pages={})
    cache.put("kept", DOC, seconds=0.5)  # OCR: kept for anyone
    cache.put("survey", cheap, seconds=0.1, hold=True)  # cheap, but its stage step needs it
    assert cache.get("survey") == cheap and cache.get("kept") == DOC
    cache.release("survey")  # the stage step has the document
    cache.release("kept")  # a kept parse is not the survey's to remove
    assert cache.get("survey") is None and cache.get("kept") == DOC


def test_held_and_kept_parses_count_against_their_own_limits(tmp_path: Path) -> None:
    cache = ParseCache(tmp_path, max_entries=1, max_held=2, min_seconds=0)
    cache.put("kept", DOC, seconds=1)
    for i, name in enumerate(("a", "b", "c")):
        cache.put(name, DOC, seconds=0, hold=True)
        stamp = time.time() - 10 + i
        os.utime(tmp_path / f"{name}.held.pickle", (stamp, stamp))
    cache.prune()
    # a backfill's many surveys do not push out the upload's OCR, and at most two are held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.held.pickle", "c.held.pickle", "kept.pickle"]
    old = time.time() - 7200
    for path in tmp_path.iterdir():
        os.utime(path, (old, old))
    cache.prune()  # past their hour, held or kept
    assert not list(tmp_path.iterdir())


def test_a_write_a_dead_process_left_half_done_goes_with_its_age(tmp_path: Path) -> None:
    cache = ParseCache(tmp_path, max_age_s=60)
    (tmp_path / "young.pickle.123.partial").write_bytes(b"half")
    (tmp_path / "old.held.pickle.456.partial").write_bytes(b"half")
    old = time.time() - 120
    os.utime(tmp_path / "old.held.pickle.456.partial", (old, old))
    cache.prune()
    assert [p.name for p in tmp_path.iterdir()] == ["young.pickle.123.partial"]  # maybe still written
