"""`scripts/bench ingest` in miniature: one file of each kind and a 3 MiB photo PDF, the real service.

Keeps the harness from rotting: every upload must be stored (the benchmark reads each file's chunks
back from the database), the embedder's time and the stages must come from the service's metrics,
and the big upload's memory must be sampled. It asserts no speed and no memory figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.patience import ceiling

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TINY = "--per-kind 1 --chars 2000 --big-mb 3 --xlsx-rows 300".split()


@pytest.mark.timeout(300)
def test_the_ingest_benchmark_uploads_every_kind_and_samples_the_big_upload(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "ingest", *TINY, "--out", str(tmp_path), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ceiling(280),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert (tmp_path / "ingest-latest.json").exists()
    uploads = result["uploads"]
    assert sorted(u["kind"] for u in uploads) == ["docx", "md", "pdf", "txt", "xlsx"]
    for upload in uploads:
        assert upload["status"] == 200 and upload["chunks"] >= 1, upload
        # the local model ran for this upload, inside the upload's wall time
        assert 0 < upload["embedder_s"] <= upload["wall_s"], upload
        assert upload["stages_s"]["total"] > 0 and upload["cpu_s"] > 0, upload
    assert result["set"]["chunks"] == sum(u["chunks"] for u in uploads)
    big = result["big"]
    assert big["upload"]["status"] == 200 and big["upload"]["size_bytes"] > 2 * 2**20
    assert big["rss_samples"] > 0 and big["peak_rss_mb"] >= big["idle_rss_mb"] > 0
    # both XLSX readers parsed the same workbook to the same text
    assert result["xlsx_readers"]["same_text"] and result["xlsx_readers"]["cells"] == 301 * 8
    assert "| all files | 5 |" in proc.stdout and "over idle** (target <= 500 MB" in proc.stdout
