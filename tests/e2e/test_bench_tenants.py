"""`scripts/bench tenants` in miniature: 4,000 chunks, 8 Agents, 30 users, the real service.

Keeps the harness from rotting: it must build the corpus, start the service, judge every answer and
print every target row with a figure; it asserts no speed. That the checker can fail is shown in
tests/unit/test_bench_tenants.py with planted wrong answers.
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
TINY = (
    "--chunks 4000 --agents 8 --users 30 --kb-max 1000 --topics 20 --queries 20 --timed 5 --searches 10 "
    "--probes 2 --concurrency 1,8 --tp-seconds 1 --fanout-reps 1"
).split()


@pytest.mark.timeout(300)
def test_the_tenants_benchmark_runs_and_judges_every_answer(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "tenants", *TINY, "--out", str(tmp_path), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ceiling(280),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert (tmp_path / "tenants-latest.json").exists()
    checks = result["checks"]
    assert checks["foreign_rows"] == 0 and checks["short_answers"] == 0
    rows = result["rows"]
    # every answer is judged: each row's (the mix's rows by size are a split of the mix), each
    # throughput reply, and the fan-out's /query answers
    judged = sum(r["recall"]["queries"] for name, r in rows.items() if not name.startswith("mix-"))
    judged += sum(t["recall"]["queries"] for t in result["throughput"])
    assert checks["queries"] == judged + result["fanout"]["per_file_recall"]["queries"]
    assert rows["kb-1000"]["files"]["p50"] == 1000 and rows["kb-373"]["files"]["p50"] == 373
    assert rows["attach-1"]["files"]["max"] == 1
    for probe in ("kb-without-entity", "kb-other-agent"):
        assert rows[f"probe-{probe}"]["visible_rows"]["max"] == 0  # nothing of the Agent is in scope
    assert result["fanout"]["per_file_recall"]["queries"] == 373
    assert all(t["today"] is not None for t in result["targets"]), result["targets"]
    assert "| whole 1,000-file KB, p50 ms |" in proc.stdout
