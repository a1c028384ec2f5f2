"""What earlier runs did: a state file per LibreChat, rewritten atomically after every upload."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts.provisioning.plan import PlanError, normalise_url

STATE_VERSION = 1


class State:
    """What earlier runs did, per knowledge base: ids and the uploaded files by name and SHA-256."""

    def __init__(self, path: Path, base_url: str, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.base_url = base_url
        self.data: dict[str, Any] = data or {
            "version": STATE_VERSION,
            "base_url": base_url,
            "knowledge_bases": {},
        }

    @classmethod
    def load(cls, path: Path, base_url: str) -> State:
        """Read the state file, refusing one written for another LibreChat."""
        if not path.exists():
            return cls(path, base_url)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PlanError(f"cannot read state file {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise PlanError(f"state file {path} is not a version-{STATE_VERSION} provisioning state")
        if normalise_url(str(data.get("base_url", ""))) != base_url:
            raise PlanError(
                f"state file {path} belongs to {data.get('base_url')!r}, not {base_url!r}; "
                "pass --state with another path for this deployment"
            )
        data.setdefault("knowledge_bases", {})
        return cls(path, base_url, data)

    def kb(self, name: str) -> dict[str, Any]:
        """The mutable state of one knowledge base."""
        entry: dict[str, Any] = self.data["knowledge_bases"].setdefault(name, {})
        entry.setdefault("files", {})
        entry.setdefault("pending", {})
        return entry

    def save(self) -> None:
        """Write the state atomically: a temp file in the same folder, fsync, rename, fsync the folder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.data, fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # not every platform can open a folder
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def now_iso() -> str:
    """The current UTC time as ISO-8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")
