"""The short versions of the scripted runs: `scripts/faults --short` and `scripts/load --short`.

Each starts real services (the service with its embedded PostgreSQL, an OpenAI-compatible embedding
server, SeaweedFS), breaks things while clients send requests, and checks what the clients saw; the
full runs (minutes, with the figures in docs/operations.md, Scripted runs) are `scripts/faults` and
`scripts/load`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.patience import ceiling, slowness

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _run(module: str, report: Path, timeout_s: float, *extra: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", module, "--short", "--json", str(report), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ceiling(timeout_s),
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data: dict[str, object] = json.loads(report.read_text())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return data


@pytest.mark.s3
@pytest.mark.timeout(400)
def test_faults_short(tmp_path: Path) -> None:
    # the checks' time limits (fast 503s, recovery, closing) stretched as the tests' own are
    report = _run("benchmarks.faults", tmp_path / "faults.json", 380, "--slack", f"{slowness():.2f}")
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict)
    assert set(scenarios) >= {"postgres", "embedding", "stalls", "s3", "datadir"}
    for name, result in scenarios.items():
        checks = result["checks"]
        assert checks and all(checks.values()), (name, checks)
    assert scenarios["postgres"]["other_5xx_or_no_answer"] == 0
    assert scenarios["postgres"]["recovery_s"] is not None


@pytest.mark.timeout(300)
def test_load_short(tmp_path: Path) -> None:
    report = _run("benchmarks.load", tmp_path / "load.json", 280)
    load = report["load"]
    assert isinstance(load, dict)
    assert load["errors"] == 0
    routes = load["routes"]
    assert routes["query_multiple"]["requests"] > 0 and routes["embed"]["requests"] > 0
