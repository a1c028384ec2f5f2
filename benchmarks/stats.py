"""Percentile summaries of latency samples (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, mean, min, p50, p95, p99 and max of `values` (linear interpolation; empty -> n=0)."""
    if not values:
        return {"n": 0}
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        "n": int(a.size),
        "mean": round(float(a.mean()), 3),
        "min": round(float(a.min()), 3),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "p99": round(float(p99), 3),
        "max": round(float(a.max()), 3),
    }


def parse_server_timing(header: str | None) -> dict[str, float | str]:
    """`embed;dur=0.1, db;dur=3.2;desc="exact"` -> {"embed": 0.1, "db": 3.2, "db.desc": "exact"}."""
    out: dict[str, float | str] = {}
    if not header:
        return out
    for entry in header.split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        if not name:
            continue
        for param in params:
            key, _, raw = param.partition("=")
            key, raw = key.strip(), raw.strip().strip('"')
            if key == "dur":
                try:
                    out[name] = float(raw)
                except ValueError:
                    continue
            elif key == "desc":
                out[f"{name}.desc"] = raw
        if not params:
            out.setdefault(name, "")
    return out
