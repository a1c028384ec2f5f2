"""`scripts/bench ingest-ab`'s report, pure: per-page figures, ratios and the target rows (met / not met).

Input: the uploads as dicts (`ingest_ab_side.UploadResult`), side "A" (the previous release) and "B"
(this checkout), each file uploaded once as V1 alone (`v1`) and once as V1 + evidence (`evidence`).

    V1 + evidence CPU ÷ V1 CPU       sum over files of the evidence uploads' CPU seconds (service tree,
                                     until ready and quiet) over the V1 uploads'; target <= 1.2
    evidence ready after V1          (evidence upload's wall + its ready wait) / V1 upload's wall - 1,
                                     on a ~300-page PDF; target <= 10 %
    small upload p95                 170-byte uploads while a ~300-page PDF embeds; target <= 1 s
    1,400-page PDF searchable        /embed 200, /query finds chunks, /query_v2 answers whole

Nothing here asserts: a target row says met or not met, or why it was not measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.stats import summarize

CPU_TARGET = 1.2
READY_TARGET = 0.10
SMALL_P95_TARGET_S = 1.0
READY_PAGES = (250, 400)  # "a 300-page PDF"
BIG_PAGES = 1000  # "a 1,000+-page PDF"
SIDES = ("A", "B")


@dataclass(frozen=True)
class Pair:
    """One file on one side: its V1-alone upload and its V1 + evidence upload (either may be missing)."""

    file: str
    pages: int
    v1: dict[str, Any] | None
    evidence: dict[str, Any] | None


def pairs(uploads: Iterable[dict[str, Any]], side: str) -> list[Pair]:
    """`side`'s uploads grouped by file, in the order first seen."""
    found: dict[str, dict[str, Any]] = {}
    for u in uploads:
        if u["side"] != side:
            continue
        entry = found.setdefault(u["name"], {"pages": u["pages"]})
        entry[u["mode"]] = u
    return [Pair(name, e["pages"], e.get("v1"), e.get("evidence")) for name, e in found.items()]


def ok(upload: dict[str, Any] | None) -> bool:
    """The upload was stored (200)."""
    return upload is not None and upload.get("status") == 200


def ready_total_s(upload: dict[str, Any] | None) -> float | None:
    """Seconds from the evidence upload's start until `/query_v2` answered whole (None: never)."""
    if not ok(upload) or upload is None or upload.get("ready_after_s") is None:
        return None
    return float(upload["wall_s"]) + float(upload["ready_after_s"])


def ready_over_v1(p: Pair) -> float | None:
    """How much later than V1 alone the evidence was ready: (evidence ready) / (V1 wall) - 1."""
    total = ready_total_s(p.evidence)
    if total is None or not ok(p.v1) or p.v1 is None or not p.v1["wall_s"]:
        return None
    return total / float(p.v1["wall_s"]) - 1


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or not b:
        return None
    return a / b


def totals(ps: Sequence[Pair]) -> dict[str, Any]:
    """Sums over the files both of whose uploads were stored, the evidence answering from its upload
    (the CPU of one that never did stopped at the wait's limit): pages, CPU and wall seconds."""
    both = [p for p in ps if ok(p.v1) and ready_total_s(p.evidence) is not None]
    pages = sum(p.pages for p in both)
    v1_cpu = sum(float(p.v1["cpu_s"]) for p in both if p.v1)
    ev_cpu = sum(float(p.evidence["cpu_s"]) for p in both if p.evidence)
    v1_wall = sum(float(p.v1["wall_s"]) for p in both if p.v1)
    ev_wall = sum(ready_total_s(p.evidence) or 0.0 for p in both)
    return {
        "files": len(both),
        "left_out": len(ps) - len(both),
        "pages": pages,
        "v1_cpu_s": round(v1_cpu, 2),
        "evidence_cpu_s": round(ev_cpu, 2),
        "v1_wall_s": round(v1_wall, 2),
        "evidence_ready_s": round(ev_wall, 2),
        "cpu_ratio": _round(ratio(ev_cpu, v1_cpu), 3),
    }


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def _cell(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _per_page(upload: dict[str, Any] | None, key: str, pages: int) -> float | None:
    if not ok(upload) or upload is None or not pages:
        return None
    return float(upload[key]) / pages


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.0f} %"


def file_rows(uploads: list[dict[str, Any]]) -> list[str]:
    """The per-file table: per page CPU and wall of V1 alone and V1 + evidence, A and B side by side."""
    by_side = {s: {p.file: p for p in pairs(uploads, s)} for s in SIDES}
    lines = [
        "| file | pages | V1 CPU s/page A / B | V1 wall s/page A / B | V1+ev CPU s/page A / B "
        "| V1+ev ÷ V1 CPU A / B | ev ready after 200 (s) A / B | ev ready vs V1 wall A / B "
        "| V1+ev CPU B/A | statuses A / B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in dict.fromkeys(u["name"] for u in uploads):
        a, b = by_side["A"].get(name), by_side["B"].get(name)
        pages = (a or b).pages if (a or b) else 0  # type: ignore[union-attr]

        def both(f: Any, fmt: str = "{:.2f}", a: Pair | None = a, b: Pair | None = b) -> str:
            return f"{_cell(f(a) if a else None, fmt)} / {_cell(f(b) if b else None, fmt)}"

        lines.append(
            f"| {name} | {pages} "
            f"| {both(lambda p: _per_page(p.v1, 'cpu_s', p.pages), '{:.3f}')} "
            f"| {both(lambda p: _per_page(p.v1, 'wall_s', p.pages), '{:.3f}')} "
            f"| {both(lambda p: _per_page(p.evidence, 'cpu_s', p.pages), '{:.3f}')} "
            f"| {both(lambda p: ratio(_cpu(p.evidence), _cpu(p.v1)))} "
            f"| {both(lambda p: p.evidence.get('ready_after_s') if ok(p.evidence) else None, '{:.1f}')} "
            f"| {_pct(ready_over_v1(a) if a else None)} / {_pct(ready_over_v1(b) if b else None)} "
            f"| {_cell(ratio(_cpu(b.evidence) if b else None, _cpu(a.evidence) if a else None))} "
            f"| {_statuses(a)} / {_statuses(b)} |"
        )
    return lines


def _cpu(upload: dict[str, Any] | None) -> float | None:
    return float(upload["cpu_s"]) if ok(upload) and upload is not None else None


def _statuses(p: Pair | None) -> str:
    if p is None:
        return "-"
    return ",".join(str(u["status"]) if u else "-" for u in (p.v1, p.evidence))


def total_rows(uploads: list[dict[str, Any]]) -> list[str]:
    """Totals per side: pages, CPU s per page, V1 + evidence ÷ V1 CPU, wall to ready."""
    lines = [
        "| side | files | pages | V1 CPU s (s/page) | V1+ev CPU s (s/page) | V1+ev ÷ V1 CPU "
        "| V1 wall s | V1+ev wall to ready s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in SIDES:
        t = totals(pairs(uploads, side))
        pages, left = t["pages"] or 1, t["left_out"]
        lines.append(
            f"| {side} | {t['files']}{f' ({left} left out: failed or never ready)' if left else ''} "
            f"| {t['pages']} | {t['v1_cpu_s']} ({t['v1_cpu_s'] / pages:.3f}) "
            f"| {t['evidence_cpu_s']} ({t['evidence_cpu_s'] / pages:.3f}) | {_cell(t['cpu_ratio'])} "
            f"| {t['v1_wall_s']} | {_cell(t['evidence_ready_s'], '{:.1f}')} |"
        )
    return lines


def _verdict(value: float | None, target: float, ok_when_below: bool = True) -> str:
    if value is None:
        return "not measured"
    return "met" if (value <= target) == ok_when_below else "not met"


def targets(uploads: list[dict[str, Any]], latency: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's target rows, each with A's and B's figure and whether B meets it."""
    rows = []
    cpu = {s: totals(pairs(uploads, s))["cpu_ratio"] for s in SIDES}
    rows.append(
        {
            "target": f"ingestion CPU of V1 + evidence <= {CPU_TARGET}x V1 alone (all files)",
            "A": _cell(cpu["A"], "{:.2f}x"),
            "B": _cell(cpu["B"], "{:.2f}x"),
            "verdict": _verdict(cpu["B"], CPU_TARGET),
        }
    )
    rows.append(_ready_row(uploads))
    rows.append(_latency_row(latency))
    rows.append(_big_row(uploads))
    return rows


def _ready_row(uploads: list[dict[str, Any]]) -> dict[str, Any]:
    lo, hi = READY_PAGES
    found = {s: [p for p in pairs(uploads, s) if lo <= p.pages <= hi] for s in SIDES}
    row: dict[str, Any] = {"target": f"evidence ready <= {READY_TARGET:.0%} after V1 (a 300-page PDF)"}
    if not found["B"]:
        return {**row, "A": "-", "B": "-", "verdict": "not measured (no 250-400-page PDF in this set)"}
    worst = {s: [ready_over_v1(p) for p in found[s]] for s in SIDES}
    cells = {}
    for s in SIDES:
        values = worst[s]
        cells[s] = ", ".join(f"{p.file} {_pct(v)}" for p, v in zip(found[s], values, strict=True)) or "-"
    # an upload that failed, or whose evidence never answered, misses the target
    value = max(float("inf") if v is None else v for v in worst["B"])
    return {**row, "A": cells["A"], "B": cells["B"], "verdict": _verdict(value, READY_TARGET)}


def latency_summary(latency: dict[str, Any], side: str) -> dict[str, Any]:
    """`side`'s small uploads while the big one embedded: percentiles, statuses, the big's pages."""
    got = latency.get(side) or {}
    return {
        **summarize(got.get("latencies_s", [])),
        "pages": got.get("pages"),
        "statuses": got.get("statuses"),
    }


def _latency_row(latency: dict[str, Any]) -> dict[str, Any]:
    s = {side: latency_summary(latency, side) for side in SIDES}
    pages = s["B"].get("pages")
    row: dict[str, Any] = {
        "target": f"170-byte upload while a {pages or '?'}-page PDF embeds: p95 <= {SMALL_P95_TARGET_S:.0f} s"
    }

    def cell(x: dict[str, Any]) -> str:
        return "-" if not x.get("n") else f"p95 {x['p95']:.2f} s (p50 {x['p50']:.2f}, n {x['n']})"

    p95 = s["B"].get("p95") if s["B"].get("n") else None
    verdict = _verdict(p95, SMALL_P95_TARGET_S)
    if p95 is not None and pages is not None and not READY_PAGES[0] <= pages <= READY_PAGES[1]:
        verdict += f" (on {pages} pages, not the target's 300)"
    return {**row, "A": cell(s["A"]), "B": cell(s["B"]), "verdict": verdict}


def searchable(p: Pair) -> bool:
    """Both uploads stored, /query finds chunks of each, /query_v2 answered whole for the evidence one."""
    return (
        ok(p.v1)
        and ok(p.evidence)
        and bool(p.v1 and p.v1.get("v1_hits"))
        and bool(p.evidence and p.evidence.get("v1_hits"))
        and p.evidence is not None
        and p.evidence.get("ready_after_s") is not None
    )


def _big_row(uploads: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"target": "a 1,400-page PDF searchable in both indexes"}
    big = {s: [p for p in pairs(uploads, s) if p.pages >= BIG_PAGES] for s in SIDES}
    if not big["B"]:
        return {**row, "A": "-", "B": "-", "verdict": "not measured (no 1,000+-page PDF in this set)"}
    cells = {
        s: ", ".join(f"{p.file} {'yes' if searchable(p) else 'no'}" for p in big[s]) or "-" for s in SIDES
    }
    verdict = "met" if all(searchable(p) for p in big["B"]) else "not met"
    return {**row, "A": cells["A"], "B": cells["B"], "verdict": verdict}


def render(result: dict[str, Any]) -> str:
    """The whole report as markdown."""
    uploads = result.get("uploads", [])
    sides = result.get("sides", {})
    lines = [
        f"# Ingestion cost, previous release (A) beside this checkout (B) ({result.get('started_utc')})",
        "",
        f"A = {sides.get('A', {}).get('name', '?')}   B = {sides.get('B', {}).get('name', '?')}   "
        f"set {result.get('set')}; {result.get('machine', {}).get('nproc', '?')} cores; load average "
        f"at start {result.get('loadavg_at_start')}, at end {result.get('loadavg_at_end')}; one run.",
        "CPU: the service's process tree (parse workers included; PostgreSQL apart), from the upload "
        "until the service is quiet again (for V1 + evidence: after /query_v2 answers whole).",
    ]
    loads = [x for u in uploads for x in (u.get("load") or [])]
    if loads:
        lines.append(f"1-minute load average around the uploads: {min(loads):.1f}-{max(loads):.1f}.")
    resumed = result.get("resumed_from")
    if resumed:
        kept = sum(1 for u in uploads if u.get("resumed"))
        lines.append(
            f"Resumed: {kept} uploads kept from {resumed.get('file')} (started {resumed.get('started_utc')})."
        )
    if "error" in result:
        lines += ["", f"**The run failed**: {result['error']}"]
    lines += ["", *file_rows(uploads), "", *total_rows(uploads), ""]
    lines += ["| target | A | B | B meets it |", "|---|---|---|---|"]
    for t in targets(uploads, result.get("latency", {})):
        lines.append(f"| {t['target']} | {t['A']} | {t['B']} | {t['verdict']} |")
    memory = result.get("memory", {})
    lines.append("")
    for side in SIDES:
        f = memory.get(side, {})
        lines.append(
            f"{side}: peak RSS {f.get('peak_rss_mb', '-')} MB (with parse workers "
            f"{f.get('peak_tree_rss_mb', '-')} MB; VmHWM {_mb(f.get('vm_hwm_bytes'))} MB); "
            f"PostgreSQL CPU {_db_cpu(uploads, side)} s over the measured uploads."
        )
    return "\n".join(lines) + "\n"


def _mb(value: Any) -> str:
    return "-" if not value else f"{value / 1e6:.0f}"


def _db_cpu(uploads: list[dict[str, Any]], side: str) -> str:
    return f"{sum(float(u.get('db_cpu_s') or 0) for u in uploads if u['side'] == side):.1f}"
