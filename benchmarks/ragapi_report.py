"""`scripts/bench tenants --rag-api`: the pure parts: who goes first, ratios, foreign CPU, the tables.

Nothing here opens a socket or reads a clock, so `tests/unit/test_bench_ragapi.py` checks it all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RAGAPI, THIS, PREVIOUS = "rag_api", "this", "previous"
CPU_REPEAT = 20  # our batched call's CPU is read over this many calls (the kernel counts 10 ms ticks)
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice;
# guest time is already counted in user, idle and iowait are not work
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def side_order(i: int, labels: Sequence[str]) -> list[str]:
    """The order the sides answer request `i` in: rotated by one each request, so no side always
    goes first (the first of a pair finds caches warmer or colder than the second)."""
    n = len(labels)
    return [labels[(i + j) % n] for j in range(n)]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """`numerator / denominator`, None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def busy_seconds(proc_stat: str, clk_tck: int) -> float:
    """CPU seconds every core of the machine spent working, from the text of /proc/stat."""
    for line in proc_stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(x) for x in parts[1:]]
            return sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks)) / clk_tck
    raise ValueError("no aggregate cpu line in /proc/stat")


@dataclass(frozen=True)
class CpuSample:
    """One reading: the machine's busy CPU seconds, the run's own (sides, database, client) and the
    wall clock."""

    busy_s: float
    own_s: float
    wall_s: float


def foreign_cpu(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU other processes used between two readings, in seconds and in cores (seconds per second).

    The machine's busy time minus the run's own process trees; never below 0 (the two are read a
    moment apart, and a tree's reaped children are counted when their parent collects them).
    """
    wall = max(after.wall_s - before.wall_s, 1e-9)
    busy = after.busy_s - before.busy_s
    own = after.own_s - before.own_s
    foreign = max(busy - own, 0.0)
    return {
        "wall_s": round(wall, 2),
        "busy_s": round(busy, 2),
        "own_s": round(own, 2),
        "foreign_s": round(foreign, 2),
        "foreign_cores": round(foreign / wall, 2),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}×"


def _checks(rec: dict[str, Any]) -> str:
    if not rec or not rec.get("queries"):
        return "-"
    foreign, short = rec.get("foreign_rows"), rec.get("short_answers")
    return f"{rec.get('mean')} / {rec.get('min')}, foreign {foreign}, short {short}"


def _machine(row: dict[str, Any]) -> str:
    cpu, load = row.get("cpu", {}), row.get("loadavg", [])
    return (
        f"load {'/'.join(f'{x:.2f}' for x in load) or '-'}, foreign CPU {cpu.get('foreign_cores', '-')} cores"
    )


def ours(sides: dict[str, Any]) -> list[str]:
    """Our sides present in a row, this checkout first, then the previous release if it ran."""
    return [label for label in (THIS, PREVIOUS) if label in sides]


def _pq(ms: dict[str, Any]) -> str:
    return f"{_ms(ms.get('p50'))} / {_ms(ms.get('p95'))}"


def latency_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per workload: p50/p95 of each side, rag_api ÷ each of ours, recall, the machine."""
    labels = ours(rows[0]["sides"]) if rows else [THIS]
    out = [
        "| workload | rag_api p50 / p95 ms | "
        + " | ".join(f"{x} p50 / p95 ms" for x in labels)
        + " | "
        + " | ".join(f"rag_api ÷ {x} (p50)" for x in labels)
        + " | recall mean / min, foreign, short ("
        + "; ".join([RAGAPI, *labels])
        + ") | machine during the row |",
        "| --- | ---: | " + "---: | " * (2 * len(labels)) + "--- | --- |",
    ]
    for row in rows:
        a = row["sides"][RAGAPI]
        p50 = a["client_ms"].get("p50")
        out.append(
            f"| {row['title']} | {_pq(a['client_ms'])} | "
            + " | ".join(_pq(row["sides"][x]["client_ms"]) for x in labels)
            + " | "
            + " | ".join(_x(ratio(p50, row["sides"][x]["client_ms"].get("p50"))) for x in labels)
            + " | "
            + "; ".join(_checks(row["sides"][x]["recall"]) for x in [RAGAPI, *labels])
            + f" | {_machine(row)} |"
        )
    return "\n".join(out)


def throughput_table(row: dict[str, Any]) -> str:
    """The KB mix under concurrency: requests per second of each side and each of ours ÷ rag_api."""
    labels = [RAGAPI, *ours(row["sides"])]
    sides = [row["sides"][x] for x in labels]
    a = sides[0]
    ratios = " | ".join(_x(ratio(row["sides"][x]["req_per_s"], a["req_per_s"])) for x in labels[1:])
    blank = " |" * (len(labels) - 1)
    return "\n".join(
        [
            f"| LibreChat's KB mix, concurrency {row['concurrency']} | "
            + " | ".join(labels)
            + " | "
            + " | ".join(f"{x} ÷ rag_api" for x in labels[1:])
            + " |",
            "| --- |" + " ---: |" * (2 * len(labels) - 1),
            "| requests per second | "
            + " | ".join(f"{x['req_per_s']:,.1f}" for x in sides)
            + f" | {ratios} |",
            "| p50 / p95 ms | " + " | ".join(_pq(x["client_ms"]) for x in sides) + f" |{blank}",
            "| recall mean / min, foreign, short | "
            + " | ".join(_checks(x["recall"]) for x in sides)
            + f" |{blank}",
            "| errors | " + " | ".join(str(x["errors"]) for x in sides) + f" |{blank}",
            f"| machine | {_machine(row)} |" + " |" * (2 * len(labels) - 2),
        ]
    )


def fanout_table(row: dict[str, Any]) -> str:
    """LibreChat's stock fan-out against rag_api beside one batched call to each of ours, wall and CPU."""
    labels = ours(row["sides"])
    a = row["sides"][RAGAPI]
    bs = [row["sides"][x] for x in labels]
    blank = " |" * len(labels)

    def ratios(key: str) -> str:
        return " | ".join(_x(ratio(a[key].get("p50"), b[key].get("p50"))) for b in bs)

    return "\n".join(
        [
            f"| {row['files']}-file KB, back to back | rag_api: {row['files']} × `/query` (k 5), merged | "
            + " | ".join(f"{x}: one `/query_multiple`" for x in labels)
            + " | "
            + " | ".join(f"rag_api ÷ {x}" for x in labels)
            + " |",
            "| --- |" + " ---: |" * (1 + 2 * len(labels)),
            f"| wall p50 / p95 ms | {_pq(a['wall_ms'])} | "
            + " | ".join(_pq(b["wall_ms"]) for b in bs)
            + f" | {ratios('wall_ms')} |",
            f"| CPU ms per KB query (side + PostgreSQL; ours: mean of {CPU_REPEAT} calls), p50 | "
            f"{_ms(a['cpu_ms'].get('p50'))} | "
            + " | ".join(_ms(b["cpu_ms"].get("p50")) for b in bs)
            + f" | {ratios('cpu_ms')} |",
            "| recall of the merged top k mean / min, foreign, short | "
            + " | ".join(_checks(x["recall"]) for x in [a, *bs])
            + f" |{blank}",
            f"| machine | {_machine(row)} |" + " |" * (2 * len(labels)),
        ]
    )


def render(result: dict[str, Any]) -> str:
    """The whole comparison as markdown: what ran, then each table with the machine beside it."""
    cmp = result["rag_api"]
    side = cmp["install"]
    head = [
        f"## rag_api live, same run ({result.get('started_utc', '?')})",
        "",
        f"rag_api {side['tag']} ({side['commit'][:10]}, {side['requirements']}), this checkout "
        f"({cmp.get('this_commit', '?')[:10]})"
        + (f" and the previous release ({cmp['previous_commit'][:10]})" if cmp.get("previous_commit") else "")
        + f" on one PostgreSQL and one embedding stub; one client, "
        f"request by request, the side going first rotating. Load average at start "
        f"{'/'.join(str(x) for x in result.get('loadavg_at_start', []))}, at end "
        f"{'/'.join(str(x) for x in result.get('loadavg_at_end', []))}; foreign CPU over the whole "
        f"comparison {cmp.get('cpu', {}).get('foreign_cores', '-')} cores "
        f"({cmp.get('cpu', {}).get('foreign_s', '-')} s).",
        "",
        latency_table(cmp["latency"]),
        "",
    ]
    for row in cmp.get("throughput", []):
        head += [throughput_table(row), ""]
    if "fanout" in cmp:
        head += [fanout_table(cmp["fanout"]), ""]
    return "\n".join(head)


def checks_passed(cmp: dict[str, Any]) -> bool:
    """True when no answer of either side held a foreign row or came back short."""
    rows = [*cmp.get("latency", []), *cmp.get("throughput", [])]
    if "fanout" in cmp:
        rows.append(cmp["fanout"])
    for row in rows:
        for side in row["sides"].values():
            rec = side.get("recall", {})
            if rec.get("foreign_rows") or rec.get("short_answers"):
                return False
    return True
