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
        meta = result["systems"][system]
        if meta.get("stage"):
            false_ref = "– (before refusal)"
        elif meta["refuses"]:
            false_ref = _pct(s["false_refusal_rate"])
        else:
            false_ref = "0 % (never refuses)"
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
        if not s or result["systems"][system].get("stage"):
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


def _met(value: bool | None) -> str:
    return "not measured" if value is None else ("**met**" if value else "**not met**")


def _value(row: dict[str, Any]) -> str:
    v = row["value"]
    if v is None:
        return "–"
    if "ms" in row["target"]:
        return _ms(v)
    if "refus" in row["target"]:
        return _pct(v)
    return _num(v)


def targets_table(rows: list[dict[str, Any]]) -> list[str]:
    """The targets of `/query_v2`, one row per target and set."""
    lines = ["| target | set | value | needed | |", "| --- | --- | ---: | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['target']} | {r['set']} | {_value(r)} | {r['needed']} | {_met(r['met'])} |")
    return lines


def v2_lines(v2: dict[str, Any]) -> list[str]:
    """How the V2 index was made ready, the timed pass, and the debug pass's health."""
    out = []
    index = v2.get("index") or {}
    if index:
        kbs = index.get("knowledge_bases") or {}
        parts = [
            f"{kb}: run {k['run_id']}, {k['files']} files, {k['chunks']} chunks"
            + (" (backfilled)" if k.get("backfilled") else " (already active)")
            for kb, k in kbs.items()
        ]
        out.append(
            f"V2 index ready in {index.get('seconds', 0):.0f} s: {'; '.join(parts)}; "
            f"HNSW: {index.get('hnsw_tasks') or 'no task'}."
        )
    agree = v2.get("agreement") or {}
    if "timed" in v2:
        out.append(
            f"Latency of query_v2: {v2['timed']} questions asked again without debug, one at a time; "
            f"{agree.get('same', 0)} of them got exactly the debug answer's chunks and refusal "
            f"({agree.get('differ', 0)} differ)."
        )
    if "queries" in v2:
        errors = ", ".join(f"{c} {n}" for c, n in sorted((v2.get("channel_errors") or {}).items())) or "none"
        out.append(
            f"Debug pass: {v2['queries']} answers, {v2['degraded']} degraded, channel errors: {errors}, "
            f"reranker fell back {v2['rerank_fell_back']} times; debug answers took "
            f"p50 {_ms(v2.get('debug_p50_ms'))} / p95 {_ms(v2.get('debug_p95_ms'))} ms at the client."
        )
    return [line + "\n" for line in out]


def _rates(pair: list[float | None] | None) -> str:
    if not pair:
        return "–"
    return f"{_pct(pair[0])} / {_pct(pair[1])}"


def refusal_lines(grid: dict[str, Any]) -> list[str]:
    """The offline refusal grid: the service's setting, the chosen one, the best few, the heat table."""
    cases = grid["cases"]
    floor = grid["hard_floor"]
    out = [
        f"Replayed from each question's `debug.refusal` ({cases['answerable']} answerable, "
        f"{cases['unanswerable']} unanswerable; {grid['settings']} settings). The replay of the service's "
        f"own setting agrees with its recorded decision on {grid['replay_agrees']} of "
        f"{cases['answerable'] + cases['unanswerable']} questions. Hard reasons alone (no knob moves them) "
        f"refuse {_pct(floor['unanswerable_refused_by_hard_reasons'])} of unanswerable and "
        f"{_pct(floor['answerable_refused_by_hard_reasons'])} of answerable questions.",
        "",
        "| setting | unanswerable refused | false refusals | answerable nDCG@10 | R@1 | target |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]

    def row(label: str, r: dict[str, Any] | None) -> None:
        if r is None:
            return
        out.append(
            f"| {label}{r['policy']} | {_pct(r['refused'])} | {_pct(r['false_refusals'])} | "
            f"{_num(r['ndcg_at_10'])} | {_num(r['recall_at_1'])} | {'met' if r['meets'] else 'not met'} |"
        )

    row("**service now**: ", grid["service"])
    row("**chosen**: ", grid["chosen"])
    for r in grid["top"]:
        row("", r)
    out += ["", f"Chosen by: {grid['rule']}.", ""]
    heat = grid.get("heat") or {}
    if heat:
        cols = list(next(iter(heat.values())))
        out += [
            "Around the chosen setting (other knobs as chosen): unanswerable refused / false refusals",
            "",
            "| min_rerank_score \\ refuse_at | " + " | ".join(cols) + " |",
            "| --- | " + " | ".join("---:" for _ in cols) + " |",
        ]
        for m, by_at in heat.items():
            out.append(f"| {m} | " + " | ".join(_rates(by_at[c]) for c in cols) + " |")
        out.append("")
    for h in grid.get("holdout") or []:
        out.append(
            f"Held out: chosen on {h['chosen_on']} ({h['setting']}): {_rates(h['train'])} there, "
            f"{_rates(h['test'])} on the other half."
        )
    return out


def _weights(config: dict[str, Any]) -> str:
    w = config["weights"]
    return (
        f"k {config['rrf_k']:g}, exact {w.get('exact', 1):g}, lexical {w.get('lexical', 1):g}, "
        f"vector {w.get('vector', 1):g}, boost {config['exact_boost']:g}"
    )


def fusion_lines(grid: dict[str, Any]) -> list[str]:
    """The offline fusion grid and its fidelity to the service's recorded fused lists."""
    fid = grid["fidelity"]
    sets = sorted(grid["best_channel"])
    deltas = ", ".join(f"{n} {d:+.3f}" for n, d in sorted((fid.get("ndcg_delta") or {}).items()))
    shallow = any(abs(d) > 0.01 for d in (fid.get("ndcg_delta") or {}).values())
    out = [
        f"`fuse` re-run on the three channel stage lists ({grid['k']} deep; the service fuses each "
        f"channel's top 50). Replaying the service's own setting gives its recorded fused list exactly on "
        f"{fid['same_list']} of {fid['cases']} answerable questions, the same first item on "
        f"{fid['same_top1']}; nDCG@10 replay minus recorded: {deltas or '–'}. "
        + (
            "The lists are too shallow to conclude beyond the ranking of the top few: confirm a "
            "setting with a real run (its env settings) before adopting it."
            if shallow
            else "Close enough to compare settings."
        ),
        "",
        "| setting | " + " | ".join(f"{n} nDCG@10 / R@1" for n in sets) + " | >= best channel everywhere |",
        "| --- | " + " | ".join("---:" for _ in sets) + " | --- |",
    ]

    def row(label: str, r: dict[str, Any] | None) -> None:
        if r is None:
            return
        cells = [
            f"{_num(r['sets'][n]['ndcg_at_10'])} / {_num(r['sets'][n]['recall_at_1'])}"
            if n in r["sets"]
            else "–"
            for n in sets
        ]
        out.append(
            f"| {label}{_weights(r['config'])} | "
            + " | ".join(cells)
            + f" | {'yes' if r['beats_channels'] else 'no'} |"
        )

    best = grid["best_channel"]
    out.append(
        "| best single channel | "
        + " | ".join(f"{_num(best[n]['ndcg_at_10'])} / {_num(best[n]['recall_at_1'])}" for n in sets)
        + " | |"
    )
    row("**service now**: ", grid["service"])
    row("**best**: ", grid["best"])
    for r in grid["top"]:
        if r is not grid["best"] and r != grid["best"]:
            row("", r)
    return out


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
    if any(s.get("stage") for s in result["systems"].values()):
        out += [
            "The v2:* rows are the stages of one `/query_v2` debug answer per question (each stage's own "
            "top list, before the refusal); their p50/p95 are the server's time for that stage (a "
            "channel, fusion or reranking), from `debug`. query_v2 is the final results with refusals; "
            "its p50/p95 are the client's, asked again without debug.",
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
    if result.get("targets"):
        out += ["## /query_v2 targets", "", *targets_table(result["targets"]), ""]
    v2 = result.get("v2") or {}
    if v2:
        out += ["## /query_v2 run", "", *v2_lines(v2)]
    if v2.get("refusal_grid"):
        out += ["## Refusal policy, offline grid", "", *refusal_lines(v2["refusal_grid"]), ""]
    if v2.get("fusion_grid"):
        out += ["## Fusion weights, offline grid", "", *fusion_lines(v2["fusion_grid"]), ""]
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
