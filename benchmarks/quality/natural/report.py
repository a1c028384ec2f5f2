"""Plain-text tables of a natural-question run (pure: from the result document to text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.quality.natural.latency import latency_table
from benchmarks.quality.natural.scoring import V1, V2
from benchmarks.quality.natural.sets import KINDS, UNANSWERABLE
from benchmarks.quality.v2 import STAGE_SYSTEMS, STAGES

Summary = Mapping[str, Mapping[str, Mapping[str, Any]]]


def _f(value: float | None) -> str:
    return "    –" if value is None else f"{value:5.3f}"


def _pct(value: float | None) -> str:
    return "     –" if value is None else f"{100 * value:5.1f}%"


def _groups(summary: Summary) -> list[tuple[str, str, str]]:
    """(corpus label, kind label, group key) rows: each corpus's kinds, then every kind, then totals."""
    keys = set(summary.get(V1, {})) | set(summary.get(V2, {}))
    corpora = sorted({k.split("/", 1)[0] for k in keys if "/" in k})
    rows = []
    for corpus in corpora:
        rows += [(corpus, kind, f"{corpus}/{kind}") for kind in KINDS if f"{corpus}/{kind}" in keys]
    rows += [("all", kind, f"kind:{kind}") for kind in KINDS if f"kind:{kind}" in keys]
    rows += [("all", group, group) for group in ("answerable", "unanswerable") if group in keys]
    return rows


def main_table(summary: Summary) -> list[str]:
    """V1 beside V2 per corpus x kind: right file first, top 5, answer in passage, refusals."""
    head = (
        f"{'corpus':<22} {'kind':<19} {'n':>4} | {'first V1':>8} {'V2':>5} | {'top5 V1':>7} {'V2':>5} | "
        f"{'answer V1':>9} {'V2':>5} | {'any case V1':>11} {'V2':>5} | {'V2 refused':>10}"
    )
    out = [head, "-" * len(head)]
    v1, v2 = summary.get(V1, {}), summary.get(V2, {})
    for corpus, kind, key in _groups(summary):
        a, b = v1.get(key, {}), v2.get(key, {})
        n = (b or a).get("items", 0)
        if kind in UNANSWERABLE or key == "unanswerable":
            refused = b.get("unanswerable_refused")
            blank = f"{'':>8} {'':>5} | {'':>7} {'':>5} | {'':>9} {'':>5} | {'':>11} {'':>5}"
            out.append(f"{corpus:<22} {kind:<19} {n:>4} | {blank} | {_pct(refused):>10}")
            continue
        out.append(
            f"{corpus:<22} {kind:<19} {n:>4} | {_f(a.get('first')):>8} {_f(b.get('first'))} | "
            f"{_f(a.get('top5')):>7} {_f(b.get('top5'))} | {_f(a.get('answer')):>9} {_f(b.get('answer'))} | "
            f"{_f(a.get('answer_caseless')):>11} {_f(b.get('answer_caseless'))} | "
            f"{_pct(b.get('answerable_refused')):>10}"
        )
    out += [
        "first: a gold file is the first file returned; top5: among the first five files; answer: the",
        "answer string is in a returned passage (whitespace collapsed; any case: ignoring case).",
        "V2 refused: on answerable rows the false refusals, on unanswerable ones the refusals;",
        "V1 never refuses.",
    ]
    return out


def stage_table(summary: Summary) -> list[str]:
    """The V2 stages of the debug answers (before the refusal), per kind and over every answerable item."""
    stages = [STAGE_SYSTEMS[s] for s in STAGES if STAGE_SYSTEMS[s] in summary]
    if not stages:
        return []
    head = f"{'kind':<19} {'n':>4} | " + " | ".join(f"{s:<19}" for s in stages)
    out = [
        head.rstrip(),
        (f"{'':<19} {'':>4} | " + " | ".join(f"{'first top5 answer':<19}" for _ in stages)).rstrip(),
    ]
    out.append("-" * len(head))
    groups = [f"kind:{k}" for k in KINDS if k not in UNANSWERABLE] + ["answerable"]
    for group in groups:
        cells = []
        n = 0
        for s in stages:
            g = summary[s].get(group)
            if not g:
                cells.append(f"{'–':<19}")
                continue
            n = g["answerable"]
            cells.append(f"{_f(g['first'])} {_f(g['top5'])} {_f(g['answer'])}"[:19].ljust(19))
        if n:
            out.append((f"{group.removeprefix('kind:'):<19} {n:>4} | " + " | ".join(cells)).rstrip())
    return out


def targets_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per target: value, what it needs, met / not met."""
    out = []
    for r in rows:
        value = r["value"]
        shown = (
            "–" if value is None else (f"{100 * value:.1f} %" if "refus" in r["target"] else f"{value:.3f}")
        )
        met = "not measured" if r["met"] is None else ("met" if r["met"] else "NOT MET")
        out.append(f"{r['target']:<36} {r['group']:<20} {shown:>8}  needed {r['needed']:<9} {met}")
    return out


def text(result: Mapping[str, Any]) -> str:
    """The whole printout."""
    c = result["corpus"]
    lines = [
        f"Natural questions, {result['started']}, split {result['options']['split']}"
        + (" (quick)" if result["options"]["quick"] else ""),
        "; ".join(
            f"{name}: {f['files']} files, {f['questions']} questions"
            + (f" ({f['excluded']} failing the checker left out)" if f.get("excluded") else "")
            for name, f in c["corpora"].items()
        )
        + f". Run took {result['seconds']:.0f} s.",
        "",
        *main_table(result["summary"]),
        "",
    ]
    stages = stage_table(result["summary"])
    if stages:
        lines += ["V2 stages (debug answers, before the refusal): first / top5 / answer", "", *stages, ""]
    if result.get("latency"):
        timed = latency_table(result["latency"])
        lines += ["Latency, one request at a time, V1 and V2 in turn", "", *timed, ""]
    busy = result.get("latency_busy")
    if busy:
        lines += [
            f"The same while uploads ran in the service ({busy['uploads']} uploads into {busy['namespace']}, "
            f"{busy['evidence_chunks']} evidence chunks staged, {busy['failures']} failed, "
            f"{busy['seconds']:.0f} s; load average {busy['load']})",
            "",
            *latency_table(busy["latency"]),
            "",
        ]
    if result.get("targets"):
        lines += ["Targets", "", *targets_table(result["targets"]), ""]
    return "\n".join(lines)
