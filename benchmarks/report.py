"""The printed (markdown) report, the targets with met/missed, rag_api's reference figures, JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

# rag_api v0.9.0 figures from /work/shared/BASELINES.md: same corpus shape, measured there, not here.
BASELINE_SOURCE = "BASELINES.md (rag_api v0.9.0, 200k chunks / 10k files; not measured by this run)"
BASELINE_QUERY_MULTIPLE: dict[int, dict[str, tuple[float, float]]] = {
    1: {"with_indexes": (3.2, 3.7), "default": (95, 102)},
    100: {"with_indexes": (9.1, 11.4), "default": (92, 99)},
    373: {"with_indexes": (26.9, 31.2), "default": (98, 102)},
    1000: {"with_indexes": (59.4, 63.8), "default": (90, 118)},
}
BASELINE_FANOUT_373 = {"with_indexes": (1434, 1637), "default": (32006, 34276)}  # wall p50 / p95 ms
BASELINE_THROUGHPUT_1000_C8 = {"with_indexes": (32, 246), "default": (10, 759)}  # req/s, p50 ms

TARGETS = (
    ("p50_1000", "1,000 files p50 <= 10 ms", 10.0),
    ("p95_1000", "1,000 files p95 <= 25 ms", 25.0),
    ("recall_exact", "recall@10 = 1.0 on the exact path", 1.0),
    ("recall_index", "recall@10 >= 0.98 on the index path", 0.98),
    ("fanout_ratio", "batched >= 50x faster than the 373-file fan-out", 50.0),
)


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _triple(s: dict[str, Any] | None) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{_ms(s['p50'])} / {_ms(s['p95'])} / {_ms(s['p99'])}"


def _mib(n: Any) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def _errors(data: dict[str, Any]) -> int:
    """Replies other than 200 and 404 (404 is rag_api's 'nothing found')."""
    return sum(n for code, n in data.get("statuses", {}).items() if code not in ("200", "404"))


def _scenario(result: dict[str, Any], config: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = result.get("configs", {}).get(config, {}).get("latency", {}).get(name)
    return found


def _largest_own(result: dict[str, Any], config: str) -> tuple[str, dict[str, Any]] | None:
    latency = result.get("configs", {}).get(config, {}).get("latency", {})
    own = [(v["files"], k, v) for k, v in latency.items() if k.startswith("own-")]
    if not own:
        return None
    _, name, data = max(own)
    return name, data


def _path_share(data: dict[str, Any], path: str) -> float | None:
    """Share of a list's requests whose Server-Timing names `path`; None without path labels."""
    counts: dict[str, int] = {}
    for value in data.get("server_timing", {}).values():
        if isinstance(value, dict) and "n" not in value:
            for label, n in value.items():
                counts[label] = counts.get(label, 0) + n
    total = sum(counts.values())
    return counts.get(path, 0) / total if total else None


def _on_path(configs: dict[str, Any], path: str, fallback: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(config, list, data) of runs where most requests took `path` by Server-Timing, else of `fallback`."""
    out = []
    for cname, cfg in configs.items():
        for sname, data in cfg.get("latency", {}).items():
            if not data.get("recall"):
                continue
            share = _path_share(data, path)
            if (share is not None and share >= 0.5) or (share is None and cname == fallback):
                out.append((cname, sname, data))
    return out


def evaluate_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured value (client-observed; server-side alongside) and met/missed."""
    configs = result.get("configs", {})
    primary = "auto" if "auto" in configs else next(iter(configs), None)
    out: list[dict[str, Any]] = []
    for key, label, goal in TARGETS:
        measured: float | None = None
        server: float | None = None
        where = ""
        if key in ("p50_1000", "p95_1000") and primary:
            data = _scenario(result, primary, "own-1000")
            if data is None and (found := _largest_own(result, primary)):
                data = found[1]
                where = f"{found[0]} (no 1,000-file list at this scale)"
            if data:
                pct = key[:3]
                measured = data["client_ms"].get(pct)
                timing = data["server_timing"]
                server = (timing.get("total") or timing.get("db") or {}).get(pct)
                where = where or f"{primary}, own-1000"
        elif key == "recall_exact":
            runs = _on_path(configs, "exact", fallback="exact")
            measured = min((v["recall"]["min"] for _, _, v in runs), default=None)
            where = f"worst query of {len(runs)} list/config runs on the exact path"
        elif key == "recall_index":
            runs = _on_path(configs, "index", fallback="index")
            measured = min((v["recall"]["mean"] for _, _, v in runs), default=None)
            where = f"lowest per-list mean of {len(runs)} list/config runs on the index path"
        elif key == "fanout_ratio":
            for name, cfg in configs.items():
                if cfg.get("fanout"):
                    measured = cfg["fanout"].get("ratio_to_batched_p50")
                    where = f"{name} config, p50 wall / p50 batched"
                    break
        if measured is None:
            met = None
        elif key.startswith("p"):
            met = measured <= goal
        else:
            met = measured >= goal
        out.append(
            {
                "target": label,
                "goal": goal,
                "measured": measured,
                "server_side": server,
                "where": where,
                "met": met,
            }
        )
    return out


def render(result: dict[str, Any]) -> str:
    """The whole report as markdown."""
    sections = (
        _setting,
        _configurations,
        _throughput,
        _fanouts,
        _memory,
        _next_to_rag_api,
        _targets,
        _plans,
        _phases,
    )
    return "\n".join(line for section in sections for line in section(result)) + "\n"


def _primary(result: dict[str, Any]) -> str:
    """The configuration the headline figures come from: `auto`, else the first."""
    return "auto" if "auto" in result.get("configs", {}) else next(iter(result.get("configs", {})), "")


def _setting(result: dict[str, Any]) -> list[str]:
    """The title and what was measured on what: corpus, rows, machine, distances, load, client."""
    corpus, machine, db = result.get("corpus", {}), result.get("machine", {}), result.get("postgres", {})
    stats = corpus.get("table", {})
    sizes = corpus.get("file_size", {})
    lines = [f"# ragoverlay search benchmark ({result.get('started_utc', '')})", ""]
    lines.append(
        f"- corpus: {corpus.get('rows', 0):,} chunks in {corpus.get('files', 0):,} files "
        f"(chunks per file p50 {sizes.get('p50')}, p95 {sizes.get('p95')}, "
        f"max {sizes.get('max')}), {corpus.get('topics')} topics, "
        f"{corpus.get('queries')} distinct queries, seed {corpus.get('seed')}"
    )
    if "vector_out_of_line_share" in stats:
        lines.append(
            f"- rows: document {stats.get('doc_chars', 0):.0f} chars avg "
            f"(stored {stats.get('doc_stored_bytes', 0):.0f} B, "
            f"{stats.get('doc_compressed_share', 0):.0%} compressed), vector stored out of line (TOAST) in "
            f"{stats.get('vector_out_of_line_share', 0):.0%} of rows; heap {_mib(stats.get('heap_bytes'))}, "
            f"TOAST {_mib(stats.get('toast_bytes'))}"
        )
    lines.append(
        f"- machine: {machine.get('nproc')} cores ({machine.get('cpu_model')}), "
        f"{machine.get('ram_gib')} GiB RAM; "
        f"PostgreSQL {db.get('server_version')}, pgvector {db.get('pgvector')}; "
        f"shared_buffers {db.get('settings', {}).get('shared_buffers')}"
    )
    return lines + _difficulty(result) + _conditions(result)


def _difficulty(result: dict[str, Any]) -> list[str]:
    """How hard the data is: the exact distances of the largest list, the raw HNSW recall."""
    lines: list[str] = []
    profiles = [(n, v["distances"]) for n, v in result.get("scenarios", {}).items() if v.get("distances")]
    if profiles:
        name, prof = max(profiles, key=lambda p: result["scenarios"][p[0]]["visible_rows"])
        lines.append(
            f"- query distances over {name} (exact): nearest median {prof['top1_median']}, "
            f"10th median {prof['topk_median']}, 10th-to-11th gap median {prof['gap_k_to_k1_median']}"
        )
    raw = result.get("calibration", {}).get("raw_hnsw_recall") or {}
    if raw.get("by_ef_search"):
        parts = ", ".join(
            f"ef_search {ef}: {v['mean']:.3f} (min {v['min']:.1f})" for ef, v in raw["by_ef_search"].items()
        )
        lines.append(
            f"- data difficulty: pgvector HNSW alone, unfiltered, recall@10 over {raw['queries']} "
            f"queries: {parts}"
        )
    return lines


def _conditions(result: dict[str, Any]) -> list[str]:
    """Under what conditions: the machine's load before the run, the HTTP client."""
    lines: list[str] = []
    load = result.get("loadavg_at_start")
    if load and load[0] > 0.5:
        lines.append(
            f"- **warning**: load average {load} before the run started (other work on this machine); "
            "every figure is skewed by it"
        )
    lines.append(
        f"- HTTP client: {result.get('options', {}).get('client')}; "
        "latency is client-observed end to end from the same machine; server = the `Server-Timing` total "
        "and db = its db entry, when the service sends them; query embeddings are cached on the server "
        "before timing"
    )
    return [*lines, ""]


def _configurations(result: dict[str, Any]) -> list[str]:
    """A section per configuration: how it was set up, and its latency and recall per allow-list."""
    lines: list[str] = []
    add = lines.append
    for name, cfg in result.get("configs", {}).items():
        add(f"## `/query_multiple` k={result.get('options', {}).get('k')}: config `{name}`")
        add(
            f"{cfg.get('description', '')}; env {json.dumps(cfg.get('env', {}))}; "
            f"HTTP floor (GET /health p50) {_ms((cfg.get('health_floor_ms') or {}).get('p50'))} ms; "
            f"load average at start {cfg.get('loadavg_at_start')}"
        )
        index = cfg.get("index") or {}
        if index:
            add(f"HNSW index: {index.get('summary', '-')}")
        copy = cfg.get("vector_copy") or {}
        if copy:
            add(f"vector copy (exact scans): {copy.get('summary', '-')}")
        if cfg.get("skipped") or cfg.get("error"):
            add(f"skipped: {cfg['skipped']}" if cfg.get("skipped") else f"**failed**: {cfg['error'][:500]}")
            add("")
            continue
        add("")
        add(
            "| allow-list | visible rows | client p50 / p95 / p99 ms | server p50 / p95 / p99 ms | db p50 ms "
            "| path | recall@10 mean (min) | short / foreign / errors |"
        )
        add("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
        lines.extend(_latency_row(sname, data) for sname, data in cfg.get("latency", {}).items())
        add("")
    return lines


def _latency_row(sname: str, data: dict[str, Any]) -> str:
    """One allow-list's row of a configuration's table."""
    st = data.get("server_timing", {})
    labels = [v for v in st.values() if isinstance(v, dict) and "n" not in v]  # e.g. db.desc counts
    path_text = "; ".join(", ".join(f"{k} {n}" for k, n in v.items()) for v in labels) or "-"
    rec = data.get("recall", {})
    label = sname if data["files"] == data["requested_files"] else f"{sname} ({data['files']} files)"
    return (
        f"| {label} | {data['visible_rows']:,} | {_triple(data['client_ms'])} "
        f"| {_triple(st.get('total'))} "
        f"| {_ms((st.get('db') or {}).get('p50'))} | {path_text} "
        f"| {rec.get('mean', 0):.3f} ({rec.get('min', 0):.2f}) "
        f"| {rec.get('short_answers', 0)} / {rec.get('foreign_rows', 0)} / {_errors(data)} |"
    )


def _throughput(result: dict[str, Any]) -> list[str]:
    """Requests per second at each concurrency, every configuration in one table."""
    tp_rows = [(n, t) for n, c in result.get("configs", {}).items() for t in c.get("throughput", [])]
    if not tp_rows:
        return []
    lines = [
        f"## Throughput, `/query_multiple` over {result.get('throughput_files')} files",
        "",
        "| config | concurrency | req/s | client p50 / p95 ms | server p50 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in tp_rows:
        lines.append(
            f"| {name} | {t['concurrency']} | {t['req_per_s']:.1f} | {_ms(t['client_ms'].get('p50'))} / "
            f"{_ms(t['client_ms'].get('p95'))} "
            f"| {_ms((t['server_timing'].get('total') or {}).get('p50'))} "
            f"| {t['errors']} |"
        )
    return [*lines, ""]


def _fanouts(result: dict[str, Any]) -> list[str]:
    """LibreChat's per-file fan-out against the batched call, for each configuration that measured it."""
    lines: list[str] = []
    add = lines.append
    for name, cfg in result.get("configs", {}).items():
        fan = cfg.get("fanout")
        if not fan:
            continue
        add(
            f"## LibreChat's pattern: {fan['files']} parallel `/query` (k={fan['k_per_file']}), "
            "merge, top 10 "
            f"(config `{name}`, {fan['reps']} reps)"
        )
        add("")
        add("| | p50 ms | p95 ms |")
        add("| --- | ---: | ---: |")
        add(f"| fan-out wall time | {_ms(fan['wall_ms'].get('p50'))} | {_ms(fan['wall_ms'].get('p95'))} |")
        add(
            f"| client CPU per fan-out ({result.get('options', {}).get('client')} client) "
            f"| {_ms(fan['client_cpu_ms'].get('p50'))} | "
            f"{_ms(fan['client_cpu_ms'].get('p95'))} |"
        )
        srv = fan.get("server_total_ms_summed_per_rep", {})
        if srv.get("n"):
            add(
                f"| server time summed over the {fan['files']} requests | {_ms(srv.get('p50'))} "
                f"| {_ms(srv.get('p95'))} |"
            )
        add(
            f"| batched `/query_multiple` ({fan['files']} files) | {_ms(fan.get('batched_p50_ms'))} | "
            f"{_ms(fan.get('batched_p95_ms'))} |"
        )
        add("")
        rec = fan.get("recall_of_merged_top", {})
        add(
            f"Ratio fan-out / batched (p50): **{fan.get('ratio_to_batched_p50', 0):.0f}x**. "
            f"Recall@10 of the merged fan-out: {rec.get('mean', 0):.3f} (per-file k=5 misses files holding "
            f"more than 5 of the global top 10). Statuses: {fan.get('statuses')}"
        )
        add("")
    return lines


def _memory(result: dict[str, Any]) -> list[str]:
    """The service's peak memory per configuration."""
    lines = [
        "## Service memory",
        "",
        "| config | peak RSS (psutil, sampled) | VmHWM |",
        "| --- | ---: | ---: |",
    ]
    for name, cfg in result.get("configs", {}).items():
        mem = cfg.get("memory") or {}
        if mem:
            lines.append(
                f"| {name} | {_mib(mem.get('peak_rss_sampled_bytes'))} | {_mib(mem.get('vm_hwm_bytes'))} |"
            )
    return [*lines, ""]


def _next_to_rag_api(result: dict[str, Any]) -> list[str]:
    """The primary configuration's figures beside rag_api's (measured elsewhere, BASELINES.md)."""
    primary = _primary(result)
    lines = [
        f"## Next to rag_api (figures from {BASELINE_SOURCE})",
        "",
        "| workload (p50 / p95 ms) | rag_api + its btree indexes | rag_api default "
        f"| ragoverlay `{primary}` (measured) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for n, base in BASELINE_QUERY_MULTIPLE.items():
        ours = _scenario(result, primary, f"own-{n}")
        ours_text = f"{_ms(ours['client_ms']['p50'])} / {_ms(ours['client_ms']['p95'])}" if ours else "-"
        lines.append(
            f"| `/query_multiple` {n:,} files | {base['with_indexes'][0]} / {base['with_indexes'][1]} | "
            f"{base['default'][0]} / {base['default'][1]} | {ours_text} |"
        )
    fan = result.get("configs", {}).get(primary, {}).get("fanout")
    fan_text = f"{_ms(fan['wall_ms'].get('p50'))} / {_ms(fan['wall_ms'].get('p95'))}" if fan else "-"
    lines.append(
        f"| 373 parallel `/query` + merge (wall) | {BASELINE_FANOUT_373['with_indexes'][0]:,} / "
        f"{BASELINE_FANOUT_373['with_indexes'][1]:,} | {BASELINE_FANOUT_373['default'][0]:,} / "
        f"{BASELINE_FANOUT_373['default'][1]:,} | {fan_text} |"
    )
    c8 = next(
        (
            t
            for t in result.get("configs", {}).get(primary, {}).get("throughput", [])
            if t["concurrency"] == 8
        ),
        None,
    )
    c8_text = f"{c8['req_per_s']:.0f} req/s (p50 {_ms(c8['client_ms'].get('p50'))})" if c8 else "-"
    lines.append(
        f"| 1,000 files at concurrency 8 | {BASELINE_THROUGHPUT_1000_C8['with_indexes'][0]} req/s (p50 "
        f"{BASELINE_THROUGHPUT_1000_C8['with_indexes'][1]}) "
        f"| {BASELINE_THROUGHPUT_1000_C8['default'][0]} req/s "
        f"(p50 {BASELINE_THROUGHPUT_1000_C8['default'][1]}) | {c8_text} |"
    )
    return [*lines, ""]


def _targets(result: dict[str, Any]) -> list[str]:
    """Each target, measured, and met or missed."""
    lines = [
        "## Targets (benchmark figures, not assertions)",
        "",
        "| target | measured (client) | server-side (total, else db) | where | |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for t in result.get("targets", []):
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "**missed**")
        server_text = "-" if t["server_side"] is None else f"{_ms(t['server_side'])} ms"
        measured = t["measured"]
        text = (
            "-"
            if measured is None
            else (
                f"{measured:.3f}"
                if t["target"].startswith("recall")
                else f"{measured:.0f}x"
                if "faster" in t["target"]
                else f"{_ms(measured)} ms"
            )
        )
        lines.append(f"| {t['target']} | {text} | {server_text} | {t['where']} | {verdict} |")
    return [*lines, ""]


def _plans(result: dict[str, Any]) -> list[str]:
    """The slowest statement's plan per configuration and list (the auto_explain pass)."""
    plans = [(n, c["plans"]) for n, c in result.get("configs", {}).items() if c.get("plans")]
    if not plans:
        return []
    lines = ["## Plans (auto_explain, separate pass; the slowest statement per request)", ""]
    for name, per_scenario in plans:
        for sname, info in per_scenario.items():
            if info.get("nodes"):
                lines.append(
                    f"- `{name}` {sname}: {info['duration_ms']:.1f} ms, "
                    f"{info.get('statements_per_request')} statement(s)/request, "
                    f"shared hit {info.get('shared_hit_blocks')} read {info.get('shared_read_blocks')}: "
                    + " > ".join(n.strip() for n in info["nodes"][:6])
                )
    return [*lines, ""]


def _phases(result: dict[str, Any]) -> list[str]:
    """Seconds per phase of the run, and the total."""
    lines = ["## Phases (seconds)", "", "| phase | s |", "| --- | ---: |"]
    lines.extend(f"| {phase} | {secs:.1f} |" for phase, secs in result.get("phases", {}).items())
    return [*lines, f"| **total** | {result.get('total_s', 0):.1f} |"]


def write(result: dict[str, Any], out_dir: Path, stamp: str) -> tuple[Path, Path]:
    """`<stamp>.json` and `<stamp>.md` under `out_dir`, copied to `latest.json` / `latest.md`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stamp}.json"
    md_path = out_dir / f"{stamp}.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    md_path.write_text(render(result))
    shutil.copyfile(json_path, out_dir / "latest.json")
    shutil.copyfile(md_path, out_dir / "latest.md")
    return json_path, md_path
