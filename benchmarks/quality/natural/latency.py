"""The natural run's timed pass: V1 and `/query_v2` asked in turn on real text, latency per corpus.

    timed = await timed_pass(http, kbs, queries, headers)    # {"requests": [...], "load": ...}
    lines = latency_table(summarise_latency(timed))

Each question is asked of `/query_multiple` and of `/query_v2` (no debug: as LibreChat asks), one
request at a time, the order of the two swapped every question so drift hits both; `/query_v2`'s
`Server-Timing` stages are kept. The summary gives p50 / p95 per corpus and overall, V2 / V1 at
p50, and the target row of "Evidence search better than V1": `/query_v2` p50 <= 3x V1 on the same
knowledge base. Nothing asserts a speed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.http import LeanHTTP
from benchmarks.quality.dataset import Query

TARGET_RATIO = 3.0
STAGES = ("analysis", "embed", "pool", "channels", "fuse", "rerank", "passages", "total")


def server_timing(header: str) -> dict[str, float]:
    """`name;dur=1.2, other;dur=3` -> {"name": 1.2, "other": 3.0} (entries without a duration skipped)."""
    out: dict[str, float] = {}
    for entry in header.split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if name and key == "dur":
                try:
                    out[name] = float(value)
                except ValueError:
                    continue
    return out


async def timed_pass(
    http: LeanHTTP,
    kbs: Mapping[str, Sequence[str]],
    queries: Sequence[Query],
    headers: Mapping[str, str],
    k: int = 10,
) -> dict[str, Any]:
    """Every query asked of V1 and V2 in turn; each request's latency (ms) and V2's stages."""
    base = {"Content-Type": "application/json", **headers}
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    for n, q in enumerate(queries):
        body = {"query": q.text, "file_ids": list(kbs[q.kb]), "k": k, "entity_id": q.kb}
        order = ("/query_multiple", "/query_v2") if n % 2 == 0 else ("/query_v2", "/query_multiple")
        for path in order:
            t0 = time.perf_counter()
            reply = await http.request("POST", path, json.dumps(body).encode(), dict(base))
            ms = (time.perf_counter() - t0) * 1000
            if reply.status not in (200, 404):
                raise RuntimeError(f"{path} answered {reply.status}: {reply.content[:300]!r}")
            rows.append(
                {
                    "qid": q.qid,
                    "corpus": q.set,
                    "route": path,
                    "ms": round(ms, 2),
                    "stages": server_timing(reply.headers.get("server-timing", "")),
                }
            )
    return {"requests": rows, "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def _percentile(values: Sequence[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summarise_latency(timed: Mapping[str, Any]) -> dict[str, Any]:
    """p50 / p95 per corpus and over all of V1 and V2, V2 / V1 at p50 and V2's stage p50s."""
    rows: Sequence[Mapping[str, Any]] = timed.get("requests", [])
    groups: dict[str, list[Mapping[str, Any]]] = {"all": list(rows)}
    for row in rows:
        groups.setdefault(str(row["corpus"]), []).append(row)
    out: dict[str, Any] = {"load": timed.get("load"), "groups": {}}
    for name, members in sorted(groups.items(), key=lambda item: (item[0] == "all", item[0])):
        v1 = [float(r["ms"]) for r in members if r["route"] == "/query_multiple"]
        v2 = [r for r in members if r["route"] == "/query_v2"]
        v2_ms = [float(r["ms"]) for r in v2]
        p50_v1, p50_v2 = _percentile(v1, 0.5), _percentile(v2_ms, 0.5)
        stages = {s: _percentile([r["stages"][s] for r in v2 if s in r["stages"]], 0.5) for s in STAGES}
        out["groups"][name] = {
            "n": len(v2_ms),
            "v1_p50": p50_v1,
            "v1_p95": _percentile(v1, 0.95),
            "v2_p50": p50_v2,
            "v2_p95": _percentile(v2_ms, 0.95),
            "ratio_p50": (p50_v2 / p50_v1) if p50_v1 and p50_v2 is not None else None,
            "v2_stages_p50": {s: v for s, v in stages.items() if v is not None},
        }
    overall = out["groups"].get("all", {})
    ratio = overall.get("ratio_p50")
    out["target"] = {
        "target": f"/query_v2 p50 <= {TARGET_RATIO:g}x V1",
        "value": ratio,
        "met": None if ratio is None else ratio <= TARGET_RATIO,
    }
    return out


def _ms(value: float | None) -> str:
    return "     –" if value is None else f"{value:6.1f}"


def latency_table(summary: Mapping[str, Any]) -> list[str]:
    """Per corpus: V1 and V2 p50 / p95 (ms), V2 / V1 at p50, V2's stages at p50; the target row."""
    head = (
        f"{'corpus':<22} {'n':>4} | {'V1 p50':>6} {'p95':>6} | {'V2 p50':>6} {'p95':>6} | {'V2/V1':>5} | "
        "V2 stages p50 (ms)"
    )
    out = [head, "-" * len(head)]
    for name, g in summary.get("groups", {}).items():
        ratio = "    –" if g.get("ratio_p50") is None else f"{g['ratio_p50']:4.1f}x"
        stages = " ".join(f"{s} {v:.1f}" for s, v in g.get("v2_stages_p50", {}).items() if s != "total")
        out.append(
            f"{name:<22} {g['n']:>4} | {_ms(g['v1_p50'])} {_ms(g['v1_p95'])} | {_ms(g['v2_p50'])} "
            f"{_ms(g['v2_p95'])} | {ratio:>5} | {stages}"
        )
    target = summary.get("target", {})
    if target:
        met = "not measured" if target["met"] is None else ("met" if target["met"] else "NOT MET")
        shown = "–" if target["value"] is None else f"{target['value']:.2f}x"
        out.append(f"{target['target']}: {shown} {met} (load average before / after: {summary.get('load')})")
    return out
