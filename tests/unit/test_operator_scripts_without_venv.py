"""The operator scripts, started from a clone without `.venv` by a Python that lacks the dependencies."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BARE_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(BARE_PYTHON is None, reason="no system Python next to the project's")
@pytest.mark.parametrize("script", ["validate_deployment.py", "provision_knowledge_bases.py"])
def test_without_a_venv_the_script_says_how_to_get_one(tmp_path: Path, script: str) -> None:
    assert BARE_PYTHON is not None
    probe = subprocess.run([BARE_PYTHON, "-c", "import httpx"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("this system Python has httpx: the path under test is not reached")
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / script, clone / "scripts" / script)  # a clone with no .venv
    done = subprocess.run(
        [BARE_PYTHON, str(clone / "scripts" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError" not in done.stderr
    assert "run scripts/serve or scripts/test once" in done.stderr, done.stderr


@pytest.mark.skipif(BARE_PYTHON is None, reason="no system Python next to the project's")
def test_bench_help_prints_before_anything_is_installed(tmp_path: Path) -> None:
    """`scripts/bench --help` in a clone without `.venv`: the help, and no `.venv` made for it."""
    assert BARE_PYTHON is not None
    clone = tmp_path / "clone"
    clone.mkdir()
    for folder in ("scripts", "benchmarks"):
        shutil.copytree(REPO / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", clone / "pyproject.toml")
    done = subprocess.run(
        ["bash", str(clone / "scripts" / "bench"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHON": BARE_PYTHON, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/bench") and "--ab" in done.stdout
    assert "scripts/bench quality" in done.stdout  # the other benchmarks are named
    assert not (clone / ".venv").exists() and "Installing" not in done.stderr
