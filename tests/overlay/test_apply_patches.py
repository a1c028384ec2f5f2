"""scripts/apply_patches.py against fake LibreChat trees, plus the repository's real pins."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.fixtures.patience import ceiling

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "apply_patches.py"
OVERLAY = REPO / "patches" / "librechat" / "fileSearch.js"
ADDED_OVERLAY = REPO / "patches" / "librechat" / "ragoverlaySearch.js"
DOCKERFILE = REPO / "patches" / "librechat" / "Dockerfile"

TARGET = "api/app/clients/tools/util/fileSearch.js"
ADDED = "api/app/clients/tools/util/ragoverlaySearch.js"
OTHERS = ("api/server/services/Endpoints/agents/initialize.js", "api/app/clients/tools/util/handleTools.js")
COMMIT = "8e5ef1fb31e9d63b735c089b21cbc82c50acce46"
RECORDED_IMAGE = "ghcr.io/danny-avila/librechat-dev@sha256:" + "ab" * 32


def sha256(data: bytes) -> str:
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def load_script() -> ModuleType:
    """Import scripts/apply_patches.py as a module."""
    spec = importlib.util.spec_from_file_location("apply_patches", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up by name while building the classes.
    sys.modules["apply_patches"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Fixture:
    """A fake LibreChat tree with its own pins file and overlay."""

    root: Path
    checksums: Path
    overlay: Path
    added: Path
    upstream: dict[str, bytes]

    def read(self, rel: str) -> bytes:
        """Current bytes of a tree file."""
        return (self.root / rel).read_bytes()


def write_pins(
    path: Path,
    upstream: dict[str, bytes],
    overlay_rel: str,
    overlay_hash: str,
    image: str = RECORDED_IMAGE,
    digest_state: str = "recorded",
    extra: str = "",
    added: tuple[str, str] | None = None,
) -> None:
    """Write a checksums file in the format apply_patches.py reads."""
    lines = [
        "# test pins",
        f"#@upstream-commit {COMMIT}",
        f"#@image {image}",
        f"#@image-digest {digest_state}",
        "",
        *(f"{sha256(data)}  {rel}" for rel, data in upstream.items()),
        f"#@patched {overlay_hash}  {TARGET}  {overlay_rel}",
        *([f"#@added {added[1]}  {ADDED}  {added[0]}"] if added else []),
        extra,
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Fixture:
    """A pristine fake tree whose pins match the bytes this test wrote."""
    root = tmp_path / "librechat"
    upstream = {
        TARGET: b"// stock file search\nmodule.exports = {};\n",
        OTHERS[0]: b"// stock initialize\n",
        OTHERS[1]: b"// stock handleTools\n",
    }
    for rel, data in upstream.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    pins_dir = tmp_path / "pins"
    overlay = pins_dir / "patches" / "librechat" / "fileSearch.js"
    overlay.parent.mkdir(parents=True)
    overlay.write_bytes(b"// overlay file search\nmodule.exports = require('./ragoverlaySearch');\n")
    added = pins_dir / "patches" / "librechat" / "ragoverlaySearch.js"
    added.write_bytes(b"// overlay search logic\nmodule.exports = { overlay: true };\n")
    checksums = pins_dir / "checksums.txt"
    write_pins(
        checksums,
        upstream,
        "patches/librechat/fileSearch.js",
        sha256(overlay.read_bytes()),
        added=("patches/librechat/ragoverlaySearch.js", sha256(added.read_bytes())),
    )
    return Fixture(root=root, checksums=checksums, overlay=overlay, added=added, upstream=upstream)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the script as a program, the way the Dockerfile does."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=ceiling(60),
        check=False,
    )


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime under root, to prove nothing changed."""
    return {
        str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_script_is_executable() -> None:
    """The script runs directly (shebang and mode bit)."""
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n")


def test_pristine_tree_is_verified_and_patched(tree: Fixture) -> None:
    """A pristine tree gets the overlay; the other pinned files stay untouched."""
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 0, result.stderr
    assert tree.read(TARGET) == tree.overlay.read_bytes()
    for rel in OTHERS:
        assert tree.read(rel) == tree.upstream[rel]
    assert f"patched  {TARGET}" in result.stdout
    assert f"patched  {ADDED}" in result.stdout
    assert tree.read(ADDED) == tree.added.read_bytes()
    assert (tree.root / ADDED).stat().st_mode & 0o777 == 0o644
    assert not list((tree.root / TARGET).parent.glob(".*.js.*")), "temporary file left behind"


def test_file_mode_is_kept(tree: Fixture) -> None:
    """Patching replaces content, not permissions."""
    (tree.root / TARGET).chmod(0o640)
    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    assert (tree.root / TARGET).stat().st_mode & 0o777 == 0o640


def test_second_run_is_idempotent(tree: Fixture) -> None:
    """An already patched tree is reported as such and not written."""
    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    before = snapshot(tree.root)
    again = run(tree.root, "--checksums", tree.checksums)
    assert again.returncode == 0, again.stderr
    assert "already patched" in again.stdout
    assert snapshot(tree.root) == before


@pytest.mark.parametrize("drifted", [TARGET, *OTHERS])
def test_drift_is_refused_naming_file_and_both_hashes(tree: Fixture, drifted: str) -> None:
    """Any pinned file that differs stops the patch, and the message says where and how."""
    changed = tree.upstream[drifted] + b"// a newer upstream line\n"
    (tree.root / drifted).write_bytes(changed)
    before = snapshot(tree.root)

    result = run(tree.root, "--checksums", tree.checksums)

    assert result.returncode == 1
    assert drifted in result.stderr
    assert f"expected sha256 {sha256(tree.upstream[drifted])}" in result.stderr
    assert f"actual sha256 {sha256(changed)}" in result.stderr
    assert "refusing to patch" in result.stderr
    assert snapshot(tree.root) == before


def test_check_reports_pristine_then_patched_and_changes_nothing(tree: Fixture) -> None:
    """--check verifies only, and tells pristine from patched."""
    before = snapshot(tree.root)
    pristine = run(tree.root, "--checksums", tree.checksums, "--check")
    assert pristine.returncode == 0, pristine.stderr
    assert "state: pristine" in pristine.stdout
    assert snapshot(tree.root) == before

    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    patched = run(tree.root, "--checksums", tree.checksums, "--check")
    assert patched.returncode == 0
    assert "state: patched" in patched.stdout
    assert re.search(rf"^patched\s+{re.escape(TARGET)}$", patched.stdout, re.MULTILINE)
    assert re.search(rf"^patched\s+{re.escape(ADDED)}$", patched.stdout, re.MULTILINE)


def test_added_file_is_reported_absent_before_patching(tree: Fixture) -> None:
    """--check on a pristine tree names the file the overlay will add."""
    result = run(tree.root, "--checksums", tree.checksums, "--check")
    assert result.returncode == 0, result.stderr
    assert re.search(rf"^absent\s+{re.escape(ADDED)}$", result.stdout, re.MULTILINE)
    assert not (tree.root / ADDED).exists()


def test_added_file_that_already_exists_with_other_content_is_drift(tree: Fixture) -> None:
    """A LibreChat that ships a file of that name is not the reviewed version: nothing is written."""
    (tree.root / ADDED).write_bytes(b"// upstream grew a file with our name\n")
    before = snapshot(tree.root)
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 1
    assert f"DRIFT {ADDED}" in result.stderr
    assert sha256(tree.added.read_bytes()) in result.stderr
    assert sha256(b"// upstream grew a file with our name\n") in result.stderr
    assert snapshot(tree.root) == before


def test_half_patched_tree_is_completed(tree: Fixture) -> None:
    """A tree with the replaced file but without the added module gets the module, nothing else."""
    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    (tree.root / ADDED).unlink()
    check = run(tree.root, "--checksums", tree.checksums, "--check")
    assert "state: partially patched" in check.stdout
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 0, result.stderr
    assert f"patched  {ADDED}" in result.stdout
    assert f"patched  {TARGET}" not in result.stdout
    assert tree.read(ADDED) == tree.added.read_bytes()


def test_added_file_must_not_be_pinned_upstream(tree: Fixture) -> None:
    """A path cannot be both an upstream file and one the overlay adds."""
    with tree.checksums.open("a", encoding="utf-8") as handle:
        handle.write(f"{'0' * 64}  {ADDED}\n")
    result = run(tree.root, "--checksums", tree.checksums, "--check")
    assert result.returncode == 2
    assert "also pinned as an upstream file" in result.stderr


def test_check_reports_drift_with_hashes(tree: Fixture) -> None:
    """--check on a drifted tree exits 1 and names the hashes."""
    (tree.root / OTHERS[1]).write_bytes(b"// rewritten\n")
    result = run(tree.root, "--checksums", tree.checksums, "--check")
    assert result.returncode == 1
    assert "state: drifted" in result.stdout
    assert f"DRIFT {OTHERS[1]}" in result.stdout
    assert sha256(b"// rewritten\n") in result.stdout
    assert sha256(tree.upstream[OTHERS[1]]) in result.stdout


def test_patched_target_that_drifted_after_patching_is_refused(tree: Fixture) -> None:
    """A target that is neither upstream nor our overlay is drift, with both accepted hashes named."""
    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    (tree.root / TARGET).write_bytes(b"// hand edited\n")
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 1
    assert sha256(tree.upstream[TARGET]) in result.stderr
    assert sha256(tree.overlay.read_bytes()) in result.stderr
    assert sha256(b"// hand edited\n") in result.stderr
    assert tree.read(TARGET) == b"// hand edited\n"


def test_missing_pinned_file_is_refused(tree: Fixture) -> None:
    """A pinned file that is absent is named, and nothing is patched."""
    (tree.root / OTHERS[0]).unlink()
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 1
    assert f"MISSING {OTHERS[0]}" in result.stderr
    assert tree.read(TARGET) == tree.upstream[TARGET]

    check = run(tree.root, "--checksums", tree.checksums, "--check")
    assert check.returncode == 1
    assert f"MISSING {OTHERS[0]}" in check.stdout


def test_missing_root_and_missing_checksums_are_input_errors(tree: Fixture, tmp_path: Path) -> None:
    """Bad arguments exit 2 with a message, not a traceback."""
    no_root = run(tmp_path / "nope", "--checksums", tree.checksums)
    assert no_root.returncode == 2
    assert "not a directory" in no_root.stderr
    no_pins = run(tree.root, "--checksums", tmp_path / "absent.txt")
    assert no_pins.returncode == 2
    assert "cannot read" in no_pins.stderr
    assert "Traceback" not in no_root.stderr + no_pins.stderr


def test_overlay_edited_without_rehash_is_refused(tree: Fixture) -> None:
    """The post-apply pin must describe the overlay that would be copied."""
    tree.overlay.write_bytes(b"// edited overlay\n")
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 2
    assert "--rehash" in result.stderr
    assert sha256(b"// edited overlay\n") in result.stderr
    assert tree.read(TARGET) == tree.upstream[TARGET]


def test_rehash_records_the_overlay_hash(tree: Fixture) -> None:
    """--rehash rewrites only the #@patched and #@added hashes, after which applying works."""
    tree.overlay.write_bytes(b"// edited overlay\n")
    tree.added.write_bytes(b"// edited module\n")
    before = tree.checksums.read_text(encoding="utf-8")
    result = run("--rehash", "--checksums", tree.checksums)
    assert result.returncode == 0, result.stderr
    after = tree.checksums.read_text(encoding="utf-8")
    assert sha256(b"// edited overlay\n") in after
    assert sha256(b"// edited module\n") in after
    assert len(before.splitlines()) == len(after.splitlines())
    assert run(tree.root, "--checksums", tree.checksums).returncode == 0
    assert tree.read(TARGET) == b"// edited overlay\n"
    assert tree.read(ADDED) == b"// edited module\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("#@mystery value", "unknown directive"),
        ("ABCDEF  api/x.js", "expected '<sha256>  <path>'"),
        (f"{'0' * 64} api/one-space.js", "expected '<sha256>  <path>'"),
        (f"{'0' * 64}  ../outside.js", "unsafe path"),
        (f"{'0' * 64}  /etc/passwd", "unsafe path"),
        (f"{'0' * 64}  {OTHERS[0]}", "pinned twice"),
        (f"#@upstream-commit {COMMIT}", "given twice"),
    ],
)
def test_malformed_pins_are_rejected(tree: Fixture, extra: str, message: str) -> None:
    """Every line must be unambiguous; a bad one stops everything with exit 2."""
    with tree.checksums.open("a", encoding="utf-8") as handle:
        handle.write(extra + "\n")
    result = run(tree.root, "--checksums", tree.checksums, "--check")
    assert result.returncode == 2
    assert message in result.stderr
    assert tree.read(TARGET) == tree.upstream[TARGET]


def test_patch_target_must_be_pinned(tmp_path: Path, tree: Fixture) -> None:
    """An overlay may only replace a file whose upstream content is pinned."""
    upstream = {rel: data for rel, data in tree.upstream.items() if rel != TARGET}
    write_pins(tree.checksums, upstream, "patches/librechat/fileSearch.js", sha256(tree.overlay.read_bytes()))
    result = run(tree.root, "--checksums", tree.checksums)
    assert result.returncode == 2
    assert "has no upstream pin" in result.stderr


def test_image_must_match_a_recorded_digest(tree: Fixture) -> None:
    """With a recorded digest, another image is refused; a tag without digest always is."""
    other = "ghcr.io/danny-avila/librechat-dev@sha256:" + "cd" * 32
    mismatch = run(tree.root, "--checksums", tree.checksums, "--image", other)
    assert mismatch.returncode == 1
    assert other in mismatch.stderr and RECORDED_IMAGE in mismatch.stderr
    tag_only = run(
        tree.root, "--checksums", tree.checksums, "--image", "ghcr.io/danny-avila/librechat-dev:latest"
    )
    assert tag_only.returncode == 1
    assert "not pinned by digest" in tag_only.stderr
    assert tree.read(TARGET) == tree.upstream[TARGET]
    same = run(tree.root, "--checksums", tree.checksums, "--image", RECORDED_IMAGE)
    assert same.returncode == 0, same.stderr


def test_placeholder_digest_warns_but_files_still_guard(tree: Fixture) -> None:
    """A placeholder pin accepts the given digest with a warning; drift is still refused."""
    write_pins(
        tree.checksums,
        tree.upstream,
        "patches/librechat/fileSearch.js",
        sha256(tree.overlay.read_bytes()),
        image="ghcr.io/danny-avila/librechat-dev@sha256:" + "0" * 64,
        digest_state="placeholder",
    )
    real = "ghcr.io/danny-avila/librechat-dev@sha256:" + "3d" * 32
    (tree.root / OTHERS[0]).write_bytes(b"drift\n")
    refused = run(tree.root, "--checksums", tree.checksums, "--image", real)
    assert refused.returncode == 1
    assert "placeholder" in refused.stderr
    (tree.root / OTHERS[0]).write_bytes(tree.upstream[OTHERS[0]])
    accepted = run(tree.root, "--checksums", tree.checksums, "--image", real)
    assert accepted.returncode == 0, accepted.stderr
    assert "placeholder" in accepted.stderr


def test_repository_pins_parse_and_match_the_overlay() -> None:
    """checksums.txt pins CONTRACT.md section 8's files and our overlay's current hash."""
    module = load_script()
    pins = module.parse_checksums(REPO / "checksums.txt")
    # The three hashes CONTRACT.md section 8 gives for LibreChat at the pinned commit.
    assert pins.upstream == {
        TARGET: "1433f681d27979ee73389b18a9e4e2204aaeae201a675719004c4e79ad4f4b34",
        OTHERS[0]: "e8ab5bcb5cd8e2dd47f46f382de15f4b4deb438eb6ec29a030b1205900328147",
        OTHERS[1]: "0d4758dab28293fc3f68914183acb495e3880fa53401017ce4587b56ad1bd922",
    }
    assert pins.commit == COMMIT
    assert pins.image.startswith("ghcr.io/danny-avila/librechat-dev@sha256:")
    assert set(pins.patches) == {TARGET}
    patch = pins.patches[TARGET]
    assert patch.source.resolve() == OVERLAY.resolve()
    assert patch.sha256 == sha256(OVERLAY.read_bytes())
    assert set(pins.added) == {ADDED}
    assert pins.added[ADDED].source.resolve() == ADDED_OVERLAY.resolve()
    assert pins.added[ADDED].sha256 == sha256(ADDED_OVERLAY.read_bytes())
    module.verify_overlay(pins)


def test_repository_pins_verify_an_upstream_copy_only_by_hash(tmp_path: Path) -> None:
    """Our overlay placed in a tree is recognised as patched by the real pins (other files aside)."""
    module = load_script()
    pins = module.parse_checksums(REPO / "checksums.txt")
    (tmp_path / TARGET).parent.mkdir(parents=True)
    (tmp_path / TARGET).write_bytes(OVERLAY.read_bytes())
    states = {state.path: state.status for state in module.inspect_tree(tmp_path, pins)}
    assert states == {TARGET: "patched", ADDED: "absent", OTHERS[0]: "missing", OTHERS[1]: "missing"}
    (tmp_path / ADDED).write_bytes(ADDED_OVERLAY.read_bytes())
    states = {state.path: state.status for state in module.inspect_tree(tmp_path, pins)}
    assert states[ADDED] == "patched"


def test_dockerfile_copies_every_pinned_file_and_runs_the_verification() -> None:
    """We cannot build images here, so check the Dockerfile agrees with the pins."""
    module = load_script()
    pins = module.parse_checksums(REPO / "checksums.txt")
    text = DOCKERFILE.read_text(encoding="utf-8")
    for rel in pins.upstream:
        assert re.search(
            rf"COPY --from=upstream \$\{{LIBRECHAT_ROOT\}}/{re.escape(rel)} /librechat/{re.escape(rel)}", text
        ), rel
    assert "COPY checksums.txt /overlay/checksums.txt" in text
    assert "COPY scripts/apply_patches.py /overlay/scripts/apply_patches.py" in text
    for patch in [*pins.patches.values(), *pins.added.values()]:
        rel = patch.source.resolve().relative_to(REPO).as_posix()
        assert f"COPY {rel} /overlay/{rel}" in text
        assert f"node --check ${{LIBRECHAT_ROOT}}/{patch.target}" in text
    assert re.search(r"^ARG LIBRECHAT_IMAGE=\S+@sha256:[0-9a-f]{64}$", text, re.MULTILINE)
    run_line = '--checksums /overlay/checksums.txt --image "${LIBRECHAT_IMAGE}"'
    assert f"apply_patches.py /librechat \\\n      {run_line}" in text
