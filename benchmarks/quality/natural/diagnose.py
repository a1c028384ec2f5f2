"""The natural replay's `--diagnose`: where the gold file stands after each stage of /query_v2's ranking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from benchmarks.quality.natural.sets import UNANSWERABLE

if TYPE_CHECKING:
    from benchmarks.quality.natural.replay import Case


def file_rank(files: Sequence[str], gold: Sequence[str]) -> int | None:
    """1-based rank of the first gold file in the de-duplicated file order of `files` (None: absent)."""
    seen: list[str] = []
    for f in files:
        if f not in seen:
            seen.append(f)
            if f in gold:
                return len(seen)
    return None


def diagnose(ranked: Sequence[tuple[Case, list[Any], Any]], split: str) -> str:
    """Per answerable case: the gold file's rank in each channel, fused, reranked and served."""
    lines = []
    counts: dict[str, dict[str, int]] = {}
    for case, results, ranking in ranked:
        if case.kind in UNANSWERABLE or (split != "all" and case.split != split):
            continue
        row: dict[str, int | None] = {}
        for name in ("exact", "lexical", "vector"):
            row[name] = file_rank([s.candidate.file_id for s in case.lists.get(name, [])], case.gold)
        row["fused"] = file_rank([f.candidate.file_id for f in ranking.fused], case.gold)
        row["reranked"] = file_rank([f.candidate.file_id for f in ranking.items], case.gold)
        row["served"] = file_rank([r.file_id for r in results], case.gold)
        for stage, r in row.items():
            c = counts.setdefault(stage, {"n": 0, "first": 0, "top5": 0})
            c["n"] += 1
            c["first"] += r == 1
            c["top5"] += r is not None and r <= 5
        cells = " ".join(f"{k[:3]}={'-' if v is None else v}" for k, v in row.items())
        lines.append(f"{case.qid:22s} {case.kind[:5]:5s} {cells}  {case.text[:70]}")
    lines.append("stage      first  top5")
    for stage, c in counts.items():
        lines.append(f"{stage:10s} {c['first'] / c['n']:.3f}  {c['top5'] / c['n']:.3f}")
    return "\n".join(lines)
