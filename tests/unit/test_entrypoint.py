"""No VOLUME line: the entrypoint creates DATA_DIR, gives it to the runtime user and drops to that user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.runtime import entrypoint
from app.runtime.entrypoint import prepare_data_dir

REPO = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="ownership changes need root")


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined, out = "", []
    for line in dockerfile.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        joined += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            if joined.strip():
                word, _, rest = joined.strip().partition(" ")
                out.append((word.upper(), rest.strip()))
            joined = ""
    return out


def test_image_definition_has_no_volume_and_starts_through_the_entrypoint() -> None:
    instructions = _instructions(REPO / "Dockerfile")
    words = [word for word, _ in instructions]
    assert "VOLUME" not in words  # Railway's Dockerfile builder refuses the build with one
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    assert entrypoint == ["python", "-m", "app.runtime.entrypoint", "--user", "ragoverlay", "--"]
    assert json.loads(dict(instructions)["CMD"]) == ["python", "-m", "app"]
    # the entrypoint must start as root to fix a mounted volume's ownership: no USER before it
    assert "USER" not in words
    assert any("useradd" in rest and "ragoverlay" in rest for word, rest in instructions if word == "RUN")


def test_prepare_creates_a_missing_folder(tmp_path: Path) -> None:
    target = tmp_path / "volume" / "data"
    prepare_data_dir(target, os.geteuid(), os.getegid())
    assert target.is_dir()


@needs_root
def test_prepare_gives_a_root_owned_volume_to_the_runtime_user(tmp_path: Path) -> None:
    volume = tmp_path / "data"
    (volume / "postgres").mkdir(parents=True)
    (volume / "postgres" / "PG_VERSION").write_text("16\n")
    (volume / "lost+found").mkdir()
    nobody = pwd.getpwnam("nobody")
    changed = prepare_data_dir(volume, nobody.pw_uid, nobody.pw_gid)
    assert changed == 4
    for path in (volume, volume / "postgres", volume / "postgres" / "PG_VERSION", volume / "lost+found"):
        assert (path.stat().st_uid, path.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    # owned now: the next start changes nothing
    assert prepare_data_dir(volume, nobody.pw_uid, nobody.pw_gid) == 0


@needs_root
def test_entrypoint_drops_to_the_user_and_runs_the_command() -> None:
    """As the container starts: root, a missing DATA_DIR; the command runs as the user and can write there."""
    top = Path(tempfile.mkdtemp(prefix="ragoverlay-entrypoint-", dir="/tmp"))
    try:
        top.chmod(0o755)  # the dropped user must reach DATA_DIR
        data_dir = top / "data"
        probe = 'id -u; id -g; id -G; echo x > "$DATA_DIR/written"'
        done = subprocess.run(
            [sys.executable, "-m", "app.runtime.entrypoint", "--user", "nobody", "--", "sh", "-c", probe],
            cwd=REPO,
            env={**os.environ, "DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        nobody = pwd.getpwnam("nobody")
        # uid, gid, and the groups: only its own (none kept from root)
        assert done.stdout.split() == [str(nobody.pw_uid), str(nobody.pw_gid), str(nobody.pw_gid)]
        assert data_dir.stat().st_uid == nobody.pw_uid
        assert (data_dir / "written").read_text() == "x\n"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_entrypoint_as_a_user_who_cannot_write_the_folder_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started as a non-root user (`docker run --user`) on a folder it cannot create: a message, exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DATA_DIR", str(blocker / "data"))  # cannot be created under a file
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert entrypoint.main(["--user", "ragoverlay", "--", "true"]) == 2
    assert "is not writable by uid 4242" in capsys.readouterr().err
