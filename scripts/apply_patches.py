#!/usr/bin/env python3
"""Verify a LibreChat tree against checksums.txt and copy ragoverlay's LibreChat overlay into it.

Usage:
    apply_patches.py LIBRECHAT_ROOT [--check] [--checksums PATH] [--image REF]
    apply_patches.py --rehash [--checksums PATH]

Every upstream file pinned in checksums.txt must match its hash (a file the overlay replaces may
instead already hold the overlay's post-apply hash). A file the overlay adds (``#@added``) must be
absent, or already hold the overlay's hash. Any other content is drift: nothing is written and the
message names the file, the expected and the actual hash. Running on a patched tree changes
nothing. ``--check`` only reports pristine / patched / drifted. ``--rehash`` records the overlay's
current hash in checksums.txt after an edit to the overlay.

Exit codes: 0 verified (and patched); 1 drift or missing files; 2 bad input (arguments, checksums
file, overlay inconsistent with its pin).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHECKSUMS = REPO_ROOT / "checksums.txt"

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_INPUT = 2

SHA256_RE = re.compile(r"[0-9a-f]{64}")
PIN_RE = re.compile(r"(?P<sha>[0-9a-f]{64})  (?P<path>\S+)")
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
IMAGE_RE = re.compile(r"(?P<name>[^\s@]+)@sha256:(?P<digest>[0-9a-f]{64})")
DIGEST_STATES = ("placeholder", "recorded")
# Mode of a file the overlay adds: readable by everyone, like the source files of LibreChat's image.
ADDED_FILE_MODE = 0o644


class ChecksumsError(Exception):
    """checksums.txt is malformed or names an unsafe path."""


class RefusedError(Exception):
    """The tree or the image does not match what the overlay was reviewed against."""


@dataclasses.dataclass(frozen=True)
class Patch:
    """One overlay file: the tree path it replaces, its source and the hash after copying."""

    target: str
    source: Path
    sha256: str


@dataclasses.dataclass(frozen=True)
class Pins:
    """Everything checksums.txt records."""

    upstream: dict[str, str]
    patches: dict[str, Patch]
    added: dict[str, Patch]
    commit: str
    image: str
    image_digest: str


@dataclasses.dataclass(frozen=True)
class FileState:
    """What one pinned file holds in the tree."""

    path: str
    status: str  # "ok", "pristine", "absent" (an added file not yet there), "patched", "drift", "missing"
    expected: str
    actual: str | None


def sha256_of(path: Path) -> str:
    """Return the hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_relative(path: str, line_no: int) -> str:
    """Return a tree-relative POSIX path, refusing absolute paths and '..' parts."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or "\\" in path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ChecksumsError(f"line {line_no}: unsafe path {path!r} (must be relative, without '..')")
    return str(pure)


def parse_checksums(path: Path) -> Pins:
    """Parse checksums.txt strictly: every line is a pin, a known directive, a comment or blank."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ChecksumsError(f"cannot read {path}: {error.strerror}") from error
    upstream: dict[str, str] = {}
    patches: dict[str, Patch] = {}
    added: dict[str, Patch] = {}
    directives: dict[str, str] = {}
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line or (line.startswith("#") and not line.startswith("#@")):
            continue
        if line.startswith("#@"):
            key, _, value = line[2:].partition(" ")
            value = value.strip()
            if key in ("patched", "added"):
                fields = value.split()
                if len(fields) != 3 or not SHA256_RE.fullmatch(fields[0]):
                    raise ChecksumsError(
                        f"line {line_no}: expected '#@{key} <sha256>  <path>  <overlay file>'"
                    )
                target = safe_relative(fields[1], line_no)
                if target in patches or target in added:
                    raise ChecksumsError(f"line {line_no}: {target} is patched twice")
                source = path.parent / safe_relative(fields[2], line_no)
                (patches if key == "patched" else added)[target] = Patch(
                    target=target, source=source, sha256=fields[0]
                )
            elif key in ("upstream-commit", "image", "image-digest"):
                if key in directives:
                    raise ChecksumsError(f"line {line_no}: #@{key} given twice")
                directives[key] = value
            else:
                raise ChecksumsError(f"line {line_no}: unknown directive #@{key}")
            continue
        match = PIN_RE.fullmatch(line)
        if not match:
            raise ChecksumsError(f"line {line_no}: expected '<sha256>  <path>' (lowercase hex, two spaces)")
        pinned = safe_relative(match["path"], line_no)
        if pinned in upstream:
            raise ChecksumsError(f"line {line_no}: {pinned} is pinned twice")
        upstream[pinned] = match["sha"]

    for key in ("upstream-commit", "image", "image-digest"):
        if key not in directives:
            raise ChecksumsError(f"missing #@{key} line")
    if not COMMIT_RE.fullmatch(directives["upstream-commit"]):
        raise ChecksumsError("#@upstream-commit must be a 40-character lowercase hex commit")
    if not IMAGE_RE.fullmatch(directives["image"]):
        raise ChecksumsError("#@image must be pinned by digest: <name>@sha256:<64 hex>")
    if directives["image-digest"] not in DIGEST_STATES:
        raise ChecksumsError(f"#@image-digest must be one of {', '.join(DIGEST_STATES)}")
    if not upstream:
        raise ChecksumsError("no upstream files are pinned")
    if not patches:
        raise ChecksumsError("no #@patched line: nothing to apply")
    for target in patches:
        # Replacing a file nobody reviewed would make the drift check meaningless.
        if target not in upstream:
            raise ChecksumsError(f"#@patched {target} has no upstream pin")
    for target in added:
        # An added file has no upstream content; pinning one would contradict "must be absent".
        if target in upstream:
            raise ChecksumsError(f"#@added {target} is also pinned as an upstream file")
    return Pins(
        upstream=upstream,
        patches=patches,
        added=added,
        commit=directives["upstream-commit"],
        image=directives["image"],
        image_digest=directives["image-digest"],
    )


def verify_overlay(pins: Pins) -> None:
    """Refuse when an overlay source is missing or no longer matches its recorded hash."""
    for patch in [*pins.patches.values(), *pins.added.values()]:
        if not patch.source.is_file():
            raise ChecksumsError(f"overlay file {patch.source} for {patch.target} is missing")
        actual = sha256_of(patch.source)
        if actual != patch.sha256:
            raise ChecksumsError(
                f"overlay file {patch.source} has sha256 {actual} but checksums.txt expects "
                f"{patch.sha256}; run apply_patches.py --rehash after editing the overlay"
            )


def check_image(pins: Pins, image: str) -> list[str]:
    """Refuse an image that is not digest-pinned or differs from a recorded pin; return warnings."""
    if not IMAGE_RE.fullmatch(image):
        raise RefusedError(f"image {image!r} is not pinned by digest (<name>@sha256:<64 hex>)")
    if image == pins.image:
        return []
    if pins.image_digest == "placeholder":
        return [
            f"checksums.txt holds a placeholder image digest; building from {image}. "
            "Record it in checksums.txt (#@image, #@image-digest recorded)."
        ]
    raise RefusedError(f"image {image} differs from the pinned image {pins.image}")


def inspect_tree(root: Path, pins: Pins) -> list[FileState]:
    """Classify every pinned file in the tree without changing anything."""
    states: list[FileState] = []
    resolved_root = root.resolve()
    for rel, expected in pins.upstream.items():
        path = root / rel
        if not path.resolve().is_relative_to(resolved_root):
            raise RefusedError(f"{rel} resolves outside {root}")
        if not path.is_file():
            states.append(FileState(rel, "missing", expected, None))
            continue
        actual = sha256_of(path)
        patch = pins.patches.get(rel)
        if actual == expected:
            status = "pristine" if patch else "ok"
        elif patch and actual == patch.sha256:
            status = "patched"
        else:
            status = "drift"
        states.append(FileState(rel, status, expected, actual))
    for rel, patch in pins.added.items():
        path = root / rel
        if not path.parent.resolve().is_relative_to(resolved_root):
            raise RefusedError(f"{rel} resolves outside {root}")
        if not path.parent.is_dir():
            # The folder comes with the upstream files the overlay was reviewed against.
            states.append(FileState(rel, "missing", "", None))
        elif not path.exists() and not path.is_symlink():
            states.append(FileState(rel, "absent", "", None))
        elif path.is_file() and not path.is_symlink():
            actual = sha256_of(path)
            states.append(FileState(rel, "patched" if actual == patch.sha256 else "drift", "", actual))
        else:
            states.append(FileState(rel, "drift", "", "not a regular file"))
    return states


def describe_problem(state: FileState, pins: Pins, root: Path) -> str:
    """One line naming the file, the expected and the actual hash."""
    if state.path in pins.added:
        added = pins.added[state.path].sha256
        expected = f"no such file, or sha256 {added} once patched (the overlay adds it)"
        if state.status == "missing":
            return f"MISSING {state.path}: its folder does not exist under {root}"
        return f"DRIFT {state.path}: expected {expected}, actual sha256 {state.actual}"
    if state.status == "missing":
        return f"MISSING {state.path}: expected sha256 {state.expected}, but no such file under {root}"
    patch = pins.patches.get(state.path)
    also = f" (or {patch.sha256} once patched)" if patch else ""
    return (
        f"DRIFT {state.path}: expected sha256 {state.expected}{also} "
        f"(LibreChat {pins.commit[:12]}), actual sha256 {state.actual}"
    )


def overall(states: Sequence[FileState]) -> str:
    """Summarise the tree: drifted, pristine, patched or partially patched."""
    if any(state.status in ("drift", "missing") for state in states):
        return "drifted"
    targets = [state.status for state in states if state.status in ("pristine", "absent", "patched")]
    if all(status in ("pristine", "absent") for status in targets):
        return "pristine"
    if all(status == "patched" for status in targets):
        return "patched"
    return "partially patched"


def write_atomically(target: Path, data: bytes, mode: int | None = None) -> None:
    """Replace (or create) a file's content in one rename, keeping its permission bits."""
    if mode is None:
        mode = target.stat().st_mode & 0o7777
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def apply(root: Path, pins: Pins, states: Sequence[FileState]) -> list[str]:
    """Copy the overlay over each pristine target, add each absent file, verify; return the paths."""
    written: list[str] = []
    by_path = {state.path: state for state in states}
    for target, patch in pins.patches.items():
        if by_path[target].status != "pristine":
            continue
        path = root / target
        original = path.read_bytes()
        write_atomically(path, patch.source.read_bytes())
        actual = sha256_of(path)
        if actual != patch.sha256:
            write_atomically(path, original)
            raise RefusedError(
                f"post-apply check failed for {target}: expected sha256 {patch.sha256}, "
                f"actual sha256 {actual}; the original was restored"
            )
        written.append(target)
    for target, patch in pins.added.items():
        if by_path[target].status != "absent":
            continue
        path = root / target
        write_atomically(path, patch.source.read_bytes(), mode=ADDED_FILE_MODE)
        actual = sha256_of(path)
        if actual != patch.sha256:
            path.unlink()
            raise RefusedError(
                f"post-apply check failed for {target}: expected sha256 {patch.sha256}, "
                f"actual sha256 {actual}; the file was removed"
            )
        written.append(target)
    return written


def rehash(checksums: Path) -> int:
    """Rewrite each #@patched and #@added hash from its overlay file's current content."""
    pins = parse_checksums(checksums)
    lines = checksums.read_text(encoding="utf-8").splitlines(keepends=True)
    changed = 0
    for index, line in enumerate(lines):
        if not line.startswith(("#@patched ", "#@added ")):
            continue
        fields = line.split()
        target = str(PurePosixPath(fields[2]))
        patch = pins.patches.get(target) or pins.added[target]
        if not patch.source.is_file():
            raise ChecksumsError(f"overlay file {patch.source} is missing")
        fresh = sha256_of(patch.source)
        if fresh != fields[1]:
            lines[index] = line.replace(fields[1], fresh, 1)
            changed += 1
            print(f"{patch.target}: post-apply sha256 is now {fresh}")
    if changed:
        checksums.write_text("".join(lines), encoding="utf-8")
    else:
        print("checksums.txt already records the overlay's hashes")
    return EXIT_OK


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description="Verify a LibreChat tree against checksums.txt and apply ragoverlay's overlay.",
    )
    parser.add_argument(
        "librechat_root", nargs="?", type=Path, help="LibreChat source tree or extracted image folder"
    )
    parser.add_argument(
        "--check", action="store_true", help="only verify; report pristine / patched / drifted"
    )
    parser.add_argument(
        "--checksums", type=Path, default=DEFAULT_CHECKSUMS, help="pins file (default: %(default)s)"
    )
    parser.add_argument("--image", help="image reference being patched; must match the pinned digest")
    parser.add_argument(
        "--rehash", action="store_true", help="record the overlay's current hash in the pins file"
    )
    args = parser.parse_args(argv)
    if args.rehash:
        if args.librechat_root is not None or args.check or args.image:
            parser.error("--rehash takes only --checksums")
    elif args.librechat_root is None:
        parser.error("LIBRECHAT_ROOT is required")
    return args


def run(args: argparse.Namespace) -> int:
    """Carry out the command; raise ChecksumsError or RefusedError on failure."""
    if args.rehash:
        return rehash(args.checksums)
    root: Path = args.librechat_root
    if not root.is_dir():
        raise ChecksumsError(f"LibreChat root {root} is not a directory")
    pins = parse_checksums(args.checksums)
    verify_overlay(pins)
    for warning in check_image(pins, args.image) if args.image else []:
        print(f"warning: {warning}", file=sys.stderr)

    states = inspect_tree(root, pins)
    summary = overall(states)
    if args.check:
        for state in states:
            if state.status in ("drift", "missing"):
                print(describe_problem(state, pins, root))
            else:
                print(f"{state.status:<8} {state.path}")
        print(f"state: {summary}")
        return EXIT_DRIFT if summary == "drifted" else EXIT_OK

    if summary == "drifted":
        problems = [
            describe_problem(state, pins, root) for state in states if state.status in ("drift", "missing")
        ]
        raise RefusedError(
            "\n".join(problems)
            + f"\nrefusing to patch: {root} is not the LibreChat version the overlay was reviewed against"
        )
    if summary == "patched":
        print(f"already patched: {root} holds the overlay; nothing changed")
        return EXIT_OK
    for target in apply(root, pins, states):
        print(f"patched  {target}")
    print(f"verified {len(states)} pinned files; overlay applied to {root}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run and map failures to exit codes and messages on stderr."""
    args = parse_args(argv)
    try:
        return run(args)
    except ChecksumsError as error:
        print(f"apply_patches: {error}", file=sys.stderr)
        return EXIT_INPUT
    except RefusedError as error:
        print(f"apply_patches: {error}", file=sys.stderr)
        return EXIT_DRIFT


if __name__ == "__main__":
    sys.exit(main())
