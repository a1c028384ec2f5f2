"""Markdown tables of a quality run (pure: from the result document to text)."""

from __future__ import annotations

from typing import Any

SET_TITLES = {
    "man": "man pages (query: the NAME description, removed from the page)",
    "html-tables": "HTML tables (query: row label + column header; answer: the cell)",
    "html-identifiers": "HTML identifiers (query: a defined name; answer: its signature)",
}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def answerable_table(result: dict[str, Any], set_name: str) -> list[str]:
    """One row per system for an answerable set."""
    lines = [
        "| system | queries | R@1 | R@5 | R@10 | MRR | nDCG@10 | answer in passage | false refusals | "
        "p50 ms | p95 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system, sets in result["summary"].items():
        s = sets.get(set_name)
        if not s:
            continue
        refuses = result["systems"][system]["refuses"]
        false_ref = _pct(s["false_refusal_rate"]) if refuses else "0 % (never refuses)"
        answer = _pct(s["answer_in_passage"]) if s["answer_queries"] else "–"
        lines.append(
            f"| {system} | {s['answerable']} | {_num(s['recall_at_1'])} | {_num(s['recall_at_5'])} | "
            f"{_num(s['recall_at_10'])} | {_num(s['mrr'])} | {_num(s['ndcg_at_10'])} | {answer} | "
            f"{false_ref} | {_ms(s['latency_p50_ms'])} | {_ms(s['latency_p95_ms'])} |"
        )
    return lines


def unanswerable_table(result: dict[str, Any]) -> list[str]:
    """Refusal rate per system, overall and per kind of unanswerable question."""
    kinds = sorted({k.split(":", 1)[1] for sets in result["summary"].values() for k in sets if ":" in k})
    head = (
        "| system | queries | refused | "
        + " | ".join(f"refused: {k}" for k in kinds)
        + " | p50 ms | p95 ms |"
    )
    lines = [head, "| --- | ---: | ---: | " + " | ".join("---:" for _ in kinds) + " | ---: | ---: |"]
    for system, sets in result["summary"].items():
        s = sets.get("unanswerable")
        if not s:
            continue
        refuses = result["systems"][system]["refuses"]
        overall = _pct(s["refusal_rate"]) if refuses else "0 % (never refuses)"
        per_kind = []
        for k in kinds:
            sk = sets.get(f"unanswerable:{k}")
            if not sk:
                per_kind.append("–")
            elif refuses:
                per_kind.append(f"{_pct(sk['refusal_rate'])} of {sk['unanswerable']}")
            else:
                per_kind.append(f"0 of {sk['unanswerable']}")
        lines.append(
            f"| {system} | {s['unanswerable']} | {overall} | "
            + " | ".join(per_kind)
            + f" | {_ms(s['latency_p50_ms'])} | {_ms(s['latency_p95_ms'])} |"
        )
    return lines


def model_table(models: dict[str, dict[str, Any]]) -> list[str]:
    """Provenance and throughput of each in-process candidate."""
    lines = [
        "| system | package | file | MiB | weights check | prefixes | passages/s |",
        "| --- | --- | --- | ---: | --- | --- | ---: |",
    ]
    for name, f in models.items():
        if f.get("sha256_is_upstream") is True:
            check = "SHA-256 = upstream"
        elif "matches_upstream_int8_export" in f:
            match = f.get("matches_upstream_int8_export")
            check = f"= {match}" if match else "pinned SHA-256; no published int8 export has it"
        else:
            check = "no upstream file to compare"
        rate = f.get("passages_per_s")
        lines.append(
            f"| {name} | {f.get('package', '?')} | {f.get('file', '?')} | {f.get('bytes', 0) / 2**20:.1f} | "
            f"{check} | {f.get('prefixes', '?')} | {'cached' if rate is None else f'{rate:.1f}'} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    """The whole report."""
    c = result["corpus"]
    chunks = c["chunks"]
    kbs = ", ".join(f"{kb}: {n} files, {chunks.get(kb, 0)} chunks" for kb, n in c["knowledge_bases"].items())
    out = [
        f"# Retrieval quality, {result['started']}",
        "",
        f"{c['documents']} documents in {len(c['knowledge_bases'])} knowledge base(s) "
        f"({kbs}); "
        f"queries: {', '.join(f'{k} {v}' for k, v in sorted(c['queries'].items()))}. "
        f"Run took {result['seconds']:.0f} s.",
        "",
        "Systems: " + "; ".join(f"**{n}**: {s['description']}" for n, s in result["systems"].items()) + ".",
        "",
    ]
    present = {k for sets in result["summary"].values() for k in sets}
    for set_name, title in SET_TITLES.items():
        if set_name in present:
            out += [f"## {title}", "", *answerable_table(result, set_name), ""]
    if "unanswerable" in present:
        out += [
            "## Unanswerable (refusal rate; a system without refusal answers every one)",
            "",
            *unanswerable_table(result),
            "",
        ]
    models = {n: s["model"] for n, s in result["systems"].items() if "model" in s}
    if models:
        out += ["## Embedding models (in process, one thread)", "", *model_table(models), ""]
    up = result.get("upload") or {}
    if up.get("uploaded"):
        out += [
            f"Upload: {up['uploaded']} files through POST /embed in {up['seconds']:.0f} s "
            f"(about {up.get('chunks_per_s', 0):.1f} chunks/s embedded and stored).",
            "",
        ]
    return "\n".join(out)
