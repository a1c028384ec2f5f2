"""The container's start: `DATA_DIR` exists and is the runtime user's, then the service runs as that user.

The image declares no `VOLUME` (Railway's builder refuses one; its volumes are attached at deploy
time, and a volume a platform mounts is owned by root). So the container starts as root, and this
entrypoint, before anything else runs:
- creates `DATA_DIR` when it is missing;
- when `DATA_DIR` itself is not owned by the runtime user (a freshly mounted volume), gives it and
  everything under it to that user (once: later starts find it owned and change nothing);
- drops to the runtime user (its uid and gid, no supplementary groups) and replaces itself with the
  command (`python -m app`).

Started as another user already (`docker run --user ...`), it only creates the folder when it can and
runs the command, and says plainly when the folder is not writable.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import sys
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger("ragoverlay.entrypoint")

DEFAULT_DATA_DIR = "/data"


def prepare_data_dir(path: Path, uid: int, gid: int) -> int:
    """Create `path`; when `uid` does not own it, give it and its contents to uid:gid. The entries changed."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid == uid:
        return 0
    changed = 0
    # lchown: a symbolic link inside a volume must not hand over what it points to
    for folder, dirs, files in os.walk(path):
        os.lchown(folder, uid, gid)
        changed += 1
        for name in (*dirs, *files):
            entry = os.path.join(folder, name)
            if os.path.islink(entry) or not os.path.isdir(entry):
                os.lchown(entry, uid, gid)
                changed += 1
    return changed


def drop_privileges(uid: int, gid: int) -> None:
    """Become uid:gid for good: no supplementary groups, group first (setuid would forbid it after)."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """`--user NAME -- COMMAND ...`."""
    parser = argparse.ArgumentParser(prog="python -m app.runtime.entrypoint")
    parser.add_argument("--user", required=True, help="the user the service runs as")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="what to run (after --)")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the command to run after --")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare DATA_DIR, drop to the runtime user when root, exec the command; 2 when it cannot start."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    data_dir = Path(os.environ.get("DATA_DIR") or DEFAULT_DATA_DIR)
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam(args.user)
        except KeyError:
            print(f"entrypoint: no user {args.user!r} in this image", file=sys.stderr)
            return 2
        changed = prepare_data_dir(data_dir, entry.pw_uid, entry.pw_gid)
        if changed:
            logger.info(
                "Gave %s (%d entries) to %s (uid %d): a mounted volume starts owned by root",
                data_dir,
                changed,
                args.user,
                entry.pw_uid,
            )
        drop_privileges(entry.pw_uid, entry.pw_gid)
        os.environ["HOME"] = entry.pw_dir
    else:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # reported just below, with what to do
        if not os.access(data_dir, os.W_OK | os.X_OK):
            print(
                f"entrypoint: {data_dir} (DATA_DIR) is not writable by uid {os.geteuid()}: start the "
                "container as root (the default: it gives the folder to the service's user, then drops "
                "to it), or give the folder to this uid",
                file=sys.stderr,
            )
            return 2
    # the service takes this process's place (PID 1 in a container), so the stop signal reaches it
    os.execvp(args.command[0], args.command)  # noqa: S606 (argv as given: no shell to interpret it)


if __name__ == "__main__":
    sys.exit(main())
