"""HTTP measurements against the running service: latency with recall, throughput, the fan-out."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from app.clients.http import build_http_client
from benchmarks.http import LeanHTTP
from benchmarks.recall import Judgement, VisibleRows, judge
from benchmarks.stats import parse_server_timing, summarize


@dataclass(frozen=True)
class Scenario:
    """An allow-list and who asks: the caller's token user, and an optional `entity_id`."""

    name: str
    requested: int  # files asked for (the list may be shorter at small scale)
    file_ids: list[str]
    user: str
    entity_id: str | None
    visible_owners: list[str]  # namespaces whose rows the caller may read

    def body(self, query: str, k: int) -> dict[str, Any]:
        """The `/query_multiple` request body."""
        body: dict[str, Any] = {"query": query, "file_ids": self.file_ids, "k": k}
        if self.entity_id:
            body["entity_id"] = self.entity_id
        return body


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange: status, client-observed milliseconds, Server-Timing entries, body."""

    status: int
    client_ms: float
    timing: dict[str, float | str]
    content: bytes

    def pairs(self) -> list[tuple[str, float]]:
        """[(chunk id, distance)] of a rag_api answer; empty for 404 or anything else."""
        if self.status != 200:
            return []
        data = json.loads(self.content)
        return [(str(doc.get("id")), float(dist)) for doc, dist in data]


class Client:
    """Requests as a namespace's user over the lean client (default) or httpx, timed one by one."""

    def __init__(
        self, base_url: str, tokens: dict[str, str], *, kind: str = "lean", max_connections: int = 1024
    ) -> None:
        url = httpx.URL(base_url)
        self.kind = kind
        self.lean = LeanHTTP(url.host, url.port or 80, max_connections) if kind == "lean" else None
        self.http = (
            None
            if kind == "lean"
            else build_http_client(
                base_url=base_url,
                timeout_s=120.0,
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
            )
        )
        self.headers = {
            user: {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            for user, token in tokens.items()
        }

    async def _send(
        self, method: str, path: str, content: bytes, headers: dict[str, str]
    ) -> tuple[int, str | None, bytes]:
        if self.lean is not None:
            r = await self.lean.request(method, path, content, headers)
            return r.status, r.headers.get("server-timing"), r.content
        assert self.http is not None
        response = await self.http.request(method, path, content=content or None, headers=headers)
        return response.status_code, response.headers.get("server-timing"), response.content

    async def post(self, path: str, body: dict[str, Any], user: str) -> Reply:
        """POST JSON as `user` and time it (encoding the body is outside the timed span)."""
        content = json.dumps(body).encode()
        t0 = time.perf_counter()
        status, timing, payload = await self._send("POST", path, content, self.headers[user])
        elapsed = (time.perf_counter() - t0) * 1000
        return Reply(status, elapsed, parse_server_timing(timing), payload)

    async def health_floor(self, n: int = 50) -> dict[str, float]:
        """Latency of `GET /health`: what HTTP and this client cost before any search work."""
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await self._send("GET", "/health", b"", {})
            samples.append((time.perf_counter() - t0) * 1000)
        return summarize(samples)

    async def aclose(self) -> None:
        """Close the connections."""
        if self.lean is not None:
            await self.lean.aclose()
        if self.http is not None:
            await self.http.aclose()


PRIME_FILE_ID = "bench-prime-no-such-file"


async def prime(client: Client, user: str, texts: Sequence[str], k: int) -> None:
    """Send each query text once, untimed, so the server's query-vector cache holds all of them.

    The allow-list names a file that does not exist: the server embeds (and caches) the text, and
    the search itself has nothing to scan, whatever path the configuration would choose.
    """
    for text in texts:
        await client.post("/query_multiple", {"query": text, "file_ids": [PRIME_FILE_ID], "k": k}, user)


def _timing_stats(replies: Sequence[Reply]) -> dict[str, Any]:
    """Percentiles of each numeric Server-Timing entry, and counts of each text entry (the path)."""
    numeric: dict[str, list[float]] = {}
    labels: dict[str, Counter[str]] = {}
    for reply in replies:
        for name, value in reply.timing.items():
            if isinstance(value, float):
                numeric.setdefault(name, []).append(value)
            elif value:
                labels.setdefault(name, Counter())[value] += 1
    out: dict[str, Any] = {name: summarize(values) for name, values in numeric.items()}
    for name, counts in labels.items():
        out[name] = dict(counts)
    out["coverage"] = round(sum(1 for r in replies if r.timing) / max(len(replies), 1), 3)
    return out


def _judgements(judged: Sequence[Judgement]) -> dict[str, Any]:
    """Mean and minimum recall, short answers, foreign rows and the distance check."""
    if not judged:
        return {}
    recalls = [j.recall for j in judged]
    return {
        "mean": round(float(np.mean(recalls)), 4),
        "min": round(float(np.min(recalls)), 4),
        "queries_below_1": sum(1 for r in recalls if r < 1.0),
        "short_answers": sum(1 for j in judged if j.returned < j.expected),
        "foreign_rows": sum(j.foreign for j in judged),
        "max_distance_error": float(f"{max(j.max_distance_error for j in judged):.3g}"),
    }


async def measure_latency(
    client: Client,
    scenario: Scenario,
    rows: VisibleRows,
    texts: Sequence[str],
    vectors: np.ndarray,
    *,
    timed: int,
    k: int,
    offset: int = 0,
    warmup: int = 3,
) -> dict[str, Any]:
    """Sequential `/query_multiple` calls: client and server latency, recall@k of every answer."""
    for i in range(warmup):
        await client.post(
            "/query_multiple", scenario.body(texts[(offset + i) % len(texts)], k), scenario.user
        )
    replies: list[Reply] = []
    picks: list[int] = []
    for i in range(timed):
        q = (offset + i) % len(texts)
        replies.append(await client.post("/query_multiple", scenario.body(texts[q], k), scenario.user))
        picks.append(q)
    judged = [judge(rows, vectors[q], reply.pairs(), k) for q, reply in zip(picks, replies, strict=True)]
    return {
        "files": len(scenario.file_ids),
        "requested_files": scenario.requested,
        "visible_rows": len(rows),
        "entity_id": scenario.entity_id,
        "client_ms": summarize([r.client_ms for r in replies]),
        "server_timing": _timing_stats(replies),
        "statuses": dict(Counter(str(r.status) for r in replies)),
        "recall": _judgements(judged),
    }


async def measure_throughput(
    client: Client,
    scenario: Scenario,
    texts: Sequence[str],
    *,
    concurrency: int,
    seconds: float,
    k: int,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """`concurrency` closed-loop workers for `warmup + seconds`; counts replies completed in the window."""
    counter = iter(range(10**9))
    start = time.perf_counter()
    window_start, window_end = start + warmup, start + warmup + seconds
    replies: list[Reply] = []

    async def worker() -> None:
        while time.perf_counter() < window_end:
            i = next(counter)
            reply = await client.post(
                "/query_multiple", scenario.body(texts[i % len(texts)], k), scenario.user
            )
            if window_start <= time.perf_counter() <= window_end:
                replies.append(reply)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    ok = sum(1 for r in replies if r.status in (200, 404))
    return {
        "concurrency": concurrency,
        "window_s": seconds,
        "completed": len(replies),
        "errors": len(replies) - ok,
        "req_per_s": round(len(replies) / seconds, 2),
        "client_ms": summarize([r.client_ms for r in replies]),
        "server_timing": _timing_stats(replies),
    }


async def measure_fanout(
    client: Client,
    scenario: Scenario,
    rows: VisibleRows,
    texts: Sequence[str],
    vectors: np.ndarray,
    *,
    reps: int,
    k_per_file: int,
    top: int,
    offset: int = 0,
) -> dict[str, Any]:
    """LibreChat's pattern: one `/query` per file, all at once, merged by distance, best `top` kept."""
    walls: list[float] = []
    cpus: list[float] = []
    server_sums: list[float] = []
    statuses: Counter[str] = Counter()
    judged: list[Judgement] = []
    for rep in range(reps + 1):  # rep 0 opens the connections and is not counted
        q = (offset + rep) % len(texts)
        bodies = [{"query": texts[q], "file_id": f, "k": k_per_file} for f in scenario.file_ids]
        if scenario.entity_id:
            for body in bodies:
                body["entity_id"] = scenario.entity_id
        cpu0, t0 = time.process_time(), time.perf_counter()
        replies = await asyncio.gather(*(client.post("/query", b, scenario.user) for b in bodies))
        merged: dict[str, float] = {}
        for reply in replies:
            for chunk_id, dist in reply.pairs():
                merged[chunk_id] = min(dist, merged.get(chunk_id, dist))
        best = sorted(merged.items(), key=lambda kv: kv[1])[:top]
        wall = (time.perf_counter() - t0) * 1000
        if rep == 0:
            continue
        walls.append(wall)
        cpus.append((time.process_time() - cpu0) * 1000)
        totals = [float(r.timing["total"]) for r in replies if isinstance(r.timing.get("total"), float)]
        if totals:
            server_sums.append(sum(totals))
        statuses.update(str(r.status) for r in replies)
        judged.append(judge(rows, vectors[q], best, top))
    return {
        "files": len(scenario.file_ids),
        "requests_per_rep": len(scenario.file_ids),
        "k_per_file": k_per_file,
        "reps": reps,
        "wall_ms": summarize(walls),
        "client_cpu_ms": summarize(cpus),
        "server_total_ms_summed_per_rep": summarize(server_sums),
        "statuses": dict(statuses),
        "recall_of_merged_top": _judgements(judged),
    }
