"""A load run on loopback (`scripts/load`): many concurrent clients against `/query_multiple` and `/embed`.

Starts the service as `scripts/serve` would (embedded PostgreSQL, the offline embedding model,
JWT_SECRET set), uploads a small corpus, then runs `--clients` concurrent clients for `--seconds`:
most search the corpus with `/query_multiple` (half of them with questions never asked before, so
the query embedding is computed, half with repeated ones, as real users do), the others upload new
small files with `/embed`. It prints, per route, the answers by status and the latency percentiles,
the request rate, and the service's memory; any answer other than 200 (or no answer) is an error,
and the run exits 1 when there is one. `--short` is the version the test suite runs.

`--workers 1,2` compares services of 1 and 2 processes (RAG_WORKERS) in one run: each is started
and seeded with the same corpus, then for each `--concurrency` each gets the same search-only load
in turn (`/query_multiple` over `--files-per-query` files); it prints requests per second, p50 and
p95 per row, each process's memory, and the machine's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import ServiceProcess, make_token, terminate_all
from benchmarks.stats import summarize

JWT_SECRET = "load-" + secrets.token_hex(16)
WORDS = (
    "harbour storm lighthouse keeper gull pier tide wind rain boat net fish winter summer "
    "north south shore cliff rope anchor sail engine fuel ledger report census school market"
).split()


def say(message: str) -> None:
    """One line of the run's narrative."""
    print(f"[load {time.strftime('%H:%M:%S')}] {message}", flush=True)


def paragraph(rng: random.Random, sentences: int) -> str:
    """Some plausible text of the run's vocabulary."""
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def auth(user: str) -> dict[str, str]:
    """Authorization header for `user`."""
    return {"Authorization": f"Bearer {make_token(JWT_SECRET, user)}"}


async def seed(base_url: str, user: str, files: int, rng: random.Random) -> list[str]:
    """Upload `files` files of a few chunks each; their ids."""
    ids = []
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as http:
        for n in range(files):
            text = "\n\n".join(paragraph(rng, 12) for _ in range(4))
            file_id = f"corpus-{n}"
            r = await http.post(
                "/embed",
                data={"file_id": file_id},
                files={"file": (f"{file_id}.txt", text.encode(), "text/plain")},
                headers=auth(user),
            )
            if r.status_code != 200:
                raise RuntimeError(f"seeding failed: {r.status_code} {r.text[:200]}")
            ids.append(file_id)
    return ids


async def run_load(
    base_url: str,
    user: str,
    file_ids: list[str],
    clients: int,
    seconds: float,
    upload_share: float,
    per_query: int = 20,
) -> dict[str, Any]:
    """The clients; per route: statuses, latency percentiles (ms), requests per second."""
    # a share of 0 is a search-only run (`--workers`); any other share has at least one uploader
    uploaders = max(1, round(clients * upload_share)) if upload_share > 0 else 0
    repeated = [" ".join(random.sample(WORDS, 4)) for _ in range(50)]
    results: dict[str, list[tuple[int, float]]] = {"query_multiple": [], "embed": []}
    errors: Counter[str] = Counter()
    headers = auth(user)
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base_url, timeout=300.0, limits=limits) as http:

        async def searcher(index: int) -> None:
            rng = random.Random(index)
            while time.monotonic() < deadline:
                if rng.random() < 0.5:
                    query = " ".join(rng.sample(WORDS, 5)) + f" {secrets.token_hex(2)}"
                else:
                    query = rng.choice(repeated)
                chosen = rng.sample(file_ids, min(len(file_ids), per_query))
                body = {"query": query, "file_ids": chosen, "k": 10}
                await _timed(
                    http,
                    "query_multiple",
                    results,
                    errors,
                    "POST",
                    "/query_multiple",
                    json=body,
                    headers=headers,
                )

        async def uploader(index: int) -> None:
            rng = random.Random(10_000 + index)
            n = 0
            while time.monotonic() < deadline:
                n += 1
                file_id = f"load-{index}-{n}-{secrets.token_hex(3)}"
                text = paragraph(rng, 10).encode()
                await _timed(
                    http,
                    "embed",
                    results,
                    errors,
                    "POST",
                    "/embed",
                    data={"file_id": file_id},
                    files={"file": (f"{file_id}.txt", text, "text/plain")},
                    headers=headers,
                )

        started = time.monotonic()
        await asyncio.gather(
            *(uploader(i) for i in range(uploaders)), *(searcher(i) for i in range(clients - uploaders))
        )
        elapsed = time.monotonic() - started
    out: dict[str, Any] = {
        "clients": clients,
        "uploaders": uploaders,
        "seconds": round(elapsed, 1),
        "routes": {},
    }
    for route, samples in results.items():
        out["routes"][route] = {
            "requests": len(samples),
            "per_second": round(len(samples) / elapsed, 1),
            "statuses": {str(k): v for k, v in sorted(Counter(s for s, _ in samples).items())},
            "latency_ms": summarize([ms for _, ms in samples]),
        }
    out["errors"] = sum(1 for samples in results.values() for s, _ in samples if s != 200)
    out["error_kinds"] = dict(errors)
    return out


async def _timed(
    http: httpx.AsyncClient,
    route: str,
    results: dict[str, list[tuple[int, float]]],
    errors: Counter[str],
    method: str,
    url: str,
    **kwargs: Any,
) -> None:
    start = time.perf_counter()
    try:
        response = await http.request(method, url, **kwargs)
        status = response.status_code
        if status != 200:
            errors[f"{route} {status}: {response.text[:120]}"] += 1
    except httpx.HTTPError as exc:
        status = -1
        errors[f"{route}: {type(exc).__name__}"] += 1
    results[route].append((status, (time.perf_counter() - start) * 1000))


def _rss_mib(service: ServiceProcess) -> float | None:
    import psutil

    if service.process is None:
        return None
    try:
        rss: int = psutil.Process(service.process.pid).memory_info().rss
    except psutil.Error:
        return None
    return round(rss / 2**20, 1)


async def run(clients: int, seconds: float, files: int, upload_share: float, root: Path) -> dict[str, Any]:
    """Start the service, seed, load, stop; the report."""
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user
    service = ServiceProcess(
        dsn="",
        jwt_secret=JWT_SECRET,
        data_dir=data_dir,
        log_path=root / "service.log",
        settings={"DATABASE_URL": "", "EMBEDDINGS_PROVIDER": "local"},
    )
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}}
    try:
        say("starting the service (embedded PostgreSQL, offline model)")
        report["service_start_s"] = round(await service.start(within_s=240), 1)
        user = "load-user"
        say(f"uploading {files} files")
        began = time.monotonic()
        file_ids = await seed(service.base_url, user, files, random.Random(7))
        report["seed_s"] = round(time.monotonic() - began, 1)
        report["rss_before_load_mib"] = _rss_mib(service)
        say(f"{clients} clients for {seconds:g} s against /query_multiple and /embed")
        report["load"] = await run_load(service.base_url, user, file_ids, clients, seconds, upload_share)
    finally:
        facts = await service.stop()
        peak = facts.get("vm_hwm_bytes")
        report["service_peak_rss_mib"] = round(peak / 2**20, 1) if peak else None
        terminate_all()
    report["machine"]["loadavg_at_end"] = os.getloadavg()
    return report


LOAD_USER = "load-user"


def process_rss_mib(service: ServiceProcess) -> dict[str, float]:
    """Resident memory of the service's processes (MiB): the parent, and each worker when there are any."""
    import psutil

    if service.process is None:
        return {}
    try:
        parent = psutil.Process(service.process.pid)
        out = {"parent": round(parent.memory_info().rss / 2**20, 1)}
        workers = [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]
        for n, child in enumerate(sorted(workers, key=lambda c: c.pid)):
            out[f"worker{n + 1}"] = round(child.memory_info().rss / 2**20, 1)
    except psutil.Error:
        return {}
    return out


async def compare_workers(
    workers: list[int],
    concurrencies: list[int],
    seconds: float,
    files: int,
    per_query: int,
    root: Path,
    settings: dict[str, str],
) -> dict[str, Any]:
    """Start one service per worker count, seed each, then the search load per concurrency and service."""
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}}
    services: dict[int, ServiceProcess] = {}
    try:
        for count in workers:
            data_dir = root / f"data-{count}"
            data_dir.mkdir(parents=True)
            data_dir.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user
            services[count] = ServiceProcess(
                dsn="",
                jwt_secret=JWT_SECRET,
                data_dir=data_dir,
                log_path=root / f"service-{count}.log",
                settings={**settings, "DATABASE_URL": "", "RAG_WORKERS": str(count)},
            )
            say(f"starting the service with RAG_WORKERS={count}")
            await services[count].start(within_s=240)
            say(f"uploading {files} files")
            ids = await seed(services[count].base_url, LOAD_USER, files, random.Random(7))
        report["rss_mib_after_seed"] = {str(n): process_rss_mib(s) for n, s in services.items()}
        rows: list[dict[str, Any]] = []
        for clients in concurrencies:
            for count, service in services.items():
                say(f"RAG_WORKERS={count}: {clients} clients for {seconds:g} s on /query_multiple")
                load = await run_load(service.base_url, LOAD_USER, ids, clients, seconds, 0.0, per_query)
                figures = load["routes"]["query_multiple"]
                rows.append(
                    {
                        "workers": count,
                        "concurrency": clients,
                        "per_second": figures["per_second"],
                        "p50_ms": figures["latency_ms"].get("p50"),
                        "p95_ms": figures["latency_ms"].get("p95"),
                        "errors": load["errors"],
                        "loadavg_1m": round(os.getloadavg()[0], 2),
                    }
                )
        report["rows"] = rows
        report["rss_mib_after_load"] = {str(n): process_rss_mib(s) for n, s in services.items()}
        report["errors"] = sum(r["errors"] for r in rows)
    finally:
        for service in services.values():
            await service.stop()
    report["machine"]["loadavg_at_end"] = os.getloadavg()
    return report


def print_rows(report: dict[str, Any]) -> None:
    """The comparison as a table."""
    print("workers  concurrency  req/s    p50 ms  p95 ms  errors  load(1m)")
    for r in report.get("rows", []):
        print(
            f"{r['workers']:>7}  {r['concurrency']:>11}  {r['per_second']:>6}  {r['p50_ms']:>6}  "
            f"{r['p95_ms']:>6}  {r['errors']:>6}  {r['loadavg_1m']:>8}"
        )
    for count, rss in report.get("rss_mib_after_load", {}).items():
        print(f"RAG_WORKERS={count}: RSS MiB {rss}")
    machine = report["machine"]
    print(f"load average at start {machine['loadavg_at_start']}, at end {machine['loadavg_at_end']}")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the report; exit 1 on any error answer."""
    parser = argparse.ArgumentParser(prog="scripts/load", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--files", type=int, default=50, help="files in the searched corpus")
    parser.add_argument("--upload-share", type=float, default=0.1, help="share of clients uploading")
    parser.add_argument("--short", action="store_true", help="20 clients for 4 s over 6 files")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--workers", help="compare RAG_WORKERS values, comma-separated (1,2): search only")
    parser.add_argument("--concurrency", default="8,32", help="with --workers: the client counts")
    parser.add_argument("--files-per-query", type=int, default=20, help="file ids in each search")
    args = parser.parse_args(argv)
    if args.workers:
        return _main_workers(args)
    if args.short:
        args.clients, args.seconds, args.files = 20, 4.0, 6
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-load-"))
    root.chmod(0o755)
    try:
        report = asyncio.run(run(args.clients, args.seconds, args.files, args.upload_share, root))
    finally:
        terminate_all()
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    load = report.get("load", {})
    for route, figures in load.get("routes", {}).items():
        lat = figures["latency_ms"]
        say(
            f"{route}: {figures['requests']} requests ({figures['per_second']}/s), statuses "
            f"{figures['statuses']}, p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms"
        )
    errors = load.get("errors", 1)
    say(f"{errors} errors; service peak RSS {report.get('service_peak_rss_mib')} MiB")
    return 0 if errors == 0 else 1


def _main_workers(args: argparse.Namespace) -> int:
    workers = [int(n) for n in args.workers.split(",")]
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-load-"))
    root.chmod(0o755)
    try:
        report = asyncio.run(
            compare_workers(
                workers, concurrencies, args.seconds, args.files, args.files_per_query, root, settings={}
            )
        )
    finally:
        terminate_all()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_rows(report)
    return 0 if report.get("errors") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
