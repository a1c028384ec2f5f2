"""`scripts/bench v2-query`'s figures as markdown: V1 beside V2 per row, then the concurrent rounds (pure)."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

ROUTE_NAMES = {"v1": "V1 `/query_multiple`", "v2": "V2 `/query_v2`"}
_SEQUENTIAL = re.compile(r"^(v1|v2)_sequential_(\d+)_files(_one_not_indexed)?$")
_CONCURRENT = re.compile(r"^concurrent_(v1|v2|mixed)_(\d+)_at_(\d+)_files$")


def summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 (nearest rank) / max of values (ms)."""
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)], 2),
        "max": round(ordered[-1], 2),
    }


def _pair(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    ms = row["client_ms"]
    return f"{ms['p50']:.1f} / {ms['p95']:.1f}"


def _ratio(v1: dict[str, Any] | None, v2: dict[str, Any] | None) -> str:
    if v1 is None or v2 is None or v1["client_ms"]["p50"] <= 0:
        return "-"
    return f"{v2['client_ms']['p50'] / v1['client_ms']['p50']:.1f}x"


def _path(row: dict[str, Any] | None) -> str:
    if row is None or not row.get("paths"):
        return "-"
    return ", ".join(f"{k.split('=', 1)[1]} {n}" for k, n in sorted(row["paths"].items()))


def sequential_table(figures: dict[str, Any], sides: list[str]) -> list[str]:
    """One line per service and row: V1 and V2 client p50 / p95 side by side, their ratio, V1's path."""
    lines = [
        f"| service | allow-list | {ROUTE_NAMES['v1']} p50 / p95 | {ROUTE_NAMES['v2']} p50 / p95 "
        "| V2/V1 p50 | V1 path | V2 server: pool / channels / fuse / rerank p50 |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for side in sides:
        rows: dict[tuple[int, bool], dict[str, Any]] = {}
        for key, value in figures[side].items():
            match = _SEQUENTIAL.match(key)
            if match:
                rows.setdefault((int(match[2]), bool(match[3])), {})[match[1]] = value
        for (size, gap), by_route in sorted(rows.items()):
            v1, v2 = by_route.get("v1"), by_route.get("v2")
            stages = "-"
            if v2 is not None:
                p50 = v2["server_p50_ms"]
                stages = " / ".join(f"{p50.get(s, 0.0):.1f}" for s in ("pool", "channels", "fuse", "rerank"))
            label = f"{size:,} files" + (", one not indexed" if gap else "")
            cells = [side, label, _pair(v1), _pair(v2), _ratio(v1, v2), _path(v1), stages]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def concurrent_table(figures: dict[str, Any], sides: list[str]) -> list[str]:
    """One line per service, round kind and route: client, pool wait, run and who waited longer."""
    lines = [
        "| service | at once | route | client p50 / p95 | pool wait p50 / max | run p50 "
        "| waited longer than ran |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for side in sides:
        for key, value in figures[side].items():
            match = _CONCURRENT.match(key)
            if not match:
                continue
            at_once = f"{match[2]} ({match[1]}), {int(match[3]):,} files"
            for route, f in sorted(value.items()):
                if "pool_wait_ms" not in f:  # the service does not report its connection wait
                    cells = [side, at_once, ROUTE_NAMES[route], _pair(f), "not reported", "-", "-"]
                    lines.append("| " + " | ".join(cells) + " |")
                    continue
                wait = f["pool_wait_ms"]
                lines.append(
                    f"| {side} | {at_once} | {ROUTE_NAMES[route]} | {_pair(f)} "
                    f"| {wait['p50']:.1f} / {wait['max']:.1f} | {f['run_ms']['p50']:.1f} "
                    f"| {f['requests_waiting_longer_than_they_ran']} of {f['requests']} |"
                )
    return lines


def markdown(figures: dict[str, Any]) -> str:
    """The report: sequential rows (client ms), then the concurrent rounds."""
    sides: list[str] = [s for s in ("base", "this") if s in figures]
    settings = [
        f"{side}: " + (", ".join(f"{k}={v}" for k, v in sorted(figures[side].get("settings", {}).items())))
        for side in sides
    ]
    return "\n".join(
        [
            f"### `/query_v2` beside `/query_multiple`, client ms (k {figures.get('k', '-')}, "
            "query embeddings cached)",
            "",
            *sequential_table(figures, sides),
            "",
            "### Requests at once (each line: that route's requests of the rounds)",
            "",
            *concurrent_table(figures, sides),
            "",
            "Settings: " + "; ".join(settings),
        ]
    )
