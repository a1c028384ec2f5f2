"""What `scripts/bench ingest` measures around one upload: wall time, the embedder's own time, stages,
CPU of the service's process tree, and its resident memory sampled while the upload runs.

The embedder's time and the stages come from the service's own `/metrics` (read before and after
each upload, one upload at a time): `ragoverlay_embedding_call_duration_seconds_sum{kind="documents"}`
is the time inside the embedder's document calls, `ragoverlay_ingest_stage_duration_seconds_sum`
the parse (and chunk), embed and store stages. What is left of the upload's wall time beyond the
embedder is the overhead the ingestion target is about.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
EMBEDDER_SECONDS = ("ragoverlay_embedding_call_duration_seconds_sum", {"kind": "documents"})
STAGES = ("parse", "embed", "store", "total")


def metric_sum(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sum of every sample of `name` in Prometheus text whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match.group(1) != name:
            continue
        found = dict(_LABEL.findall(match.group(2) or ""))
        if all(found.get(k) == v for k, v in (labels or {}).items()):
            total += float(match.group(3))
    return total


@dataclass(frozen=True)
class Counters:
    """The service's cumulative figures at one moment."""

    embedder_s: float
    stages_s: dict[str, float]
    cpu_s: float

    @classmethod
    def read(cls, metrics_text: str, cpu_s: float) -> Counters:
        """From a `/metrics` body and the tree's CPU seconds."""
        stages = {
            s: metric_sum(metrics_text, "ragoverlay_ingest_stage_duration_seconds_sum", {"stage": s})
            for s in STAGES
        }
        return cls(metric_sum(metrics_text, *EMBEDDER_SECONDS), stages, cpu_s)


@dataclass
class Upload:
    """One upload's figures."""

    name: str
    kind: str
    size_bytes: int
    status: int
    wall_s: float
    embedder_s: float
    stages_s: dict[str, float]
    cpu_s: float
    chunks: int

    @classmethod
    def between(
        cls, name: str, kind: str, size: int, status: int, wall_s: float, before: Counters, after: Counters
    ) -> Upload:
        """The figures of an upload that ran alone between two readings."""
        stages = {s: round(after.stages_s[s] - before.stages_s[s], 4) for s in STAGES}
        return cls(
            name,
            kind,
            size,
            status,
            round(wall_s, 4),
            round(after.embedder_s - before.embedder_s, 4),
            stages,
            round(after.cpu_s - before.cpu_s, 3),
            0,
        )


def summary(uploads: list[Upload]) -> dict[str, Any]:
    """Totals of a set of uploads: files/s, chunks/s (wall and per CPU-second), the embedder's share.

    Overhead is the wall time beyond the embedder's own, as a share of the whole:
    1 - sum(embedder) / sum(wall). Per CPU-second of the service's process tree is "per core".
    """
    wall = sum(u.wall_s for u in uploads)
    embedder = sum(u.embedder_s for u in uploads)
    cpu = sum(u.cpu_s for u in uploads)
    chunks = sum(u.chunks for u in uploads)
    files = len(uploads)
    stages = {s: round(sum(u.stages_s[s] for u in uploads), 3) for s in STAGES}
    return {
        "files": files,
        "chunks": chunks,
        "bytes": sum(u.size_bytes for u in uploads),
        "wall_s": round(wall, 3),
        "embedder_s": round(embedder, 3),
        "cpu_s": round(cpu, 3),
        "stages_s": stages,
        "files_per_s": _ratio(files, wall),
        "chunks_per_s": _ratio(chunks, wall),
        "files_per_cpu_s": _ratio(files, cpu),
        "chunks_per_cpu_s": _ratio(chunks, cpu),
        "embedder_share": _ratio(embedder, wall, 4),
        "overhead_share": None if not wall else round(1 - embedder / wall, 4),
        "overhead_ms_per_file": None if not files else round((wall - embedder) * 1000 / files, 1),
    }


def _ratio(a: float, b: float, digits: int = 2) -> float | None:
    return round(a / b, digits) if b else None


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its descendants (living ones, and those they already reaped)."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return math.nan
    for process in processes:
        try:
            t = process.cpu_times()
        except psutil.NoSuchProcess:
            continue  # a parse worker that ended between the listing and here: its parent has it
        total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss(pid: int) -> tuple[int, int]:
    """Resident bytes of the process alone, and of it with its descendants."""
    try:
        root = psutil.Process(pid)
        own = root.memory_info().rss
        children = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    total = own
    for child in children:
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return own, total


@dataclass(eq=False)  # a thread: identity, hashable
class RssSampler(threading.Thread):
    """Samples the service's RSS (alone, and with its parse workers) every `interval` seconds."""

    pid: int
    interval: float = 0.02
    samples: list[tuple[float, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(name=f"rss-{self.pid}", daemon=True)
        self._stop_event = threading.Event()

    def run(self) -> None:
        """Sample until stopped."""
        start = time.perf_counter()
        while not self._stop_event.is_set():
            own, total = tree_rss(self.pid)
            self.samples.append((time.perf_counter() - start, own, total))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        """End sampling."""
        self._stop_event.set()
        self.join(timeout=2)

    def peaks(self) -> tuple[int, int]:
        """The highest RSS of the service alone and of the tree."""
        return max((s[1] for s in self.samples), default=0), max((s[2] for s in self.samples), default=0)


def idle_rss(pid: int, seconds: float = 1.0, interval: float = 0.02) -> tuple[int, int]:
    """The service's RSS at rest (median of samples over `seconds`): alone, and with its children."""
    own: list[int] = []
    total: list[int] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a, b = tree_rss(pid)
        own.append(a)
        total.append(b)
        time.sleep(interval)
    own.sort()
    total.sort()
    return own[len(own) // 2], total[len(total) // 2]
