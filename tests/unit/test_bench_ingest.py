"""`scripts/bench ingest`: reading the service's metrics, the overhead arithmetic, the generated files
(no service, no database)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.ingest import failed, parse, render
from benchmarks.ingest_files import KINDS, write_big, write_set
from benchmarks.ingest_measure import Counters, Upload, metric_sum, summary

METRICS = """\
# HELP ragoverlay_embedding_call_duration_seconds Time per embedding call
ragoverlay_embedding_call_duration_seconds_sum{kind="documents",provider="local"} 2.5
ragoverlay_embedding_call_duration_seconds_sum{kind="query",provider="local"} 0.75
ragoverlay_embedding_call_duration_seconds_count{kind="documents",provider="local"} 3.0
ragoverlay_ingest_stage_duration_seconds_sum{stage="parse"} 0.5
ragoverlay_ingest_stage_duration_seconds_sum{stage="embed"} 2.75
ragoverlay_ingest_stage_duration_seconds_sum{stage="store"} 0.25
ragoverlay_ingest_stage_duration_seconds_sum{stage="total"} 3.5
"""


def test_metric_sum_adds_the_samples_whose_labels_match_and_nothing_else() -> None:
    assert metric_sum(METRICS, "ragoverlay_embedding_call_duration_seconds_sum", {"kind": "documents"}) == 2.5
    # no label filter: both kinds (2.5 + 0.75); a _count line of the same family is another name
    assert metric_sum(METRICS, "ragoverlay_embedding_call_duration_seconds_sum") == 3.25
    assert metric_sum(METRICS, "ragoverlay_embedding_call_duration_seconds_sum", {"kind": "other"}) == 0.0


def test_an_upload_is_the_difference_of_two_readings() -> None:
    before = Counters.read(METRICS, cpu_s=10.0)
    after = Counters.read(METRICS.replace(" 2.5", " 4.0").replace(" 0.5", " 0.7"), cpu_s=12.5)
    upload = Upload.between("a.txt", "txt", 100, 200, 2.0, before, after)
    assert upload.embedder_s == 1.5 and upload.cpu_s == 2.5
    assert upload.stages_s["parse"] == 0.2 and upload.stages_s["store"] == 0.0


def test_summary_overhead_is_the_wall_time_beyond_the_embedder() -> None:
    stages = {"parse": 0.1, "embed": 0.8, "store": 0.1, "total": 1.0}
    uploads = [
        Upload("a", "txt", 1000, 200, 1.0, 0.9, stages, 1.5, 10),
        Upload("b", "pdf", 3000, 200, 3.0, 2.7, stages, 4.5, 30),
    ]
    s = summary(uploads)
    # wall 4.0 s, embedder 3.6 s: overhead 1 - 3.6 / 4.0 = 0.1, i.e. 0.4 s over 2 files = 200 ms a file
    assert s["overhead_share"] == 0.1 and s["overhead_ms_per_file"] == 200.0
    # 40 chunks in 4 s of wall time and 6 CPU-seconds
    assert s["chunks_per_s"] == 10.0 and s["chunks_per_cpu_s"] == 6.67 and s["files_per_s"] == 0.5
    assert summary([])["overhead_share"] is None


def test_every_kind_is_written_from_its_seed_and_files_differ(tmp_path: Path) -> None:
    first = write_set(tmp_path / "a", 2, 3000, seed=3)
    again = write_set(tmp_path / "b", 2, 3000, seed=3)
    assert [f.kind for f in first] == list(KINDS) * 2
    texts = [f.path.read_bytes() for f in first if f.kind in ("txt", "md")]
    assert texts == [f.path.read_bytes() for f in again if f.kind in ("txt", "md")]  # deterministic
    assert len(set(texts)) == len(texts)  # each file its own text: no vector is reused
    assert all(f.path.stat().st_size > 2000 for f in first)


def test_the_big_upload_reaches_its_size(tmp_path: Path) -> None:
    big = write_big(tmp_path, "pdf", 3.0, seed=1)
    assert big.content_type == "application/pdf"
    assert abs(big.path.stat().st_size / 2**20 - 3.0) < 1.0
    text = write_big(tmp_path, "text", 0.5, seed=1)
    assert 0.5 * 2**20 <= text.path.stat().st_size < 0.6 * 2**20


def test_a_run_fails_when_an_upload_was_not_stored_and_the_report_names_the_targets() -> None:
    ok = {"uploads": [{"status": 200}], "big": {"upload": {"status": 200}}}
    assert not failed(ok)
    assert failed({"uploads": [{"status": 200}], "big": {"upload": {"status": 413}}})
    assert failed({"uploads": []}) and failed({**ok, "error": "boom"})
    assert parse(["--no-big"]).big_mb == 0.0
    result = {
        "started_utc": "t",
        "machine": {"nproc": 2},
        "loadavg_at_start": [1.0, 1.0, 1.0],
        "set": summary(
            [
                Upload(
                    "a",
                    "txt",
                    1000,
                    200,
                    1.0,
                    0.9,
                    dict.fromkeys(("parse", "embed", "store", "total"), 0.1),
                    1.0,
                    5,
                )
            ]
        ),
    }
    text = render(result)
    assert "target <= 10 %" in text and "| all files | 1 | 5 |" in text and "10.0 %" in text
