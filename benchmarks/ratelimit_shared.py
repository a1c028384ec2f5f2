"""What a rate limit shared through PostgreSQL would cost per request, beside the in-process buckets.

    .venv/bin/python -m benchmarks.ratelimit_shared [--requests 4000] [--clients 50]

Starts a throwaway embedded PostgreSQL, then times, per request: `RateLimiter.check` (the buckets
each process holds today) and the statement a shared limiter would need, one UPSERT of a counter
keyed by (limit, client, minute) returning the count, on a pooled connection, sequentially and with
16 requests at once. Nothing of this is used by the service: it is the measurement behind keeping
the limits per replica (docs/scale-out.md).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg

from app.ratelimit import RateLimiter
from app.runtime.postgres import EmbeddedPostgres

TABLE = """
CREATE UNLOGGED TABLE IF NOT EXISTS bench_rate_counts (
    limit_name text NOT NULL, client text NOT NULL, minute bigint NOT NULL, n integer NOT NULL,
    PRIMARY KEY (limit_name, client, minute))
"""
UPSERT = """
INSERT INTO bench_rate_counts AS c (limit_name, client, minute, n) VALUES ($1, $2, $3, 1)
ON CONFLICT (limit_name, client, minute) DO UPDATE SET n = c.n + 1 RETURNING n
"""


def _in_process(requests: int, clients: int) -> list[float]:
    limiter = RateLimiter({"search": 1_000_000})
    times = []
    for i in range(requests):
        t0 = time.perf_counter()
        limiter.check("search", f"user:{i % clients}")
        times.append(time.perf_counter() - t0)
    return times


async def _shared(dsn: str, requests: int, clients: int, parallel: int) -> list[float]:
    pool = await asyncpg.create_pool(dsn, min_size=parallel, max_size=parallel)
    try:
        async with pool.acquire() as conn:
            await conn.execute(TABLE)
        times: list[float] = []

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            async with pool.acquire() as conn:
                await conn.fetchval(UPSERT, "search", f"user:{i % clients}", int(time.time() // 60))
            times.append(time.perf_counter() - t0)

        for start in range(0, requests, parallel):
            await asyncio.gather(*(one(i) for i in range(start, min(start + parallel, requests))))
        return times
    finally:
        await pool.close()


def _line(name: str, times: list[float], wall_s: float) -> str:
    ordered = sorted(times)
    p95 = ordered[int(len(ordered) * 0.95)]
    return (
        f"{name:<30} p50 {statistics.median(times) * 1e3:8.4f} ms   p95 {p95 * 1e3:8.4f} ms"
        f"   {len(times) / wall_s:10.0f} checks/s"
    )


def main() -> None:
    """Run the comparison and print p50 and p95 per request, and checks per second."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-bench-ratelimit-"))
    root.chmod(0o755)  # as root, the embedded server runs as another user
    server = EmbeddedPostgres(root / "postgres")
    info = server.start()
    try:
        t0 = time.perf_counter()
        times = _in_process(args.requests, args.clients)
        print(_line("in process (RateLimiter)", times, time.perf_counter() - t0))
        for parallel in (1, 16):
            t0 = time.perf_counter()
            times = asyncio.run(_shared(info.dsn, args.requests, args.clients, parallel))
            print(_line(f"PostgreSQL UPSERT, {parallel:>2} at once", times, time.perf_counter() - t0))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
