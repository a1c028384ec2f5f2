"""The search benchmark's options (`scripts/bench --help`): the standard library only, so that the
help prints before anything is installed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.corpus import CorpusSpec


@dataclass
class Options:
    """Everything a run can be told (see `python -m benchmarks --help`)."""

    chunks: int = 200_000
    files: int = 10_000
    topics: int = 300
    queries: int = 100
    seed: int = 42
    k: int = 10
    timed: int = 60
    lists: list[int] = field(default_factory=lambda: [1, 10, 100, 373, 1000])
    mixed: bool = True
    configs: list[str] = field(default_factory=lambda: ["exact", "auto", "index"])
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32])
    tp_seconds: float = 5.0
    fanout_files: int = 373
    fanout_reps: int = 10
    reuse: bool = False
    data_dir: Path | None = None
    out_dir: Path = Path("bench-results")
    gin: bool = True
    explain: bool = True
    collection: str = "testcollection"
    load_parallel: int = 2
    batch_rows: int = 5000
    start_timeout: float = 300.0
    index_appear: float = 30.0
    index_timeout: float = 900.0
    service_env: dict[str, str] = field(default_factory=dict)
    client: str = "lean"
    ab: str | None = None  # `--ab REF`: this checkout against REF instead of the configurations
    ab_v2: bool = False  # with --ab: enable V2 for namespace A and build its index (side B) first

    def spec(self) -> CorpusSpec:
        """The corpus these options describe."""
        # imported here: the options (and `scripts/bench --help`) need nothing but the standard library
        from benchmarks.corpus import CorpusSpec

        return CorpusSpec(self.chunks, self.files, self.topics, self.queries, self.seed)


def parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    """`["A=1", "B=x"]` -> `{"A": "1", "B": "x"}`."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--service-env expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out
