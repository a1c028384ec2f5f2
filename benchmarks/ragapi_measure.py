"""`scripts/bench tenants --rag-api`: rag_api live beside this checkout, one client, request by request.

Both sides read the same rows of one embedded PostgreSQL and embed through the same OpenAI-compatible
stub on a real socket (it answers each question with its vector from the corpus's query set, so both
search with identical vectors; each side caches it after a first untimed pass). Every row sends the
same request to each side in turn, the side going first rotating (`ragapi_report.side_order`), and
judges every answer against the exact scan (recall@k, rows outside the caller's scope, short
answers). The machine's load average and the CPU other processes used (`foreign`) are read around
every row. The pure arithmetic and the tables are in `benchmarks.ragapi_report`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import ragapi_report as rr
from benchmarks.ingest_measure import tree_cpu_seconds
from benchmarks.progress import Progress
from benchmarks.ragapi_side import RagApiInstall, RagApiProcess, ragapi_environment
from benchmarks.service import ServiceProcess, make_token
from benchmarks.service_state import wait_for_copy, wait_quiet
from benchmarks.stats import summarize
from benchmarks.tenants_corpus import Request, Truth, judgement_summary, kb_batches, make_mix, topical_query
from benchmarks.tenants_measure import World, target_requests
from benchmarks.workload import Client, Reply, prime
from tests.fixtures.fake_providers import FakeProvider

ROWS = (
    ("kb-1000", "an Agent's whole 1,000-file KB (`entity_id`)"),
    ("kb-373", "an Agent's whole 373-file KB"),
    ("attach-1", "one attachment"),
)
SLICE_S = 2.0  # throughput windows alternate between the sides in slices this long


class QueryStandIn(FakeProvider):
    """The OpenAI-compatible stub both sides embed through: a known question gets its corpus vector."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        super().__init__(dims=int(vectors.shape[1]))
        self.reverse_order = False
        self.table = {t: [float(x) for x in v] for t, v in zip(texts, vectors, strict=True)}

    def vector_for(self, text: str, dims: int = 8) -> list[float]:  # type: ignore[override]
        """The question's corpus vector; any other text the fake's deterministic one."""
        return self.table.get(text) or FakeProvider.vector_for(text, dims)


def stand_in_settings(url: str, dims: int) -> dict[str, str]:
    """Our service's settings for the stub (the same provider and model name rag_api is given)."""
    return {
        "EMBEDDINGS_PROVIDER": "openai",
        "EMBEDDINGS_MODEL": "text-embedding-3-small",
        "EMBEDDINGS_DIMENSIONS": str(dims),
        "RAG_OPENAI_API_KEY": "bench-stand-in",
        "RAG_OPENAI_BASEURL": url + "/v1",
    }


def postmaster_pid(root: Path) -> int | None:
    """The embedded PostgreSQL's server process, from its postmaster.pid."""
    for pidfile in (root / "postgres").glob("**/postmaster.pid"):
        try:
            return int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            continue
    return None


@dataclass
class Machine:
    """Reads the machine's busy CPU and the run's own process trees (client, sides, PostgreSQL)."""

    pids: list[int]
    clk_tck: int = field(default_factory=lambda: os.sysconf("SC_CLK_TCK"))

    def sample(self) -> rr.CpuSample:
        """Now."""
        busy = rr.busy_seconds(Path("/proc/stat").read_text(), self.clk_tck)
        own = sum(tree_cpu_seconds(p) for p in self.pids)
        return rr.CpuSample(busy, own, time.perf_counter())

    def around(self, before: rr.CpuSample) -> dict[str, Any]:
        """The foreign CPU since `before`, and the load average now."""
        return {
            "cpu": rr.foreign_cpu(before, self.sample()),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        }


@dataclass
class Sides:
    """The clients of both sides, their processes and the world they are judged in."""

    w: World
    clients: dict[str, Client]
    pids: dict[str, int]
    machine: Machine
    progress: Progress

    def pairs(self, label: str, query: int, reply: Reply) -> list[tuple[str, float]]:
        """[(row id, distance)] of an answer: rag_api's documents carry no row id, so each is found
        by its file and distance (`resolve`); ours carry it."""
        return resolve(self.w.truth, self.w.qvecs[query], reply) if label == rr.RAGAPI else reply.pairs()

    def judged(self, label: str, requests: Sequence[Request], replies: Sequence[Reply]) -> dict[str, Any]:
        """Client latency, statuses and the judgement of one side's answers."""
        w = self.w
        judged = [
            w.truth.judge(r, w.qvecs[r.query], self.pairs(label, r.query, reply), w.opts.k)
            for r, reply in zip(requests, replies, strict=True)
        ]
        w.judged.extend(judged)
        return {
            "client_ms": summarize([r.client_ms for r in replies]),
            "statuses": {
                str(s): sum(1 for r in replies if r.status == s) for s in {r.status for r in replies}
            },
            "recall": judgement_summary(judged),
        }


# a reported distance matches a row of its file when they differ by less than this (float32 sums)
MATCH_EPS = 1e-4


def resolve(truth: Truth, query: np.ndarray, reply: Reply) -> list[tuple[str, float]]:
    """rag_api's answer as [(row id, distance)]: each document is the row of its `file_id` whose exact
    distance to `query` is nearest the reported one; a document matching none within `MATCH_EPS`
    gets an id no scope holds (it is counted as foreign)."""
    if reply.status != 200:
        return []
    q = np.asarray(query, dtype=np.float64)
    q = q / max(float(np.linalg.norm(q)), 1e-30)
    out: list[tuple[str, float]] = []
    for doc, reported in json.loads(reply.content):
        file_id = str((doc.get("metadata") or {}).get("file_id"))
        rows = truth.rows_of.get(file_id, [])
        found = f"unmatched:{file_id}"
        if rows:
            v = truth.vectors[rows].astype(np.float64)
            dist = 1.0 - (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-30)) @ q
            best = int(np.argmin(np.abs(dist - float(reported))))
            if abs(float(dist[best]) - float(reported)) < MATCH_EPS:
                found = str(truth.ids[rows[best]])
        out.append((found, float(reported)))
    return out


async def latency_row(s: Sides, name: str, title: str) -> dict[str, Any]:
    """One target row: each request to every side in turn, one after another."""
    w, labels = s.w, list(s.clients)
    requests = target_requests(w, name, w.opts.timed)
    for r in requests[:3]:  # untimed: connections open, caches as in steady use
        for label in labels:
            await s.clients[label].post("/query_multiple", r.body(w.texts, w.opts.k), r.user)
    replies: dict[str, list[Reply]] = {label: [] for label in labels}
    before = s.machine.sample()
    for i, r in enumerate(requests):
        for label in rr.side_order(i, labels):
            replies[label].append(
                await s.clients[label].post("/query_multiple", r.body(w.texts, w.opts.k), r.user)
            )
    row = {"name": name, "title": title, **s.machine.around(before)}
    row["sides"] = {label: s.judged(label, requests, replies[label]) for label in labels}
    return row


async def _closed_loop(
    client: Client, w: World, mix: Sequence[Request], start: int, concurrency: int, seconds: float
) -> list[tuple[int, Reply]]:
    """`concurrency` workers over the mix for `seconds`, from mix position `start`."""
    counter = iter(range(start, 10**9))
    end = time.perf_counter() + seconds
    kept: list[tuple[int, Reply]] = []

    async def worker() -> None:
        while time.perf_counter() < end:
            i = next(counter) % len(mix)
            reply = await client.post("/query_multiple", mix[i].body(w.texts, w.opts.k), mix[i].user)
            if time.perf_counter() <= end:
                kept.append((i, reply))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return kept


async def throughput_row(s: Sides, concurrency: int) -> dict[str, Any]:
    """LibreChat's KB mix at `concurrency`: the sides take turns in slices of `SLICE_S`."""
    w, labels = s.w, list(s.clients)
    mix = make_mix(w.tenants, w.query_topics, w.opts.searches, w.opts.spec.seed)
    slices = max(1, round(w.opts.tp_seconds / SLICE_S))
    kept: dict[str, list[tuple[int, Reply]]] = {label: [] for label in labels}
    for label in labels:  # warm-up slice, not kept
        await _closed_loop(s.clients[label], w, mix, 0, concurrency, 0.5)
    before = s.machine.sample()
    for i in range(slices):
        for label in rr.side_order(i, labels):
            kept[label] += await _closed_loop(s.clients[label], w, mix, i * 97, concurrency, SLICE_S)
    row = {"concurrency": concurrency, "window_s": slices * SLICE_S, **s.machine.around(before), "sides": {}}
    for label in labels:
        pairs = sorted(kept[label], key=lambda p: p[0])
        replies = [r for _, r in pairs]
        row["sides"][label] = {
            "req_per_s": round(len(pairs) / (slices * SLICE_S), 1),
            "errors": sum(1 for r in replies if r.status not in (200, 404)),
            **s.judged(label, [mix[i] for i, _ in pairs], replies),
        }
    return row


async def _timed_cpu(
    s: Sides, label: str, call: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[Any, float, float]:
    """The first call's result and wall ms, and the CPU ms per call of the side's process tree and
    PostgreSQL's over `repeat` calls (the kernel counts CPU in 10 ms ticks: one 5 ms call reads 0 or 10)."""
    pids = [s.pids[label], s.pids["postgres"]]
    cpu0, t0 = sum(tree_cpu_seconds(p) for p in pids), time.perf_counter()
    out = await call()
    wall = (time.perf_counter() - t0) * 1000
    for _ in range(repeat - 1):
        await call()
    return out, wall, (sum(tree_cpu_seconds(p) for p in pids) - cpu0) * 1000 / repeat


async def fanout_row(s: Sides) -> dict[str, Any]:
    """LibreChat's stock file_search against rag_api (one `/query` per file, k 5, all at once, merged)
    beside one `/query_multiple` to this checkout, back to back, the side going first rotating."""
    w, t = s.w, s.w.tenants
    rng = np.random.default_rng([w.opts.spec.seed, 105])
    agent = t.agent_with(373)
    labels = list(s.clients)
    walls: dict[str, list[float]] = {label: [] for label in labels}
    cpus: dict[str, list[float]] = {label: [] for label in labels}
    judged: dict[str, list[Any]] = {label: [] for label in labels}
    before = s.machine.sample()
    for rep in range(w.opts.fanout_reps + 1):  # rep 0 opens the connections and is not counted
        user = int(rng.integers(0, len(t.user_ids)))
        q = topical_query(rng, t.agent_topics[agent], w.query_topics)
        whole = kb_batches(t, agent, user, q, rep)[0]
        for label in rr.side_order(rep, labels):
            repeat = 1 if label == rr.RAGAPI else rr.CPU_REPEAT
            best, wall, cpu = await _timed_cpu(s, label, _kb_call(s, label, whole), repeat)
            if rep:
                walls[label].append(wall)
                cpus[label].append(cpu)
                judged[label].append(w.truth.judge(whole, w.qvecs[q], best, w.opts.k))
    row: dict[str, Any] = {
        "files": len(t.agent_files[agent]),
        "reps": w.opts.fanout_reps,
        **s.machine.around(before),
    }
    row["sides"] = {
        label: {
            "wall_ms": summarize(walls[label]),
            "cpu_ms": summarize(cpus[label]),
            "recall": judgement_summary(judged[label]),
        }
        for label in walls
    }
    return row


def _kb_call(s: Sides, label: str, whole: Request) -> Callable[[], Awaitable[list[tuple[str, float]]]]:
    """A KB query as each side is asked it: rag_api LibreChat's stock fan-out, this one batched call."""
    w = s.w

    async def call() -> list[tuple[str, float]]:
        if label == rr.RAGAPI:
            return await _fan_out(s.clients[label], w, whole)
        reply = await s.clients[label].post("/query_multiple", whole.body(w.texts, w.opts.k), whole.user)
        return reply.pairs()

    return call


async def _fan_out(client: Client, w: World, whole: Request) -> list[tuple[str, float]]:
    """What LibreChat's file_search does: `/query` per file, concurrently, merged by distance."""
    body: dict[str, Any] = {"query": w.texts[whole.query], "k": 5, "entity_id": whole.entity_id}
    replies = await asyncio.gather(
        *(client.post("/query", {**body, "file_id": f}, whole.user) for f in whole.file_ids)
    )
    merged: dict[str, float] = {}
    for reply in replies:
        for chunk_id, dist in resolve(w.truth, w.qvecs[whole.query], reply):
            merged[chunk_id] = min(dist, merged.get(chunk_id, dist))
    return sorted(merged.items(), key=lambda kv: kv[1])[: w.opts.k]


async def compare(s: Sides) -> dict[str, Any]:
    """Every row of the comparison, with the machine's figures beside each and over all of it."""
    out: dict[str, Any] = {"latency": [], "throughput": []}
    before = s.machine.sample()
    for name, title in ROWS:
        with s.progress.phase(f"rag_api and this: {name}"):
            out["latency"].append(await latency_row(s, name, title))
        s.progress.say(f"  {rr.latency_table(out['latency'][-1:]).splitlines()[-1]}")
    for c in [c for c in s.w.opts.concurrency if c > 1] or [8]:
        with s.progress.phase(f"rag_api and this: the KB mix at concurrency {c}"):
            out["throughput"].append(await throughput_row(s, c))
    with s.progress.phase("rag_api and this: stock fan-out against one batched call"):
        out["fanout"] = await fanout_row(s)
    out["cpu"] = rr.foreign_cpu(before, s.machine.sample())
    return out


def this_commit() -> str:
    """The checkout's commit (with `+dirty` when it has uncommitted changes)."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


async def with_ragapi(
    install: RagApiInstall,
    root: Path,
    info: Any,
    w: World,
    ours: dict[str, tuple[Client, int]],
    secret: str,
    stand_in: QueryStandIn,
    conn: Any,
    progress: Progress,
) -> dict[str, Any]:
    """Start rag_api on the run's database with our JWT secret, prime its query cache, compare with
    `ours` (label: client and process id), stop it."""
    first = ours[rr.THIS][0]
    env = ragapi_environment(info.dsn, secret, stand_in.url + "/v1", w.opts.collection, 0)
    side = RagApiProcess(install, env, root / "ragapi.log")
    out: dict[str, Any] = {"install": install.facts(), "this_commit": this_commit()}
    client: Client | None = None
    try:
        with progress.phase("rag_api: start"):
            out["start_s"] = round(await side.start(), 2)
        with progress.phase("rag_api: ANALYZE after its btree indexes"):
            # its start-up creates an expression index on cmetadata->>'file_id'; without statistics
            # for that expression the planner scans the whole table for a KB (3-5x slower), which
            # a deployment's autoanalyze would not leave for long: rag_api gets its best case
            await conn.execute("ANALYZE langchain_pg_embedding")
            out["quiet_wait_s"] = await wait_quiet(conn)
        client = Client(side.base_url, {u: h["Authorization"].split()[1] for u, h in first.headers.items()})
        with progress.phase("rag_api: prime its query cache"):
            for text in w.texts:
                await client.post(
                    "/query_multiple",
                    {"query": text, "file_ids": ["bench-prime"], "k": 1},
                    w.tenants.user_ids[0],
                )
        pg = postmaster_pid(root)
        pids = {rr.RAGAPI: side.pid, **{label: pid for label, (_, pid) in ours.items()}}
        machine = Machine([os.getpid(), *pids.values(), *([pg] if pg else [])])
        pids["postgres"] = pg or os.getpid()
        clients = {rr.RAGAPI: client, **{label: c for label, (c, _) in ours.items()}}
        embeds_before = len(stand_in.requests)
        out.update(await compare(Sides(w, clients, pids, machine, progress)))
        out["stub_requests_while_measuring"] = len(stand_in.requests) - embeds_before
    finally:
        if client is not None:
            await client.aclose()
        out["memory"] = await side.stop()
    return out


async def bench(opts: Any, root: Path, info: Any, progress: Progress, result: dict[str, Any]) -> None:
    """`--rag-api`: the corpus; with `--previous` that release alone first (its migrations); this
    checkout's service on the stub; the previous release again; then rag_api beside them."""
    import secrets

    from benchmarks import database as db
    from benchmarks.ragapi_side import ensure_installed
    from benchmarks.tenants_measure import prepare, start_service

    install = ensure_installed(opts.rag_api_git, progress)
    conn = await db.connect(info.dsn)
    stand_in: QueryStandIn | None = None
    services: dict[str, ServiceProcess] = {}
    clients: dict[str, Client] = {}
    try:
        result["postgres"] = await db.server_facts(conn)
        w, result["corpus"] = await prepare(opts, root, info, conn, progress)
        stand_in = QueryStandIn(w.texts, w.qvecs)
        stand_in.start()
        secret = secrets.token_urlsafe(32)
        settings = {"COLLECTION_NAME": opts.collection, **stand_in_settings(stand_in.url, stand_in.dims)}
        settings.update(opts.service_env)
        result["service"] = {"env": opts.service_env, "embedder": "the stub (OpenAI protocol)"}
        previous = _previous(opts, root, info, secret, settings, progress, result) if opts.previous else None
        if previous is not None:
            await _migrate_alone(previous(), conn, opts, progress)
        services[rr.THIS] = _service(info, secret, settings, root, rr.THIS)
        await start_service(opts, conn, info, services[rr.THIS], progress, result["service"])
        if previous is not None:
            services[rr.PREVIOUS] = previous()
            with progress.phase("previous release: start again"):
                await services[rr.PREVIOUS].start(300.0)
        tokens = {u: make_token(secret, u) for u in w.tenants.user_ids}
        for label, service in services.items():
            clients[label] = Client(service.base_url, tokens)
            with progress.phase(f"prime the query cache of {label}"):
                await prime(clients[label], w.tenants.user_ids[0], w.texts, opts.k)
        ours = {label: (clients[label], _pid(services[label])) for label in services}
        result["rag_api"] = await with_ragapi(install, root, info, w, ours, secret, stand_in, conn, progress)
        if previous is not None:
            result["rag_api"]["previous_commit"] = result["previous"]["commit"]
    finally:
        for client in clients.values():
            await client.aclose()
        for label, service in services.items():
            result.setdefault("memory", {})[label] = await service.stop()
        if stand_in is not None:
            stand_in.stop()
        await conn.close()


def _pid(service: ServiceProcess) -> int:
    assert service.process is not None
    return service.process.pid


def _service(info: Any, secret: str, settings: dict[str, str], root: Path, label: str) -> ServiceProcess:
    """This checkout's service on the run's database (not started)."""
    return ServiceProcess(
        dsn=info.dsn,
        jwt_secret=secret,
        data_dir=root / f"service-data-{label}",
        log_path=root / f"service-{label}.log",
        settings=dict(settings),
    )


def _previous(
    opts: Any,
    root: Path,
    info: Any,
    secret: str,
    settings: dict[str, str],
    progress: Progress,
    result: dict[str, Any],
) -> Callable[[], ServiceProcess]:
    """A maker of the previous release's service: its `git archive` export and own .venv, kept in
    ~/.cache/ragoverlay/bench-ingest-ab (the same cache `scripts/bench ingest-ab` uses)."""
    from benchmarks.ingest_ab_side import ref_checkout

    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{opts.previous}^{{commit}}"],
        cwd=Path(__file__).resolve().parent.parent,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with progress.phase(f"previous release: the export of {opts.previous} ({commit[:10]}) and its .venv"):
        tree = ref_checkout(commit)
    result["previous"] = {"ref": opts.previous, "commit": commit, "tree": str(tree)}

    def make() -> ServiceProcess:
        service = _service(info, secret, settings, root, rr.PREVIOUS)
        service.repo_root, service.python = tree, str(tree / ".venv" / "bin" / "python")
        return service

    return make


async def _migrate_alone(service: ServiceProcess, conn: Any, opts: Any, progress: Progress) -> None:
    """The older release alone first, so its migrations run before ours (as `scripts/bench --ab`)."""
    with progress.phase("previous release: alone, for its migrations and vector copy"):
        await service.start(300.0)
        try:
            await wait_for_copy(conn, service, opts.index_timeout)
        finally:
            await service.stop()
