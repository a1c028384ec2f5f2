"""Scripted fault runs against the real service (`scripts/faults`): bounded, printing what they did and saw.

Each scenario starts what it needs (the service as `python -m app`, an OpenAI-compatible embedding
server of our own, SeaweedFS), breaks something on purpose while clients keep sending requests, and
reports what the clients saw: statuses, latencies, recovery time, memory. A scenario passes when its
checks hold; the run exits 1 when any failed. `--short` is the version the test suite runs.

Scenarios (`--only a,b`):
- `postgres`: SIGKILL to the embedded PostgreSQL under search load: fast 503s with a detail, never a
  500; the service restarts its database itself (same process), searches answer 200 again.
- `embedding`: the embedding server answers normally, then 500s, then hangs, then recovers: uploads
  and searches answer 503 (never 500) while it is broken, and 200 again after.
- `stalls`: hundreds of half-sent requests (headers, or a body, that stop): each is answered 408 and
  closed after REQUEST_HEADER_TIMEOUT_S / REQUEST_BODY_TIMEOUT_S; the service keeps serving.
- `s3`: SeaweedFS killed during uploads and started again: uploads answer 502/503 with a detail
  while it is down (searches go on), and 200 after.
- `datadir`: a second service on the same DATA_DIR refuses to start; after the first is killed
  (SIGKILL, its PostgreSQL left running), a new one adopts the database and serves the same data.

Hooks for the job queue (`JOB_QUEUE_SCENARIOS`): "kill -9 during a large indexing job" and "two
replicas sharing one database, every job run exactly once" are registered there by the job-queue
work; until then they are listed as not available.

This module runs them; the scenarios are in faults_scenarios.py, what they share (parameters, the
service, its metrics) in faults_context.py, the clients in faults_clients.py, and the embedding
server and SeaweedFS they break in faults_upstreams.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.faults_context import FULL, SHORT, Context, Params, rss_mib, say, seed
from benchmarks.faults_scenarios import (
    Result,
    scenario_datadir,
    scenario_embedding,
    scenario_postgres,
    scenario_s3,
    scenario_stalls,
)

# (the names imported `as` themselves: tests/integration/test_faults_weed_ports.py reaches them here)
from benchmarks.faults_upstreams import WEED_COMPONENTS as WEED_COMPONENTS
from benchmarks.faults_upstreams import EmbeddingServer
from benchmarks.faults_upstreams import _weed_ports as _weed_ports
from benchmarks.service import terminate_all

# The job queue's scenarios register here (name -> coroutine function taking the Context):
#   JOB_QUEUE_SCENARIOS["indexing-kill9"] = scenario_indexing_kill9      # kill -9 during a large job
#   JOB_QUEUE_SCENARIOS["replicas"] = scenario_two_replicas_exactly_once  # two replicas, one database
JOB_QUEUE_SCENARIOS: dict[str, Callable[[Context], Awaitable[Result]]] = {}
PLANNED_JOB_QUEUE_SCENARIOS = {
    "indexing-kill9": "kill -9 during a large indexing job (no partial version visible, the job "
    "resumes or parks)",
    "replicas": "two replicas sharing one database, every job run exactly once",
}
SCENARIOS: dict[str, Callable[[Context], Awaitable[Result]]] = {
    "postgres": scenario_postgres,
    "embedding": scenario_embedding,
    "stalls": scenario_stalls,
    "s3": scenario_s3,
    "datadir": scenario_datadir,  # last: it replaces the main service
}


async def run(names: list[str], params: Params, root: Path) -> dict[str, Any]:
    """Start the embedding server and the main service, run the scenarios in order, stop everything."""
    report: dict[str, Any] = {"params": params.__dict__, "scenarios": {}}
    server = EmbeddingServer()
    server.start()
    ctx = Context(root=root, params=params, embeddings=server)
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user that must reach it
    started = time.monotonic()
    try:
        ctx.service = ctx.new_service("service", data_dir)
        say("starting the service (embedded PostgreSQL, scripted embedding server)")
        report["service_start_s"] = round(await ctx.service.start(within_s=180), 1)
        ctx.files = await seed(ctx, 5)
        report["idle_rss_mib"] = rss_mib(ctx.service)
        all_scenarios = {**SCENARIOS, **JOB_QUEUE_SCENARIOS}
        for name in names:
            if name not in all_scenarios:
                say(
                    f"{name}: not available yet ({PLANNED_JOB_QUEUE_SCENARIOS.get(name, 'unknown scenario')})"
                )
                report["scenarios"][name] = {"skipped": "not available"}
                continue
            began = time.monotonic()
            try:
                result = await all_scenarios[name](ctx)
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}", "checks": {"ran to the end": False}}
            result["seconds"] = round(time.monotonic() - began, 1)
            if ctx.service is not None:
                result["service_rss_mib_after"] = rss_mib(ctx.service)
            report["scenarios"][name] = result
            for check, ok in result.get("checks", {}).items():
                say(f"{name}: {'PASS' if ok else 'FAIL'} {check}")
    finally:
        if ctx.service is not None:
            facts = await ctx.service.stop()
            peak = facts.get("vm_hwm_bytes")
            report["service_peak_rss_mib"] = round(peak / 2**20, 1) if peak else None
        terminate_all()
        server.stop()
    report["total_s"] = round(time.monotonic() - started, 1)
    report["passed"] = all(
        all(r.get("checks", {}).values()) for r in report["scenarios"].values() if "skipped" not in r
    )
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the report; exit 1 when a check failed."""
    parser = argparse.ArgumentParser(
        prog="scripts/faults", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--short", action="store_true", help="the short version the test suite runs")
    available = [*SCENARIOS, *PLANNED_JOB_QUEUE_SCENARIOS]
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated, from {', '.join(available)}"
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--slack",
        type=float,
        default=1.0,
        help="stretch the checks' time limits by this factor (a busy or slow machine); default 1",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in available and n not in JOB_QUEUE_SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-faults-"))
    root.chmod(0o755)
    try:
        params = replace(SHORT if args.short else FULL, slack=max(1.0, args.slack))
        report = asyncio.run(run(names, params, root))
    finally:
        terminate_all()
        keep = os.environ.get("FAULTS_KEEP") == "1"
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    say(f"{'all checks passed' if report['passed'] else 'SOME CHECKS FAILED'} in {report['total_s']} s")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
