"""`scripts/bench tenants`: search on the workload LibreChat really sends, many Agents and users.

    scripts/bench tenants                      # 200,000 chunks: 300 Agents, 3,000 users
    scripts/bench tenants --chunks 1000000     # the 1M corpus (same tenants, ~30 chunks per file)
    scripts/bench tenants --reuse --json out.json
    scripts/bench tenants --rag-api --previous c670082     # rag_api live, same run (120 questions)

Builds the corpus of `benchmarks.tenants_corpus` (its docstring gives the distributions) in rag_api's
own tables of an embedded PostgreSQL through the main benchmark's COPY, starts the service with its
defaults (`--service-env` adds settings), waits for its vector copy and HNSW index, and sends, over
the lean HTTP client, with every query embedding cached first:
- the target rows, one request after another: the 1,000-file Agent's whole KB in one batch, the
  373-file Agent's whole KB, one attachment of a user (no `entity_id`);
- the LibreChat mix (`--searches` searches: each an Agent's whole KB in batches of <= 1,000 ids with
  its `entity_id`, then 0-10 of the user's attachments without), one request after another, then
  closed-loop at each `--concurrency` for `--tp-seconds`;
- scope probes LibreChat does not send but a client could: the 1,000-file KB without `entity_id` and
  with another Agent's, and attachments mixed with another user's;
- LibreChat's stock fan-out over the 373-file KB: one `/query` (k 5) per file, all at once.
Every answer is judged against an exact NumPy brute force over exactly the rows that request may
see (its allow-list, rows owned by the caller or the named Agent): recall@k, rows outside that set,
and answers with fewer than k rows while k are visible (each fan-out `/query` against its own file).
Prints one table of the targets with today's figure and rag_api's from the committed baseline, and
writes the JSON. With `--rag-api` it measures rag_api v0.9.0 live beside this checkout instead
(`benchmarks.ragapi_measure`). Nothing asserts a speed; the exit code is 1 when a check fails (a
foreign row or a short answer) or the run breaks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.options import parse_env_pairs
from benchmarks.tenants_corpus import TenantOptions, TenantSpec

# rag_api v0.9.0 keeps the embeddings of its last 128 questions (an LRU cache): a run beside it asks
# fewer distinct questions, so every side answers from a warm cache
RAGAPI_QUERY_CACHE = 128
RAGAPI_QUERIES = 120


def parse(argv: list[str]) -> TenantOptions:
    """Options from the command line."""
    d, s = TenantOptions(), TenantSpec()
    p = argparse.ArgumentParser(
        prog="scripts/bench tenants",
        description="Many Agents with skewed knowledge bases and thousands of users with attachments in "
        "rag_api's tables; LibreChat's query mix against ragoverlay, recall of every answer against "
        "brute force, the targets beside rag_api's baseline figures.",
    )
    p.add_argument("--chunks", type=int, default=s.chunks, help="rows (%(default)s; 1000000 for the 1M run)")
    p.add_argument("--agents", type=int, default=s.agents, help="Agents, one namespace each (%(default)s)")
    p.add_argument("--users", type=int, default=s.users, help="users with attachments (%(default)s)")
    p.add_argument("--kb-min", type=int, default=s.kb_min, help="smallest KB in files (%(default)s)")
    p.add_argument("--kb-max", type=int, default=s.kb_max, help="largest KB in files (%(default)s)")
    p.add_argument("--topics", type=int, default=s.topics, help="vector clusters (%(default)s)")
    p.add_argument(
        "--queries",
        type=int,
        default=None,
        help=f"distinct questions ({s.queries}; {RAGAPI_QUERIES} with --rag-api, whose query cache holds "
        f"{RAGAPI_QUERY_CACHE}: more would time its embedding calls)",
    )
    p.add_argument("--seed", type=int, default=s.seed)
    p.add_argument("--k", type=int, default=d.k)
    p.add_argument("--timed", type=int, default=d.timed, help="requests per target row (%(default)s)")
    p.add_argument("--searches", type=int, default=d.searches, help="searches in the mix (%(default)s)")
    p.add_argument("--probes", type=int, default=d.probes, help="requests per scope probe (%(default)s)")
    p.add_argument(
        "--concurrency",
        type=lambda t: [int(x) for x in t.split(",") if x.strip()],
        default=d.concurrency,
        help="closed-loop workers on the mix (default 1,8)",
    )
    p.add_argument("--tp-seconds", type=float, default=d.tp_seconds, help="window per concurrency")
    p.add_argument("--fanout-reps", type=int, default=d.fanout_reps)
    p.add_argument("--reuse", action="store_true", help="keep and reuse the loaded corpus (and its index)")
    p.add_argument("--data-dir", type=Path, default=None, help="data folder (kept); default temporary")
    p.add_argument("--out", type=Path, default=d.out_dir, help="results folder (%(default)s)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON figures here")
    p.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--index-timeout", type=float, default=d.index_timeout)
    _ragapi_arguments(p)
    a = p.parse_args(argv)
    queries = _questions(p, a.queries, a.rag_api, s.queries)
    spec = TenantSpec(a.chunks, a.agents, a.users, a.kb_min, a.kb_max, a.topics, queries, a.seed)
    if not 1 <= spec.kb_min <= spec.kb_max or spec.agents < 1 or spec.users < 1:
        p.error("need at least one Agent and one user, and 1 <= --kb-min <= --kb-max")
    return TenantOptions(
        spec=spec,
        k=a.k,
        timed=a.timed,
        searches=a.searches,
        probes=a.probes,
        concurrency=a.concurrency,
        tp_seconds=a.tp_seconds,
        fanout_reps=a.fanout_reps,
        reuse=a.reuse,
        data_dir=a.data_dir,
        out_dir=a.out,
        json_path=a.json,
        service_env=parse_env_pairs(a.service_env),
        index_timeout=a.index_timeout,
        rag_api=a.rag_api,
        rag_api_git=a.rag_api_git,
        previous=a.previous,
    )


def _ragapi_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rag-api",
        action="store_true",
        help="rag_api v0.9.0 live beside this checkout on the same database and embedding stub, one "
        "client request by request: p50/p95 per side, the ratios, recall, load and foreign CPU",
    )
    p.add_argument(
        "--rag-api-git",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --rag-api: a clone or bare mirror of danny-avila/rag_api to export the pinned release "
        "from (default: a bare clone from GitHub; not needed once ~/.cache/ragoverlay/bench-ragapi holds it)",
    )
    p.add_argument(
        "--previous",
        default=None,
        metavar="REF",
        help="with --rag-api: the previous release (a git ref, e.g. c670082) as a third side, from a "
        "git archive export with its own .venv (cached as scripts/bench ingest-ab does)",
    )


def _questions(p: argparse.ArgumentParser, asked: int | None, rag_api: bool, default: int) -> int:
    """The distinct questions of the run: beside rag_api, no more than its query cache holds."""
    if asked is None:
        return RAGAPI_QUERIES if rag_api else default
    if rag_api and asked > RAGAPI_QUERY_CACHE:
        p.error(
            f"--rag-api with --queries {asked}: rag_api caches {RAGAPI_QUERY_CACHE} question embeddings, "
            f"so its answers would include embedding calls ours never make; use --queries {RAGAPI_QUERIES}"
        )
    return asked


def data_root(opts: TenantOptions) -> tuple[Path, bool]:
    """The run's folder and whether it is temporary (world-traversable for the postgres user)."""
    if opts.data_dir is not None:
        root, temporary = opts.data_dir.resolve(), False
    elif opts.reuse:
        root, temporary = Path(tempfile.gettempdir()) / f"ragoverlay-tenants-{opts.spec.fingerprint()}", False
    else:
        root, temporary = Path(tempfile.mkdtemp(prefix="ragoverlay-tenants-")), True
    marker = root / "corpus.json"
    if marker.exists() and (
        not opts.reuse or json.loads(marker.read_text()).get("fingerprint") != opts.spec.fingerprint()
    ):
        shutil.rmtree(root)  # another spec, or no --reuse: start over
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    return root, temporary


def run(opts: TenantOptions) -> int:
    """Run the benchmark; print the table; write the JSON."""
    from benchmarks import ragapi_measure
    from benchmarks import tenants_report as report
    from benchmarks.embedded import run_on_embedded_postgres
    from benchmarks.progress import Progress
    from benchmarks.run import machine_facts
    from benchmarks.tenants_measure import bench

    if opts.rag_api:
        bench = ragapi_measure.bench

    progress = Progress()
    started = datetime.now(UTC)
    result: dict[str, Any] = {
        "benchmark": "tenants",
        "started_utc": started.isoformat(timespec="seconds"),
        "options": json.loads(json.dumps(asdict(opts), default=str)),
        "machine": machine_facts(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    root, temporary = data_root(opts)
    progress.say(f"data folder {root}{' (temporary)' if temporary else ''}")
    run_on_embedded_postgres(
        root, temporary, progress, result, lambda info: bench(opts, root, info, progress, result)
    )
    if opts.rag_api:
        return _finish_ragapi(opts, started, result)
    result["targets"] = report.targets(result)
    text = json.dumps(result, indent=2, default=str) + "\n"
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    for path in (
        opts.out_dir / f"tenants-{stamp}.json",
        opts.out_dir / "tenants-latest.json",
        opts.json_path,
    ):
        if path is not None:
            path.write_text(text)
    print(report.render(result))
    return 0 if report.checks_passed(result) else 1


def _finish_ragapi(opts: TenantOptions, started: datetime, result: dict[str, Any]) -> int:
    """`--rag-api`: write tenants-ragapi-<UTC>.json (and --json), print the comparison."""
    from benchmarks import ragapi_report

    text = json.dumps(result, indent=2, default=str) + "\n"
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    for path in (opts.out_dir / f"tenants-ragapi-{stamp}.json", opts.json_path):
        if path is not None:
            path.write_text(text)
    if "rag_api" not in result:
        print(f"no comparison: {result.get('error', 'interrupted')}")
        return 1
    print(ragapi_report.render(result))
    return 0 if ragapi_report.checks_passed(result["rag_api"]) else 1


def main(argv: list[str]) -> int:
    """Parse and run."""
    return run(parse(argv))
