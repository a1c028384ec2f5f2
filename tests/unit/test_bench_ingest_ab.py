"""`scripts/bench ingest-ab`'s pure parts: options, the PDF generator and page counting, the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import ingest_ab_pdfs as gen
from benchmarks import ingest_ab_report as report
from benchmarks.ingest_ab import latency_pdf, pair_order, parse


def _upload(
    side: str, name: str, mode: str, pages: int, cpu: float, wall: float, **kw: Any
) -> dict[str, Any]:
    return {
        "side": side,
        "name": name,
        "file_id": f"{mode}-{name}",
        "mode": mode,
        "pages": pages,
        "status": kw.pop("status", 200),
        "wall_s": wall,
        "ready_after_s": kw.pop("ready", 0.0 if mode == "evidence" else None),
        "cpu_s": cpu,
        "db_cpu_s": 1.0,
        "v1_hits": kw.pop("hits", 3),
        **kw,
    }


def test_options_quick_default_and_conflict() -> None:
    assert parse([]).set_name == "full"
    assert parse(["--quick"]).set_name == "quick"
    assert parse(["--set", "middle", "--no-latency"]).latency is False
    assert parse(["--set", "big", "--this-only"]).this_only is True
    with pytest.raises(SystemExit):
        parse(["--quick", "--set", "middle"])


def test_latency_pdf_prefers_the_english_300_page_manual() -> None:
    pdfs = [gen.BenchPdf(n, "en", Path(n), p) for n, p in (("a", 9), ("manual-300p.en", 300), ("b", 1400))]
    assert latency_pdf(pdfs).name == "manual-300p.en"
    # without it: the largest of at most 400 pages
    assert latency_pdf([pdfs[0], pdfs[2]]).name == "a"


def test_pair_order_swaps_who_goes_first() -> None:
    sides: list[Any] = ["A", "B"]
    orders = [[str(side) for side in pair_order(sides, step)] for step in range(3)]
    assert orders == [["A", "B"], ["B", "A"], ["A", "B"]]


def test_latin1_keeps_umlauts_and_plain_punctuation() -> None:
    assert gen.latin1("Größe “x” – …") == 'Größe "x" - ...'
    assert gen.latin1("日本") == "??"


def test_read_html_blocks_skip_navigation(tmp_path: Path) -> None:
    page = tmp_path / "ch.html"
    page.write_text(
        "<html><head><title>T</title></head><body>"
        '<div class="navheader"><table><tr><td>Prev</td></tr></table></div>'
        "<h1>Chapter 1. One</h1><p>First  para.</p><pre>a\n  b</pre>"
        "<table><tr><th>Model</th><th>kW</th></tr><tr><td>K 28</td><td>2.8</td></tr></table>"
        '<div class="navfooter"><p>Next</p></div></body></html>',
        encoding="utf-8",
    )
    blocks = gen.read_html(page)
    assert [b.kind for b in blocks] == ["h1", "p", "pre", "row", "row"]
    assert blocks[1].text == "First para."
    assert blocks[2].text == "a\n  b"
    assert blocks[4].cells == ("K 28", "2.8")


def test_sentence_pool_splits_and_dedupes() -> None:
    text = "This sentence is long enough to be kept in the pool. Short one. " * 2
    sentences, headings = gen.sentence_pool([gen.Block("p", text), gen.Block("h2", "2.1. Setup")])
    assert sentences == ["This sentence is long enough to be kept in the pool."]
    assert headings == ["Setup"]


def test_manual_has_the_asked_pages_and_is_deterministic(tmp_path: Path) -> None:
    sentences = [
        f"Sentence number {i} says something about package {i * 7} and its files." for i in range(300)
    ]
    one, two = tmp_path / "one.pdf", tmp_path / "two.pdf"
    assert gen.write_manual(one, 3, sentences, ["Setup", "Use"], seed="3-en") == 3
    gen.write_manual(two, 3, sentences, ["Setup", "Use"], seed="3-en")
    assert gen.count_pages(one) == 3
    assert one.read_bytes() == two.read_bytes()
    copy = gen.variant(one, tmp_path / "v", "ev")
    assert copy.read_bytes() != one.read_bytes() and gen.count_pages(copy) == 3


def test_cache_key_depends_on_every_part() -> None:
    assert gen.cache_key("manual", "30") == gen.cache_key("manual", b"30")
    assert gen.cache_key("manual", "30") != gen.cache_key("manual", "300")
    # length-prefixed: moving a boundary changes the key
    assert gen.cache_key("ab", "c") != gen.cache_key("a", "bc")


def test_totals_and_cpu_ratio() -> None:
    uploads = [
        _upload("B", "x", "v1", 10, cpu=10.0, wall=5.0),
        _upload("B", "x", "evidence", 10, cpu=11.0, wall=5.5),
        _upload("B", "y", "v1", 30, cpu=30.0, wall=15.0),
        _upload("B", "y", "evidence", 30, cpu=39.0, wall=16.0, ready=1.0),
    ]
    t = report.totals(report.pairs(uploads, "B"))
    # (11 + 39) / (10 + 30) = 1.25; ready: 5.5 + 0 + 16 + 1 = 22.5
    assert t["cpu_ratio"] == 1.25
    assert t["evidence_ready_s"] == 22.5
    assert t["pages"] == 40


def test_ready_over_v1_and_its_target_row() -> None:
    uploads = [
        _upload(side, "manual-300p.en", mode, 300, cpu=100.0, wall=100.0, ready=ready)
        for side, ready in (("A", 30.0), ("B", 0.0))
        for mode in ("v1", "evidence")
    ]
    # A: (100 + 30) / 100 - 1 = +30 %; B: 100 / 100 - 1 = 0 %
    pair_a = report.pairs(uploads, "A")[0]
    assert report.ready_over_v1(pair_a) == pytest.approx(0.30)
    rows = {r["target"].split(" ")[0]: r for r in report.targets(uploads, {})}
    assert rows["evidence"]["verdict"] == "met"
    assert "+30 %" in rows["evidence"]["A"]
    assert rows["170-byte"]["verdict"] == "not measured"
    assert rows["a"]["verdict"].startswith("not measured")


def test_evidence_never_ready_is_not_met() -> None:
    uploads = [
        _upload("B", "manual-300p.en", "v1", 300, cpu=100.0, wall=100.0),
        _upload("B", "manual-300p.en", "evidence", 300, cpu=100.0, wall=100.0, ready=None),
    ]
    rows = report.targets(uploads, {})
    assert rows[1]["verdict"] == "not met"
    assert rows[0]["verdict"] == "not measured"  # no file with both uploads ready


def test_latency_row_and_big_row() -> None:
    latency = {"B": {"latencies_s": [0.1] * 19 + [3.0], "pages": 300, "statuses": {"200": 20}}}
    row = report.targets([], latency)[2]
    # p95 of nineteen 0.1 s and one 3.0 s (linear): 0.1 + 0.05 * 2.9 = 0.245
    assert row["verdict"] == "met" and "p95 0.24" in row["B"]
    big = [
        _upload("B", "manual-1400p.de", "v1", 1400, cpu=1.0, wall=1.0),
        _upload("B", "manual-1400p.de", "evidence", 1400, cpu=1.0, wall=1.0, hits=0),
    ]
    assert report.targets(big, {})[3]["verdict"] == "not met"


def test_render_prints_every_section() -> None:
    uploads = [
        _upload(side, "ch03.en", mode, 9, cpu=3.0, wall=2.0)
        for side in ("A", "B")
        for mode in ("v1", "evidence")
    ]
    text = report.render({"uploads": uploads, "set": "quick", "machine": {"nproc": 2}, "memory": {}})
    assert "| ch03.en | 9 | 0.333 / 0.333 |" in text
    assert "V1+ev ÷ V1 CPU" in text and "peak RSS" in text


def test_resume_keeps_good_uploads_of_the_same_set_and_commits() -> None:
    from benchmarks.ingest_ab import done_keys, kept_uploads

    sides = {"A": {"commit": "a" * 40}, "B": {"commit": "b" * 40}}
    previous = {
        "set": "full",
        "started_utc": "2026-12-07T15:00:00+00:00",
        "sides": sides,
        "uploads": [
            _upload("A", "ch01.en", "v1", 9, 3.0, 3.0),
            _upload("B", "ch01.en", "v1", 9, 3.0, 3.0, status=500),
            _upload("B", "ch01.en", "evidence", 9, 3.5, 3.0),
        ],
    }
    kept = kept_uploads(previous, "full", sides)
    assert done_keys(kept) == {("A", "ch01.en", "v1"), ("B", "ch01.en", "evidence")}
    assert all(u["resumed"] for u in kept)
    # B alone now (--this-only): A's uploads are not carried over
    assert done_keys(kept_uploads(previous, "full", {"B": sides["B"]})) == {("B", "ch01.en", "evidence")}
    with pytest.raises(ValueError, match="set 'full'"):
        kept_uploads(previous, "middle", sides)
    with pytest.raises(ValueError, match="side B was bbbbbbbbbb"):
        kept_uploads(previous, "full", {**sides, "B": {"commit": "c" * 40}})


def test_render_states_load_and_resumed_uploads() -> None:
    uploads = [
        _upload("A", "ch01.en", "v1", 9, 3.0, 3.0, load=[1.5, 2.0], resumed=True),
        _upload("B", "ch01.en", "v1", 9, 3.0, 3.0, load=[0.5, 4.25]),
    ]
    text = report.render({"uploads": uploads, "resumed_from": {"file": "x.json", "started_utc": "t"}})
    assert "load average around the uploads: 0.5-4.2" in text
    assert "Resumed: 1 uploads kept from x.json (started t)" in text


def test_resume_carries_the_stopped_runs_uploads_and_latency_into_the_new_result() -> None:
    from benchmarks.ingest_ab import AbOptions, resume_into

    sides = {"B": {"commit": "b" * 40}}
    stopped = {
        "set": "quick",
        "started_utc": "t0",
        "sides": sides,
        "uploads": [_upload("B", "ch03.en", "v1", 9, 3.0, 3.0)],
        "latency": {"B": {"p95_s": 0.2}},
    }
    result: dict[str, Any] = {"sides": sides}
    resume_into(result, stopped, AbOptions(set_name="quick", resume=Path("x.json")))
    assert [u["name"] for u in result["uploads"]] == ["ch03.en"]
    assert result["resumed_from"] == {"file": "x.json", "started_utc": "t0"}
    assert result["latency"] == stopped["latency"]
