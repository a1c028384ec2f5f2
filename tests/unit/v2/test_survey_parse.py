"""A survey's parse held in the one parse cache and read back by its stage step, by the bytes' key:
the same bytes are parsed once, replaced bytes again, a V1 text rebuild as well as an original."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import load_settings
from app.evidence.index.context import V2Context
from app.evidence.index.sources import Source, parse_key, parse_source
from app.ingest.parse_cache import parse_cache
from app.ingest.types import LoadedDocument, Section


class Blobs:
    """The blob store: every original is the same few bytes."""

    def __init__(self) -> None:
        self.downloads: list[str] = []

    async def download(self, key: str, path: Path) -> None:
        self.downloads.append(key)
        path.write_bytes(b"<p>K 28</p>")


async def test_the_stage_step_reads_the_survey_parse_of_the_same_bytes_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []

    async def parse(path: Path, filename: str, content_type: str | None, **_: object) -> LoadedDocument:
        parsed.append(filename)
        return LoadedDocument([Section(path.read_text(), None)], [], "text", content_type or "")

    monkeypatch.setattr("app.ingest.parse_cache.parse_in_worker", parse)
    blobs = Blobs()
    settings = load_settings(_env_file=None, data_dir=tmp_path / "data")
    ctx = V2Context(settings, None, None, None, blobs)  # type: ignore[arg-type]
    tmp = tmp_path / "tmp"
    original = Source("original", "a.html", "1" * 64, "text/html", blob_key="k1")
    survey = await parse_source(ctx, original, tmp, hold=True)  # cheap, held all the same
    stage = await parse_source(ctx, original, tmp)
    assert stage == survey and parsed == ["a.html"] and blobs.downloads == ["k1"]  # no second download
    # the file was replaced between its survey and its stage step: other bytes, another key
    replaced = Source("original", "a.html", "2" * 64, "text/html", blob_key="k2")
    await parse_source(ctx, replaced, tmp)
    assert parsed == ["a.html", "a.html"]
    # a file known only from its V1 chunks: the rebuilt text is parsed once too
    v1 = Source("v1_chunks", "old.pdf", "3" * 64, "text/plain", v1_text="Legacy text.")
    await parse_source(ctx, v1, tmp, hold=True)
    assert (await parse_source(ctx, v1, tmp)).text == "Legacy text." and parsed[-1] == "old.txt"
    assert len(parsed) == 3
    # the stage step releases what the survey held; a cheap stage parse is not kept
    cache = parse_cache(settings.data_dir)
    for source in (original, v1):
        cache.release(parse_key(ctx, source))
    assert cache.get(parse_key(ctx, original)) is None and cache.get(parse_key(ctx, replaced)) is None
