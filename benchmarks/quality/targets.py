"""The quality targets of `/query_v2`, each judged met or not from a run's summary (pure).

- fused >= the best single channel on nDCG@10 and on Recall@1, on every answerable set;
- fused + reranked >= fused (same two metrics, every set);
- >= 90 % of unanswerable questions refused, with <= 3 % of answerable ones refused;
- p95 <= 150 ms, measured without debug (the timed pass), over every timed question.
A tie counts as met.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.quality.v2 import CHANNEL_STAGES, FINAL, STAGE_SYSTEMS

ANSWERABLE_SETS = ("man", "html-tables", "html-identifiers")
METRICS = (("ndcg_at_10", "nDCG@10"), ("recall_at_1", "R@1"))
REFUSED_AT_LEAST = 0.90
FALSE_AT_MOST = 0.03
P95_AT_MOST_MS = 150.0

Summary = Mapping[str, Mapping[str, Mapping[str, Any]]]  # system -> group -> Summary fields


def best_channel(summary: Summary, set_name: str, metric: str) -> tuple[str, float] | None:
    """The single channel (`v2:exact|lexical|vector`) with the highest `metric` on `set_name`."""
    found = []
    for channel in CHANNEL_STAGES:
        value = summary.get(STAGE_SYSTEMS[channel], {}).get(set_name, {}).get(metric)
        if value is not None:
            found.append((STAGE_SYSTEMS[channel], float(value)))
    # ties: the first channel in CHANNEL_STAGES order
    return max(found, key=lambda x: x[1]) if found else None


def _row(target: str, group: str, value: float | None, needed: str, met: bool | None) -> dict[str, Any]:
    return {"target": target, "set": group, "value": value, "needed": needed, "met": met}


def evaluate(summary: Summary) -> list[dict[str, Any]]:
    """One row per target and set: the value, what it needed, met (None: not measured)."""
    rows: list[dict[str, Any]] = []
    fused = summary.get(STAGE_SYSTEMS["fused"], {})
    reranked = summary.get(STAGE_SYSTEMS["reranked"], {})
    for set_name in ANSWERABLE_SETS:
        if set_name not in fused:
            continue
        for metric, label in METRICS:
            best = best_channel(summary, set_name, metric)
            value = fused[set_name].get(metric)
            if best is not None and value is not None:
                rows.append(
                    _row(
                        f"fused >= best single channel ({label})",
                        set_name,
                        value,
                        f">= {best[1]:.3f} ({best[0]})",
                        value >= best[1] - 1e-12,
                    )
                )
        for metric, label in METRICS:
            value = reranked.get(set_name, {}).get(metric)
            base = fused[set_name].get(metric)
            if value is not None and base is not None:
                rows.append(
                    _row(
                        f"reranked >= fused ({label})",
                        set_name,
                        value,
                        f">= {base:.3f}",
                        value >= base - 1e-12,
                    )
                )
    final = summary.get(FINAL, {})
    refused = final.get("unanswerable", {}).get("refusal_rate")
    false = final.get("answerable", {}).get("false_refusal_rate")
    if refused is not None or false is not None:
        rows.append(
            _row(
                "unanswerable refused",
                "unanswerable",
                refused,
                f">= {REFUSED_AT_LEAST:.0%}",
                None if refused is None else refused >= REFUSED_AT_LEAST,
            )
        )
        rows.append(
            _row(
                "false refusals",
                "answerable",
                false,
                f"<= {FALSE_AT_MOST:.0%}",
                None if false is None else false <= FALSE_AT_MOST,
            )
        )
    p95 = final.get("all", {}).get("latency_p95_ms")
    if FINAL in summary:
        rows.append(
            _row(
                "/query_v2 p95 ms (no debug)",
                "all",
                p95,
                f"<= {P95_AT_MOST_MS:.0f}",
                None if p95 is None else p95 <= P95_AT_MOST_MS,
            )
        )
    return rows
