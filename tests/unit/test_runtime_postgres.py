"""The embedded PostgreSQL runtime's pure parts: memory sizing, the SCRAM verifier, and what it does
to the machine when run as root (each change made only when needed, and logged when made)."""

from __future__ import annotations

import base64
import logging
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.runtime.postgres import (
    ensure_system_user,
    make_traversable,
    make_tree_readable,
    memory_settings_mb,
    scram_verifier,
)

GIB = 1024**3


def test_small_host_keeps_a_floor() -> None:
    # 512 MiB: 512 / 8 = 64 MB shared buffers (the floor), cache 512 / 2 = 256 MB
    assert memory_settings_mb(GIB // 2) == (64, 256)


def test_mid_host_scales() -> None:
    # 4 GiB: 4096 / 8 = 512 MB, cache 2048 MB
    assert memory_settings_mb(4 * GIB) == (512, 2048)


def test_large_host_caps_shared_buffers() -> None:
    # 64 GiB: 65536 / 8 = 8192 capped at 2048 MB; cache 32768 MB
    assert memory_settings_mb(64 * GIB) == (2048, 32768)


def test_scram_verifier_shape() -> None:
    # PostgreSQL's stored format: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
    verifier = scram_verifier("secret", salt=b"0123456789abcdef")
    scheme, rest = verifier.split("$", 1)
    params, keys = rest.split("$")
    iterations, salt = params.split(":")
    stored, server = keys.split(":")
    assert scheme == "SCRAM-SHA-256" and iterations == "4096"
    assert base64.b64decode(salt) == b"0123456789abcdef"
    assert len(base64.b64decode(stored)) == len(base64.b64decode(server)) == 32
    assert "secret" not in verifier and "'" not in verifier
    assert scram_verifier("secret", salt=b"0123456789abcdef") == verifier  # deterministic per salt
    assert scram_verifier("secret") != scram_verifier("secret")  # a fresh salt each time


@pytest.fixture
def tree() -> Iterator[Path]:
    """A folder outside pytest's 0700 tmp tree, so only folders made here can lack o+x."""
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-runtime-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_make_traversable_changes_and_logs_only_what_lacks_o_x(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private, inner, data = tree / "private", tree / "private" / "inner", tree / "private" / "inner" / "data"
    data.mkdir(parents=True)
    private.chmod(0o700)
    inner.chmod(0o750)
    data.chmod(0o755)
    with caplog.at_level(logging.INFO, logger="app.runtime.postgres"):
        changed = make_traversable(data, for_user="pguser")
    assert changed == [inner, private]
    assert stat.S_IMODE(private.stat().st_mode) == 0o701  # o+x only: others still cannot list it
    assert stat.S_IMODE(inner.stat().st_mode) == 0o751
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    messages = [r.getMessage() for r in warnings]
    assert [m.split(" to ", 1)[1].split(",", 1)[0] for m in messages] == [str(inner), str(private)]
    assert all(m.startswith("Running as root: added execute permission") for m in messages)
    assert "pguser" in warnings[0].getMessage() and "drwx------" in warnings[1].getMessage()
    caplog.clear()
    assert make_traversable(data, for_user="pguser") == []  # nothing left to change, nothing logged
    assert not caplog.records


def test_make_tree_readable_logs_one_summary(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tree / "bin").mkdir(mode=0o700)
    (tree / "bin" / "postgres").write_text("x")
    (tree / "bin" / "postgres").chmod(0o700)
    (tree / "lib").mkdir(mode=0o755)
    (tree / "lib" / "vector.so").write_text("x")
    (tree / "lib" / "vector.so").chmod(0o644)  # already readable: untouched
    with caplog.at_level(logging.WARNING, logger="app.runtime.postgres"):
        assert make_tree_readable(tree, for_user="pguser") == 2
    assert stat.S_IMODE((tree / "bin").stat().st_mode) == 0o705
    assert stat.S_IMODE((tree / "bin" / "postgres").stat().st_mode) == 0o704
    [record] = caplog.records
    assert record.getMessage().startswith(f"Running as root: made 2 files and folders under {tree}")
    assert make_tree_readable(tree, for_user="pguser") == 0


def test_ensure_system_user_creates_and_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    created: list[list[str]] = []
    entry = pwd.struct_passwd(("pg-test", "x", 990, 990, "", "/nonexistent", "/usr/sbin/nologin"))

    def getpwnam(name: str) -> pwd.struct_passwd:
        if not created:
            raise KeyError(name)
        return entry

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        created.append(command)
        return subprocess.CompletedProcess(command, 0, b"", b"")

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(subprocess, "run", run)
    with caplog.at_level(logging.INFO, logger="app.runtime.postgres"):
        assert ensure_system_user("pg-test") == (990, 990)
    assert created == [["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pg-test"]]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "created system user pg-test (uid 990" in record.getMessage()
    assert "useradd --system --no-create-home --shell /usr/sbin/nologin pg-test" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="app.runtime.postgres"):
        assert ensure_system_user("pg-test") == (990, 990)  # exists now: no second useradd
    assert len(created) == 1
    assert [r.levelno for r in caplog.records] == [logging.INFO]
