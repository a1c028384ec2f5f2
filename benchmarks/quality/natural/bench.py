"""`scripts/bench quality --natural`: the hand-written questions against V1 and V2 of a real service.

Each corpus is one knowledge base (Agent `agent_nat_<corpus with _>`): its files are uploaded through
`POST /embed` as the corpus says (`html`: the page itself; `man`: the `man -l | col -b` rendering as
`<name>.txt`, text/plain), its namespace gets V2 (`RAG_V2_NAMESPACE_IDS`), the V2 index is backfilled
and waited for, and every question that passes the checker is asked of V1 (`/query_multiple` with
the KB's file ids and `entity_id`, as LibreChat's overlay sends) and of `/query_v2` (one debug request,
read per stage). `--quick`: the dev split, over the gold files plus a seeded sample of 40 other
files per corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from benchmarks.http import LeanHTTP
from benchmarks.options import parse_env_pairs
from benchmarks.progress import Progress
from benchmarks.quality import service as svc
from benchmarks.quality.dataset import Corpus, Document, Query, save_json
from benchmarks.quality.natural import check, scoring, sets
from benchmarks.quality.natural.busy import BUSY_KB, uploading
from benchmarks.quality.natural.latency import summarise_latency, timed_pass
from benchmarks.quality.natural.report import text as report_text
from benchmarks.quality.natural.sets import UNANSWERABLE, CorpusSpec
from benchmarks.quality.natural.text import TextCache
from benchmarks.quality.systems import System, SystemUnavailable, V1Dense
from benchmarks.quality.v2 import V2Client, V2Debugged, v2_systems
from benchmarks.quality.v2index import V2IndexError, wait_for_index
from benchmarks.service import REPO_ROOT

QUICK_OTHERS = 40
SPLITS = ("dev", "test", "all")


@dataclass
class Options:
    """What a natural run can be told (`scripts/bench quality --natural --help`)."""

    corpora: tuple[str, ...] = ()  # empty: every corpus with questions
    split: str = "test"
    quick: bool = False
    # upload the gold files and this many others per corpus (None: every file; --quick: 40)
    others: int | None = None
    seed: int = 42
    k: int = 10
    folder: Path = sets.HERE
    data_dir: Path = REPO_ROOT / "data" / "bench-quality"
    out_dir: Path = REPO_ROOT / "bench-results"
    fresh: bool = False
    service_env: dict[str, str] = field(default_factory=dict)
    v2_wait_s: float = 3 * 3600.0
    tag: str = ""
    write_results: bool = True
    service_url: str | None = None  # measure this running service (its V2 namespaces set) instead
    token: str | None = None  # an admin's bearer token for `service_url`
    # time the questions a second time while uploads (both indexes) run in the same service (busy.py)
    busy: bool = False


class SetupError(RuntimeError):
    """The run cannot be done as asked; the message says what to do."""


def kb_name(corpus: str) -> str:
    """`python-docs` -> `agent_nat_python_docs`."""
    return "agent_nat_" + corpus.replace("-", "_")


def upload_name(spec: CorpusSpec, rel: str) -> str:
    """The file name a corpus file is uploaded under: `library-os.html`; a man page as `ls.1.txt`."""
    if spec.render == "man":
        name = Path(rel).name
        return f"{name.removesuffix('.gz')}.txt"
    return rel.replace("/", "-")


def choose_files(spec: CorpusSpec, gold: set[str], others: int | None, seed: int) -> list[str]:
    """The files to upload: all of them, or the gold files and a seeded sample of `others` others."""
    if others is None or others >= len(spec.files):
        return list(spec.files)
    rest = [f for f in spec.files if f not in gold]
    sample = random.Random(f"{seed}:{spec.name}").sample(rest, min(others, len(rest)))
    return sorted(set(sample) | (gold & set(spec.files)))


def select_items(items: Sequence[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The items of the split (`all`: both)."""
    return [i for i in items if split == "all" or i.get("split") == split]


def build(opts: Options, progress: Progress) -> tuple[Corpus, list[dict[str, Any]], dict[str, Any]]:
    """Documents and queries of the chosen corpora (checked first; failing items are left out), the
    items asked, and per corpus what was taken."""
    names = list(opts.corpora) or [
        n for n in sets.corpus_names(opts.folder) if sets.questions_path(n, opts.folder).is_file()
    ]
    if not names:
        raise SetupError(f"no corpus with questions in {opts.folder}")
    cache = TextCache(opts.out_dir / "natural-texts")
    split = "dev" if opts.quick else opts.split
    corpus = Corpus()
    asked: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    for name in names:
        try:
            spec = sets.load_corpus(name, opts.folder)
        except sets.SetError as exc:
            raise SetupError(str(exc)) from None
        if not spec.root.is_dir():
            raise SetupError(spec.install_hint())
        with progress.phase(f"{name}: check and render"):
            report = check.check_corpus(name, opts.folder, cache, say=progress.say)
        if report.unavailable:
            raise SetupError(report.unavailable)
        good = check.passing(report)
        items = select_items(good, split)
        if not items:
            raise SetupError(f"{name}: no question of split {split!r} passes the checker")
        # the gold files of both splits: the knowledge base is the same whichever split is asked
        gold = {g for i in good for g in i["gold_files"]}
        others = QUICK_OTHERS if opts.quick and opts.others is None else opts.others
        files = choose_files(spec, gold, others, opts.seed)
        kb = kb_name(name)
        for rel in files:
            source = spec.root / rel
            if spec.render == "man":
                path, content_type = cache.cached_path(source, "man"), "text/plain"
            else:
                path, content_type = source, "text/html"
            corpus.documents.append(
                Document(spec.file_id(rel), upload_name(spec, rel), str(path), content_type, kb, str(source))
            )
        for item in items:
            corpus.queries.append(
                Query(
                    qid=item["id"],
                    set=name,
                    kind=item["kind"],
                    text=item["question"],
                    kb=kb,
                    relevant=tuple(spec.file_id(g) for g in item["gold_files"]),
                    answer=item.get("answer") or None,
                    answerable=item["kind"] not in UNANSWERABLE,
                    note=item.get("note") or "",
                )
            )
        asked += items
        facts[name] = {
            "kb": kb,
            "files": len(files),
            "corpus_files": len(spec.files),
            "questions": len(items),
            "excluded": len(select_items(report.items, split)) - len(items),
            "failures": len(report.failures),
        }
    return corpus, asked, facts


async def ask_all(
    systems: Sequence[System], queries: Sequence[Query], progress: Progress
) -> dict[str, list[scoring.Scored]]:
    """Every system answers every query, one query at a time; each answer scored."""
    out: dict[str, list[scoring.Scored]] = {s.name: [] for s in systems}
    for n, q in enumerate(queries, start=1):
        for system in systems:
            outcome = await system.search(q)
            out[system.name].append(
                scoring.score(
                    qid=q.qid,
                    corpus=q.set,
                    kind=q.kind,
                    gold=q.relevant,
                    answer=q.answer,
                    refused=outcome.refused,
                    passage_files=[p.file_id for p in outcome.passages],
                    passage_texts=[p.content for p in outcome.passages],
                )
            )
        if n % 25 == 0:
            progress.say(f"questions: {n}/{len(queries)}")
    return out


async def _ask_and_time(
    systems: Sequence[System],
    queries: Sequence[Query],
    progress: Progress,
    http: LeanHTTP,
    kbs: Mapping[str, Sequence[str]],
    headers: Mapping[str, str],
    k: int,
    busy: tuple[str, Sequence[Document]] | None = None,
) -> tuple[dict[str, list[scoring.Scored]], dict[str, Any], dict[str, Any] | None]:
    """Every system's scored answers, then a timed pass of V1 and /query_v2 in turn (latency.py);
    with `busy` (the service's URL, the documents to copy) the timed pass again while uploads run."""
    with progress.phase(f"ask {len(queries)} questions of V1 and V2"):
        scored = await ask_all(systems, queries, progress)
    with progress.phase(f"time {len(queries)} questions, V1 and V2 in turn"):
        timed = await timed_pass(http, kbs, queries, headers, k=k)
    if busy is None:
        return scored, timed, None
    with progress.phase(f"time {len(queries)} questions again while uploads run"):
        async with uploading(*busy, headers) as running:
            timed_busy = await timed_pass(http, kbs, queries, headers, k=k)
    return scored, timed, {**running.facts, "latency": summarise_latency(timed_busy)}


def per_item(
    queries: Sequence[Query], scored: dict[str, list[scoring.Scored]], source: V2Debugged | None = None
) -> list[dict[str, Any]]:
    """Each question with its gold files, every system's ranking and scores, and /query_v2's refusal
    inputs (for looking into single cases)."""
    rows = []
    for i, q in enumerate(queries):
        record = source.records.get(q.qid) if source is not None else None
        rows.append(
            {
                **({"v2_refusal": asdict(record.refusal)} if record and record.refusal else {}),
                "id": q.qid,
                "corpus": q.set,
                "kind": q.kind,
                "question": q.text,
                "gold": list(q.relevant),
                "systems": {
                    name: {k: v for k, v in asdict(s[i]).items() if k not in ("qid", "corpus", "kind")}
                    for name, s in scored.items()
                },
            }
        )
    return rows


async def run_async(opts: Options, progress: Progress) -> dict[str, Any]:
    """The whole run; returns the result document (also written under `out_dir`)."""
    started = datetime.now(UTC)
    corpus, _items, facts = build(opts, progress)
    kbs = corpus.kbs()
    queries = sorted(corpus.queries, key=lambda q: q.qid)
    random.Random(opts.seed + 6).shuffle(queries)  # corpora and kinds interleave over the run
    service_dir = opts.data_dir / f"natural-service-{corpus.fingerprint()}"
    if opts.fresh and service_dir.exists():
        shutil.rmtree(service_dir)
    env = {
        "RAG_V2_NAMESPACE_IDS": ",".join(sorted([*kbs, *([BUSY_KB] if opts.busy else [])])),
        # every question pays its embedding, as a new question does
        "QUERY_EMBEDDING_CACHE_SIZE": "0",
        **opts.service_env,
    }
    served: svc.Served | None = None
    if opts.service_url:
        base_url, token = opts.service_url.rstrip("/"), opts.token
    else:
        with progress.phase("service start"):
            served = await svc.start(service_dir, env)
        base_url, token = served.base_url, served.token
    headers = svc.auth_headers(token)
    try:
        with progress.phase(f"upload {len(corpus.documents)} files through POST /embed"):
            upload = await svc.upload(base_url, corpus.documents, say=progress.say, headers=headers)
        with progress.phase("V2 index: backfill and wait"):
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120.0) as client:
                v2_index = await wait_for_index(client, kbs, timeout_s=opts.v2_wait_s, say=progress.say)
        parsed = urlsplit(base_url)
        http = LeanHTTP(parsed.hostname or "127.0.0.1", parsed.port or 80)
        try:
            source = V2Debugged(V2Client(http, kbs, k=opts.k, debug=True, headers=headers))
            systems: list[System] = [V1Dense(http, kbs, k=opts.k, headers=headers), *v2_systems(source)]
            for system in systems:
                await system.prepare()
            copies = (base_url, corpus.documents) if opts.busy else None
            scored, timed, busy = await _ask_and_time(
                systems, queries, progress, http, kbs, headers, opts.k, copies
            )
        finally:
            await http.aclose()
    finally:
        if served is not None:
            svc.stop(served)
    summary = scoring.summarise(scored)
    result: dict[str, Any] = {
        "kind": "quality-natural",
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(progress.elapsed(), 1),
        "options": _options_record(opts),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "corpus": {"fingerprint": corpus.fingerprint(), "corpora": facts, "knowledge_bases": kbs},
        "upload": upload,
        "v2_index": v2_index,
        "systems": {s.name: {"description": s.description, "refuses": s.refuses} for s in systems},
        "summary": summary,
        "targets": scoring.targets(summary),
        "v2_debug": {
            "answers": len(source.records),
            "degraded": sum(r.degraded for r in source.records.values()),
            "rerank_fell_back": sum(r.rerank_fell_back for r in source.records.values()),
        },
        "latency": summarise_latency(timed),
        **({"latency_busy": busy} if busy is not None else {}),
        "per_item": per_item(queries, scored, source),
        "phases": progress.phases,
    }
    if opts.write_results:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"quality-natural{('-' + opts.tag) if opts.tag else ''}"
        save_json(opts.out_dir / f"{name}-{stamp}.json", result)
        save_json(opts.out_dir / f"{name}-latest.json", result)
        (opts.out_dir / f"{name}-latest.txt").write_text(report_text(result) + "\n")
    return result


def _options_record(opts: Options) -> dict[str, Any]:
    """The run's options as the result document keeps them (paths as text, no token)."""
    return {
        **asdict(opts),
        "split": "dev" if opts.quick else opts.split,  # --quick asks the dev split
        "folder": str(opts.folder),
        "data_dir": str(opts.data_dir),
        "out_dir": str(opts.out_dir),
        "token": "***" if opts.token else None,
    }


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def parse(argv: Sequence[str]) -> Options:
    """Options from the command line (`--natural` itself is the switch that brought us here)."""
    d = Options()
    p = argparse.ArgumentParser(
        prog="scripts/bench quality --natural",
        description="Hand-written questions over whole Debian documentation corpora "
        "(benchmarks/quality/natural/), each corpus one knowledge base, asked of V1 (/query_multiple) "
        "and V2 (/query_v2 with its stages) of a service started here. Prints right file first, top 5, "
        "answer in a returned passage and refusal rates per corpus and kind, and the targets; writes "
        "bench-results/quality-natural-*.json.",
    )
    p.add_argument("--natural", action="store_true", help="this benchmark (required)")
    p.add_argument("--natural-split", choices=SPLITS, default=d.split, help="questions asked (%(default)s)")
    p.add_argument(
        "--corpora", type=_names, default=d.corpora, help="a,b (default: every corpus with questions)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"dev split, gold files plus a seeded {QUICK_OTHERS} others per corpus (a smoke run)",
    )
    p.add_argument(
        "--others",
        type=int,
        default=None,
        help="upload the gold files and a seeded sample of this many others per corpus (default: all files)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--k", type=int, default=d.k, help="passages per answer, 1..10 (%(default)s)")
    p.add_argument("--data-dir", type=Path, default=d.data_dir, help="the service's data (%(default)s)")
    p.add_argument("--out", type=Path, default=d.out_dir, help="results and rendered texts (%(default)s)")
    p.add_argument("--fresh", action="store_true", help="discard this corpus's service data and upload again")
    p.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--v2-wait", type=float, default=d.v2_wait_s, help="seconds the V2 index may take")
    p.add_argument("--tag", default="", help="name part of the result files")
    p.add_argument(
        "--service-url",
        default=None,
        help="measure this running service instead (its RAG_V2_NAMESPACE_IDS must name the "
        "agent_nat_* knowledge bases); needs --token or --jwt-secret (an admin, for the V2 stages)",
    )
    p.add_argument("--token", default=None, help="an admin's bearer token for --service-url")
    p.add_argument(
        "--busy",
        action="store_true",
        help="time the questions again while the corpus's biggest files are uploaded (both indexes) "
        f"into {BUSY_KB} in the same service, one after another",
    )
    p.add_argument("--jwt-secret", default=None, help="the service's JWT_SECRET: a token with role ADMIN")
    a = p.parse_args(argv)
    if a.service_url and not (a.token or a.jwt_secret):
        p.error("--service-url needs --token or --jwt-secret")
    if not 1 <= a.k <= 10:
        p.error("--k must be 1..10")
    unknown = [c for c in a.corpora if c not in sets.corpus_names()]
    if unknown:
        p.error(f"no such corpus: {', '.join(unknown)} (have {', '.join(sets.corpus_names()) or 'none'})")
    return Options(
        corpora=a.corpora,
        split=a.natural_split,
        quick=a.quick,
        others=a.others,
        seed=a.seed,
        k=a.k,
        data_dir=a.data_dir.resolve(),
        out_dir=a.out.resolve(),
        fresh=a.fresh,
        service_env=parse_env_pairs(a.service_env),
        v2_wait_s=a.v2_wait,
        tag=a.tag,
        service_url=a.service_url,
        token=a.token or (svc.admin_token(a.jwt_secret, role=True) if a.jwt_secret else None),
        busy=a.busy,
    )


def main(argv: Sequence[str]) -> int:
    """Parse, run, print the tables; exit 2 when the run cannot be done as asked."""
    opts = parse(argv)
    progress = Progress()
    try:
        result = asyncio.run(run_async(opts, progress))
    except (SetupError, SystemUnavailable, V2IndexError) as exc:
        print(f"scripts/bench quality --natural: {exc}", file=sys.stderr)
        return 2
    print(report_text(result))
    return 0
