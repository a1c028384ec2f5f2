"""One quality run: build the sets, start the service, upload, ask every system every query, report."""

from __future__ import annotations

import asyncio
import os
import platform
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from benchmarks.http import LeanHTTP
from benchmarks.progress import Progress
from benchmarks.quality import htmldocs, manpages, tuning
from benchmarks.quality import service as svc
from benchmarks.quality.build import SetupError, add_mutants, build_corpus
from benchmarks.quality.dataset import MAX_FILES_PER_REQUEST, Chunk, Corpus, Query, save_json
from benchmarks.quality.embedders import DenseInProcess
from benchmarks.quality.metrics import Judged, judge, ndcg_at_k, percentile, recall_at_k, summarise
from benchmarks.quality.report import markdown
from benchmarks.quality.systems import (
    BM25Reference,
    RRFusion,
    System,
    SystemUnavailable,
    V1Dense,
)
from benchmarks.quality.targets import evaluate as evaluate_targets
from benchmarks.quality.v2 import (
    CHANNEL_STAGES,
    FINAL,
    STAGE_SYSTEMS,
    QueryRecord,
    V2Client,
    V2Debugged,
    V2Stage,
    agreement,
    timed_pass,
    timed_sample,
    v2_systems,
)
from benchmarks.quality.v2index import V2IndexError, wait_for_index
from benchmarks.service import REPO_ROOT

SYSTEM_NAMES = ("v1-dense", "bm25", "rrf", "query_v2")
SET_NAMES = ("man", "html")


@dataclass
class Sizes:
    """How big the sets are (see `--quick` and docs/performance.md for the figures of each size)."""

    pages: int = 2000
    held_out: int = 200
    html_pages: int = 120
    table_queries: int = 300
    identifier_queries: int = 300
    mutants: int = 200
    per_table: int = 2
    max_chars: int = 12_000


QUICK = Sizes(pages=300, held_out=50, html_pages=30, table_queries=60, identifier_queries=60, mutants=60)


@dataclass
class Options:
    """Everything a quality run can be told (`scripts/bench quality --help`)."""

    sizes: Sizes = field(default_factory=Sizes)
    quick: bool = False
    sets: tuple[str, ...] = SET_NAMES
    systems: tuple[str, ...] = SYSTEM_NAMES
    seed: int = 42
    k: int = 10
    depth: int = 30
    rrf_k: float = 60.0
    kb_size: int = MAX_FILES_PER_REQUEST
    data_dir: Path = REPO_ROOT / "data" / "bench-quality"
    out_dir: Path = REPO_ROOT / "bench-results"
    fresh: bool = False
    setup: bool = False
    render_workers: int = 2
    upload_concurrency: int = 2
    service_env: dict[str, str] = field(default_factory=dict)
    write_results: bool = True
    tag: str = ""
    models: tuple[str, ...] = ()  # in-process candidate embedding models (embedders.CANDIDATES)
    service_url: str | None = None  # measure this running service instead of starting one
    token: str | None = None  # an admin's bearer token for --service-url
    jwt_secret: str | None = None  # or the service's JWT_SECRET, to mint one (role ADMIN)
    v2_timed: int = 0  # questions of the timed /query_v2 pass without debug (0: all)
    v2_wait_s: float = 3 * 3600.0  # how long the V2 index may take to be ready
    man_dirs: tuple[Path, ...] = manpages.MAN_DIRS
    html_root: Path = htmldocs.DOC_ROOT


def make_systems(
    names: tuple[str, ...],
    http: LeanHTTP,
    kbs: dict[str, list[str]],
    chunks: dict[str, list[Chunk]],
    opts: Options,
    say: Callable[[str], None] = lambda _m: None,
    headers: dict[str, str] | None = None,
) -> list[System]:
    """The requested systems, in the order asked, then one per candidate model; `query_v2` is six
    systems read from one debug request per query (`v2.py`)."""
    out: list[System] = []
    for name in names:
        if name == "v1-dense":
            out.append(V1Dense(http, kbs, k=opts.k, headers=headers))
        elif name == "bm25":
            out.append(BM25Reference(chunks, k=opts.k))
        elif name == "rrf":
            out.append(
                RRFusion(
                    V1Dense(http, kbs, k=opts.depth, name="v1-dense@depth", headers=headers),
                    BM25Reference(chunks, k=opts.depth, name="bm25@depth"),
                    k=opts.k,
                    rrf_k=opts.rrf_k,
                )
            )
        elif name == "query_v2":
            out.extend(v2_systems(V2Debugged(V2Client(http, kbs, k=opts.k, debug=True, headers=headers))))
        else:
            raise SetupError(f"unknown system {name!r} (choose from {', '.join(SYSTEM_NAMES)})")
    for model in opts.models:
        out.append(DenseInProcess(model, chunks, opts.data_dir / "embeddings", k=opts.k, say=say))
    return out


async def measure(systems: list[System], queries: list[Query], progress: Progress) -> dict[str, list[Judged]]:
    """Every system answers every query, one query at a time (system after system per query)."""
    judged: dict[str, list[Judged]] = {s.name: [] for s in systems}
    channel_counts: dict[str, dict[str, int]] = {s.name: {} for s in systems}
    t_last = time.perf_counter()
    for i, q in enumerate(queries):
        for system in systems:
            outcome = await system.search(q)
            judged[system.name].append(
                judge(
                    answerable=q.answerable,
                    refused=outcome.refused,
                    passage_files=[p.file_id for p in outcome.passages],
                    passage_texts=[p.content for p in outcome.passages],
                    relevant=q.relevant,
                    answer=q.answer,
                    latency_ms=outcome.latency_ms,
                )
            )
            for ch, n in (outcome.info.get("channels") or {}).items():
                channel_counts[system.name][ch] = channel_counts[system.name].get(ch, 0) + n
        if time.perf_counter() - t_last > 20:
            t_last = time.perf_counter()
            progress.say(f"queries: {i + 1}/{len(queries)}")
    return judged


def summaries(queries: list[Query], judged: dict[str, list[Judged]]) -> dict[str, dict[str, Any]]:
    """Per system, per set (and per unanswerable kind, every answerable question, every question):
    the metric summary."""
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(queries):
        groups.setdefault(q.set, []).append(i)
        groups.setdefault("all", []).append(i)
        if q.answerable:
            groups.setdefault("answerable", []).append(i)
        if not q.answerable:
            groups.setdefault(f"unanswerable:{q.kind}", []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for system, results in judged.items():
        out[system] = {name: asdict(summarise([results[i] for i in idx])) for name, idx in groups.items()}
    return out


def per_query(
    queries: list[Query], judged: dict[str, list[Judged]], records: dict[str, QueryRecord] | None = None
) -> list[dict[str, Any]]:
    """Every query with its ground truth and each system's file ranking, refusal, answer and latency,
    and /query_v2's refusal inputs (for looking into single cases; the tables use `summary`)."""
    out = []
    for i, q in enumerate(queries):
        record = (records or {}).get(q.qid)
        out.append(
            {
                **({"v2_refusal": asdict(record.refusal)} if record and record.refusal else {}),
                "qid": q.qid,
                "set": q.set,
                "kind": q.kind,
                "text": q.text,
                "kb": q.kb,
                "relevant": list(q.relevant),
                "note": q.note,
                "systems": {
                    name: {
                        "ranking": list(r[i].ranking),
                        "refused": r[i].refused,
                        "answer_found": r[i].answer_found,
                        "ms": _ms(r[i].latency_ms),
                    }
                    for name, r in judged.items()
                },
            }
        )
    return out


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _order(queries: list[Query], seed: int) -> list[Query]:
    # a seeded shuffle: sets interleave, so a slow phase of the machine does not hit one set only
    ordered = sorted(queries, key=lambda q: q.qid)
    random.Random(seed + 6).shuffle(ordered)
    return ordered


def _token(opts: Options, served: svc.Served | None) -> str | None:
    """The admin token every request carries: our service's, `--token`, or minted from `--jwt-secret`."""
    if served is not None:
        return served.token
    if opts.token:
        return opts.token
    if opts.jwt_secret:
        return svc.admin_token(opts.jwt_secret, role=True)
    return None


async def run_async(opts: Options, progress: Progress) -> dict[str, Any]:
    """The whole run; returns the result document (also written under `out_dir`)."""
    started = datetime.now(UTC)
    corpus, defs = build_corpus(opts, progress)
    kbs = corpus.kbs()
    fingerprint = corpus.fingerprint()
    service_dir = opts.data_dir / f"service-{fingerprint}"
    if opts.fresh and service_dir.exists():
        shutil.rmtree(service_dir)
    env = {
        "RAG_V2_NAMESPACE_IDS": ",".join(sorted(kbs)),
        # every query pays its embedding, as a new question does (the LRU would hide it on repeats)
        "QUERY_EMBEDDING_CACHE_SIZE": "0",
        **opts.service_env,
    }
    if opts.service_url:
        served: svc.Served | None = None
        base_url = opts.service_url.rstrip("/")
    else:
        with progress.phase("service start"):
            served = await svc.start(service_dir, env)
        base_url = served.base_url
    headers = svc.auth_headers(_token(opts, served))
    result: dict[str, Any] = {}
    try:
        upload_facts, chunks = await _upload(base_url, corpus, opts, progress, headers)
        v2_index: dict[str, Any] | None = None
        if "query_v2" in opts.systems:
            with progress.phase(V2_INDEX_PHASE):
                async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120.0) as client:
                    v2_index = await wait_for_index(client, kbs, timeout_s=opts.v2_wait_s, say=progress.say)
        made = add_mutants(corpus, chunks, defs, opts)
        queries = _order(corpus.queries, opts.seed)
        asked = await _ask(base_url, kbs, chunks, queries, opts, progress, headers)
        summary = summaries(queries, asked.judged)
        source, v2 = asked.source, asked.v2
        if source is not None:
            with progress.phase("V2 tuning grids (offline)"):
                v2.update(v2_tuning(queries, source, asked.judged, summary, opts.k))
            v2.update(v2_health(source))
            v2["index"] = v2_index
            v2["debug_samples"] = source.samples
        result = {
            "kind": "quality",
            "started": started.isoformat(timespec="seconds"),
            "seconds": round(progress.elapsed(), 1),
            "options": _shown_options(opts),
            "machine": {
                "cpus": os.cpu_count(),
                "load_avg": os.getloadavg(),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            "corpus": _corpus_facts(corpus, fingerprint, chunks, made),
            "upload": upload_facts,
            "systems": {
                s.name: {"description": s.description, "refuses": s.refuses, "stage": _is_stage(s)}
                for s in asked.systems
            },
            "summary": summary,
            "per_query": per_query(queries, asked.judged, source.records if source is not None else {}),
            "phases": progress.phases,
        }
        if source is not None:
            result["v2"] = v2
            result["targets"] = evaluate_targets(summary)
        for s in asked.systems:
            if isinstance(s, DenseInProcess):
                result["systems"][s.name]["model"] = s.facts
        if opts.write_results:
            write_results(result, opts)
    finally:
        if served is not None:
            svc.stop(served)
    return result


async def _upload(
    base_url: str, corpus: Corpus, opts: Options, progress: Progress, headers: dict[str, str]
) -> tuple[dict[str, Any], dict[str, list[Chunk]]]:
    """Upload the documents through POST /embed and fetch the chunks stored: the upload's figures, and
    the chunks by knowledge base."""
    with progress.phase("upload through POST /embed"):
        upload_facts = await svc.upload(
            base_url,
            corpus.documents,
            concurrency=opts.upload_concurrency,
            say=progress.say,
            headers=headers,
        )
    with progress.phase("fetch stored chunks"):
        chunks = await svc.fetch_chunks(base_url, corpus.documents, headers=headers)
    n_chunks = sum(len(v) for v in chunks.values())
    if upload_facts["uploaded"]:
        upload_facts["chunks_per_s"] = round(
            n_chunks * upload_facts["uploaded"] / len(corpus.documents) / max(upload_facts["seconds"], 1e-9),
            2,
        )
    return upload_facts, chunks


@dataclass
class _Asked:
    """What the systems answered: each one's judged answers, and /query_v2's debugged source (None
    without V2) with the V2 figures of the timed pass."""

    systems: list[System]
    judged: dict[str, list[Judged]]
    source: V2Debugged | None
    v2: dict[str, Any]


async def _ask(
    base_url: str,
    kbs: dict[str, list[str]],
    chunks: dict[str, list[Chunk]],
    queries: list[Query],
    opts: Options,
    progress: Progress,
    headers: dict[str, str],
) -> _Asked:
    """Every system asked every query; with V2, a timed pass without debug whose latencies are FINAL's."""
    parsed = urlsplit(base_url)
    http = LeanHTTP(parsed.hostname or "127.0.0.1", parsed.port or 80)
    v2: dict[str, Any] = {}
    try:
        systems = make_systems(opts.systems, http, kbs, chunks, opts, progress.say, headers)
        with progress.phase("prepare systems"):
            for system in systems:
                await system.prepare()
        with progress.phase(f"measure {len(queries)} queries x {len(systems)} systems"):
            judged = await measure(systems, queries, progress)
        source = next((s.source for s in systems if isinstance(s, V2Stage)), None)
        if source is not None:
            sample = timed_sample(queries, opts.v2_timed, opts.seed)
            with progress.phase(f"/query_v2 without debug, timed: {len(sample)} queries"):
                plain = V2Client(http, kbs, k=opts.k, debug=False, headers=headers)
                timed = await timed_pass(plain, sample)
            judged[FINAL] = [
                replace(j, latency_ms=timed[q.qid].latency_ms if q.qid in timed else None)
                for q, j in zip(queries, judged[FINAL], strict=True)
            ]
            v2 = {"timed": len(timed), "agreement": agreement(source.records, timed)}
    finally:
        await http.aclose()
    return _Asked(systems, judged, source, v2)


def _shown_options(opts: Options) -> dict[str, Any]:
    """The options as the result shows them: paths as text, the token and the secret masked."""
    return {
        **asdict(opts),
        "data_dir": str(opts.data_dir),
        "out_dir": str(opts.out_dir),
        "token": "***" if opts.token else None,
        "jwt_secret": "***" if opts.jwt_secret else None,
    }


def _corpus_facts(
    corpus: Corpus, fingerprint: str, chunks: dict[str, list[Chunk]], made: dict[str, int]
) -> dict[str, Any]:
    """The result's description of the corpus: knowledge bases, chunks, facts, mutants, queries."""
    kbs = corpus.kbs()
    return {
        "fingerprint": fingerprint,
        "documents": len(corpus.documents),
        "knowledge_bases": {kb: len(ids) for kb, ids in kbs.items()},
        "kb_files": kbs,
        "chunks": {kb: len(v) for kb, v in chunks.items()},
        "facts": corpus.facts,
        "mutants": made,
        "queries": _count_queries(corpus.queries),
    }


V2_INDEX_PHASE = "V2 index: backfill and wait"


def _is_stage(system: System) -> bool:
    return isinstance(system, V2Stage) and system.stage != FINAL


def v2_tuning(
    queries: list[Query],
    source: V2Debugged,
    judged: dict[str, list[Judged]],
    summary: dict[str, dict[str, Any]],
    k: int,
) -> dict[str, Any]:
    """The offline refusal and fusion grids from the recorded debug answers (`tuning.py`)."""
    reranked = judged[STAGE_SYSTEMS["reranked"]]
    cases = []
    fusion_cases = []
    for q, j in zip(queries, reranked, strict=True):
        record = source.records.get(q.qid)
        if record is None:
            continue
        if record.refusal is not None:
            relevant = set(q.relevant)
            cases.append(
                tuning.refusal_case(
                    q.qid,
                    q.answerable,
                    record.refusal,
                    ndcg=ndcg_at_k(j.ranking, relevant, 10) if q.answerable else 0.0,
                    r1=recall_at_k(j.ranking, relevant, 1) if q.answerable else 0.0,
                )
            )
        if q.answerable:
            fusion_cases.append(tuning.fusion_case(q.qid, q.set, q.relevant, record.stages))
    best: dict[str, dict[str, float]] = {}
    recorded: dict[str, dict[str, float]] = {}
    sets = sorted({c.set for c in fusion_cases})
    for set_name in sets:
        per_metric: dict[str, float] = {}
        for metric in ("ndcg_at_10", "recall_at_1"):
            values = [summary[STAGE_SYSTEMS[ch]][set_name][metric] for ch in CHANNEL_STAGES]
            per_metric[metric] = max(v for v in values if v is not None)
        best[set_name] = per_metric
        fused = summary[STAGE_SYSTEMS["fused"]][set_name]
        recorded[set_name] = {"ndcg_at_10": fused["ndcg_at_10"], "recall_at_1": fused["recall_at_1"]}
    return {
        "refusal_grid": tuning.refusal_grid(cases) if cases else None,
        "fusion_grid": tuning.fusion_grid(fusion_cases, best, k=k, recorded=recorded)
        if fusion_cases
        else None,
    }


def v2_health(source: V2Debugged) -> dict[str, Any]:
    """Degraded answers, channel errors, reranker fallbacks and missing stages over the debug pass."""
    errors: dict[str, int] = {}
    degraded = fell_back = 0
    debug_ms = []
    for record in source.records.values():
        degraded += record.degraded
        fell_back += record.rerank_fell_back
        debug_ms.append(record.debug_ms)
        for channel in record.channel_errors:
            errors[channel] = errors.get(channel, 0) + 1
    return {
        "queries": len(source.records),
        "degraded": degraded,
        "channel_errors": errors,
        "rerank_fell_back": fell_back,
        "debug_p50_ms": percentile(debug_ms, 50),
        "debug_p95_ms": percentile(debug_ms, 95),
    }


def _count_queries(queries: list[Query]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in queries:
        out[f"{q.set}/{q.kind}"] = out.get(f"{q.set}/{q.kind}", 0) + 1
    return out


def write_results(result: dict[str, Any], opts: Options) -> None:
    """bench-results/quality-<UTC>.json and quality-latest.{json,md}."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"quality{('-' + opts.tag) if opts.tag else ''}"
    save_json(opts.out_dir / f"{name}-{stamp}.json", result)
    save_json(opts.out_dir / f"{name}-latest.json", result)
    (opts.out_dir / f"{name}-latest.md").write_text(markdown(result))


def run(opts: Options) -> int:
    """Entry point: prints the markdown report; exit 0, or 2 when the run cannot be done as asked."""
    progress = Progress()
    try:
        result = asyncio.run(run_async(opts, progress))
    except (SetupError, SystemUnavailable, V2IndexError, FileNotFoundError) as exc:
        print(f"scripts/bench quality: {exc}", file=sys.stderr)
        return 2
    print(markdown(result))
    return 0
