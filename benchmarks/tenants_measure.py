"""`scripts/bench tenants` against a running service: the corpus load, the truth, every measurement."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from app.config import Settings
from benchmarks import corpus as cp
from benchmarks import database as db
from benchmarks.corpus_load import embed_texts
from benchmarks.options import Options
from benchmarks.progress import Progress
from benchmarks.recall import Judgement
from benchmarks.service import ServiceProcess, make_token
from benchmarks.service_state import wait_for_copy, wait_for_index, wait_quiet
from benchmarks.stats import summarize
from benchmarks.tenants_corpus import (
    Request,
    TenantOptions,
    Tenants,
    Truth,
    judgement_summary,
    kb_batches,
    make_mix,
    make_tenants,
    topical_query,
)
from benchmarks.workload import Client, Reply, prime

ALL_ROWS = """
    SELECT uuid::text AS id, custom_id, cmetadata ->> 'user_id' AS owner, embedding
    FROM langchain_pg_embedding WHERE collection_id = $1
"""
BUCKETS = ((1, 10), (11, 100), (101, 373), (374, 1000))


@dataclass
class World:
    """What every measurement needs: the tenants, the questions, the truth and a client."""

    opts: TenantOptions
    tenants: Tenants
    texts: list[str]
    qvecs: np.ndarray
    query_topics: np.ndarray
    truth: Truth
    judged: list[Judgement]  # every judged answer of the run (the recall, foreign and short rows)

    def judge(self, requests: Sequence[Request], replies: Sequence[Reply], k: int) -> list[Judgement]:
        """Judge each reply against its request's scope; remembered for the run's totals."""
        out = [
            self.truth.judge(r, self.qvecs[r.query], reply.pairs(), k)
            for r, reply in zip(requests, replies, strict=True)
        ]
        self.judged.extend(out)
        return out


async def load_corpus(
    opts: TenantOptions,
    info: Any,
    conn: asyncpg.Connection,
    tenants: Tenants,
    centres: np.ndarray,
    text: cp.TextModel,
    progress: Progress,
) -> uuid.UUID:
    """COPY the rows into rag_api's table, then langchain's GIN index, VACUUM ANALYZE, CHECKPOINT."""
    spec, layout = opts.spec, tenants.layout
    collection_id = await db.create_schema(conn, opts.collection)
    vectors = cp.VectorModel(centres, len(layout.file_ids), spec.seed)
    last = [0.0]

    def report(done: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == spec.chunks:
            last[0] = time.perf_counter()
            progress.say(f"  loaded {done:,} / {spec.chunks:,} rows")

    with progress.phase("corpus: generate + COPY"):
        loaded = await db.load_rows(
            info.dsn,
            collection_id,
            cp.batches(layout, opts.batch_rows),
            lambda first, end: cp.file_chunks(layout, text, vectors, first, end, spec.seed),
            parallel=opts.load_parallel,
            report=report,
        )
    if loaded != spec.chunks:
        raise RuntimeError(f"loaded {loaded} rows, expected {spec.chunks}")
    with progress.phase("corpus: GIN index, VACUUM ANALYZE, CHECKPOINT"):
        await conn.execute(db.LANGCHAIN_GIN)
        await conn.execute("VACUUM (ANALYZE) langchain_pg_embedding")
        await conn.execute("ANALYZE langchain_pg_collection")
        await db.checkpoint(info.superuser_dsn)
    return collection_id


async def read_truth(conn: asyncpg.Connection, collection_id: uuid.UUID) -> Truth:
    """Every stored row as the service will read it: id, file, owner and vector."""
    n = await db.row_count(conn, collection_id)
    ids: list[str] = []
    files: list[str] = []
    owners: list[str] = []
    vectors: np.ndarray | None = None
    async with conn.transaction():
        async for r in conn.cursor(ALL_ROWS, collection_id, prefetch=5000):
            v = r["embedding"].to_numpy()
            if vectors is None:
                vectors = np.empty((n, len(v)), dtype=np.float32)
            vectors[len(ids)] = v
            ids.append(r["id"])
            files.append(r["custom_id"])
            owners.append(r["owner"])
    return Truth(ids, files, owners, vectors if vectors is not None else np.zeros((0, 1), np.float32))


async def prepare(
    opts: TenantOptions, root: Path, info: Any, conn: asyncpg.Connection, progress: Progress
) -> tuple[World, dict[str, Any]]:
    """The tenants, the questions and their vectors, the rows in the database, the truth."""
    spec = opts.spec
    with progress.phase("corpus: tenants and text model"):
        tenants = make_tenants(spec)
        text = cp.TextModel(cp.load_vocabulary(), spec.topics, spec.seed)
    cspec = spec.corpus_spec(len(tenants.layout.file_ids))
    with progress.phase("corpus: embed topics and questions"):
        centres, texts, qvecs = await embed_texts(cspec, text, root / "embeddings.npz", progress)
    _, query_topics = cp.query_plan(cspec, text)
    marker = root / "corpus.json"
    collection_id = await db.collection_id_of(conn, opts.collection) if marker.exists() else None
    reused = collection_id is not None and await db.row_count(conn, collection_id) == spec.chunks
    if collection_id is None or not reused:
        collection_id = await load_corpus(opts, info, conn, tenants, centres, text, progress)
        marker.write_text(json.dumps({"fingerprint": spec.fingerprint()}))
    with progress.phase("truth: read every row"):
        truth = await read_truth(conn, collection_id)
    facts = {**tenants.facts(), "reused": reused, "fingerprint": spec.fingerprint(), "rows_read": len(truth)}
    return World(opts, tenants, texts, qvecs, query_topics, truth, []), facts


def target_requests(w: World, name: str, n: int) -> list[Request]:
    """`n` requests of a target row: a whole KB of `name`'s size, or one attachment (`attach-1`)."""
    t, rng = w.tenants, np.random.default_rng([w.opts.spec.seed, 103, len(name)])
    out: list[Request] = []
    for i in range(n):
        user = int(rng.integers(0, len(t.user_ids)))
        if name == "attach-1":
            f = t.user_files[user][int(rng.integers(0, len(t.user_files[user])))]
            q = int(rng.integers(0, len(w.texts)))
            out.append(Request("attach", i, t.user_ids[user], None, (t.layout.file_ids[f],), q))
        else:
            agent = t.agent_with(int(name.split("-")[1]))
            q = topical_query(rng, t.agent_topics[agent], w.query_topics)
            out.extend(kb_batches(t, agent, user, q, i)[:1])
    return out


def probe_requests(w: World, n: int) -> dict[str, list[Request]]:
    """Scope probes: requests whose allow-list names files the caller may not see."""
    t, rng = w.tenants, np.random.default_rng([w.opts.spec.seed, 104])
    agent = t.agent_with(1000)
    kb = tuple(t.layout.file_ids[f] for f in t.agent_files[agent][:1000])
    other_agent = t.agent_ids[(agent + 1) % len(t.agent_ids)]
    out: dict[str, list[Request]] = {"kb-without-entity": [], "kb-other-agent": [], "attach-with-foreign": []}
    for i in range(n):
        user = int(rng.integers(0, len(t.user_ids)))
        other = (
            (user + 1 + int(rng.integers(0, len(t.user_ids) - 1))) % len(t.user_ids)
            if len(t.user_ids) > 1
            else user
        )
        q = topical_query(rng, t.agent_topics[agent], w.query_topics)
        uid = t.user_ids[user]
        out["kb-without-entity"].append(Request("probe", i, uid, None, kb, q))
        out["kb-other-agent"].append(Request("probe", i, uid, other_agent, kb, q))
        mixed = [t.layout.file_ids[f] for f in t.user_files[user] + t.user_files[other]]
        out["attach-with-foreign"].append(Request("probe", i, uid, None, tuple(mixed), q))
    return out


async def sequential(client: Client, w: World, requests: Sequence[Request], warmup: int = 3) -> list[Reply]:
    """One request after another (after `warmup` untimed ones)."""
    k, texts = w.opts.k, w.texts
    for r in requests[:warmup]:
        await client.post("/query_multiple", r.body(texts, k), r.user)
    return [await client.post("/query_multiple", r.body(texts, k), r.user) for r in requests]


def row_summary(
    w: World, requests: Sequence[Request], replies: Sequence[Reply], judged: Sequence[Judgement]
) -> dict[str, Any]:
    """Client and server milliseconds, the paths taken, statuses and the judgements of one row."""
    db_ms = [r.timing["db"] for r in replies if isinstance(r.timing.get("db"), float)]
    return {
        "requests": len(requests),
        "files": summarize([len(r.file_ids) for r in requests]),
        "visible_rows": summarize([float(w.truth.count(r.file_ids, r.owners())) for r in requests]),
        "client_ms": summarize([r.client_ms for r in replies]),
        "server_db_ms": summarize([float(x) for x in db_ms]),
        "paths": dict(Counter(str(r.timing.get("db.desc", "-")) for r in replies)),
        "statuses": dict(Counter(str(r.status) for r in replies)),
        "recall": judgement_summary(judged),
    }


async def measure_rows(client: Client, w: World, progress: Progress) -> dict[str, Any]:
    """The target rows, the mix one by one (by batch size), and the scope probes."""
    out: dict[str, Any] = {}
    # kb-5000: the first batch of 1,000 ids of the largest KB (a fifth of its namespace)
    for name in ("kb-1000", "kb-373", "attach-1", "kb-5000"):
        requests = target_requests(w, name, w.opts.timed)
        replies = await sequential(client, w, requests)
        out[name] = row_summary(w, requests, replies, w.judge(requests, replies, w.opts.k))
        progress.say(f"  {name}: {_line(out[name])}")
    mix = make_mix(w.tenants, w.query_topics, w.opts.searches, w.opts.spec.seed)
    replies = await sequential(client, w, mix)
    judged = w.judge(mix, replies, w.opts.k)
    out["mix"] = row_summary(w, mix, replies, judged)
    progress.say(f"  mix: {_line(out['mix'])}")
    for kind in ("kb", "attach"):
        for lo, hi in BUCKETS:
            picked = [i for i, r in enumerate(mix) if r.kind == kind and lo <= len(r.file_ids) <= hi]
            if picked:
                name = f"mix-{kind}-{lo}-{hi}"
                out[name] = row_summary(
                    w, [mix[i] for i in picked], [replies[i] for i in picked], [judged[i] for i in picked]
                )
    for name, requests in probe_requests(w, w.opts.probes).items():
        replies = await sequential(client, w, requests, warmup=0)
        out[f"probe-{name}"] = row_summary(w, requests, replies, w.judge(requests, replies, w.opts.k))
        progress.say(f"  probe {name}: {_line(out[f'probe-{name}'])}")
    return out


def _line(row: dict[str, Any]) -> str:
    c, rec = row["client_ms"], row["recall"]
    return (
        f"p50 {c.get('p50', 0):.2f} p95 {c.get('p95', 0):.2f} ms, paths {row['paths']}, statuses "
        f"{row['statuses']}, recall min {rec.get('min')} mean {rec.get('mean')}, foreign "
        f"{rec.get('foreign_rows')}, short {rec.get('short_answers')}"
    )


async def throughput(client: Client, w: World, mix: Sequence[Request], concurrency: int) -> dict[str, Any]:
    """Closed-loop workers over the mix for the window; every reply in it judged afterwards."""
    counter = iter(range(10**9))
    start = time.perf_counter()
    window_start, window_end = start + 1.0, start + 1.0 + w.opts.tp_seconds
    kept: list[tuple[int, Reply]] = []

    async def worker() -> None:
        while time.perf_counter() < window_end:
            i = next(counter) % len(mix)
            reply = await client.post("/query_multiple", mix[i].body(w.texts, w.opts.k), mix[i].user)
            if window_start <= time.perf_counter() <= window_end:
                kept.append((i, reply))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    kept.sort(key=lambda pair: pair[0])  # neighbouring scopes share the truth's cache
    requests = [mix[i] for i, _ in kept]
    replies = [reply for _, reply in kept]
    judged = w.judge(requests, replies, w.opts.k)
    return {
        "concurrency": concurrency,
        "window_s": w.opts.tp_seconds,
        "req_per_s": round(len(kept) / w.opts.tp_seconds, 1),
        "errors": sum(1 for r in replies if r.status not in (200, 404)),
        **row_summary(w, requests, replies, judged),
    }


async def fanout(client: Client, w: World, kb373_p50: float | None) -> dict[str, Any]:
    """LibreChat's stock pattern on the 373-file KB: one `/query` (k 5) per file at once, merged."""
    t, rng = w.tenants, np.random.default_rng([w.opts.spec.seed, 105])
    agent = t.agent_with(373)
    walls: list[float] = []
    merged_judged: list[Judgement] = []
    per_file: list[Judgement] = []
    statuses: Counter[str] = Counter()
    for rep in range(w.opts.fanout_reps + 1):  # rep 0 opens the connections and is not counted
        user = int(rng.integers(0, len(t.user_ids)))
        q = topical_query(rng, t.agent_topics[agent], w.query_topics)
        whole = kb_batches(t, agent, user, q, rep)[0]
        singles = [Request("fanout", rep, whole.user, whole.entity_id, (f,), q) for f in whole.file_ids]
        t0 = time.perf_counter()
        body: dict[str, Any] = {"query": w.texts[q], "k": 5, "entity_id": whole.entity_id}
        replies = await asyncio.gather(
            *(client.post("/query", {**body, "file_id": s.file_ids[0]}, s.user) for s in singles)
        )
        merged: dict[str, float] = {}
        for reply in replies:
            for chunk_id, dist in reply.pairs():
                merged[chunk_id] = min(dist, merged.get(chunk_id, dist))
        best = sorted(merged.items(), key=lambda kv: kv[1])[: w.opts.k]
        elapsed = (time.perf_counter() - t0) * 1000
        if rep == 0:
            continue
        walls.append(elapsed)
        statuses.update(str(r.status) for r in replies)
        per_file.extend(w.judge(singles, replies, 5))
        merged_judged.append(w.truth.judge(whole, w.qvecs[q], best, w.opts.k))
    wall = summarize(walls)
    return {
        "files": len(t.agent_files[agent]),
        "reps": w.opts.fanout_reps,
        "wall_ms": wall,
        "statuses": dict(statuses),
        "per_file_recall": judgement_summary(per_file),
        "merged_top_recall": judgement_summary(merged_judged),
        "ratio_to_batched_p50": round(wall["p50"] / kb373_p50, 1) if kb373_p50 and wall.get("n") else None,
    }


async def bench(
    opts: TenantOptions, root: Path, info: Any, progress: Progress, result: dict[str, Any]
) -> None:
    """Everything after the database is up; fills `result` as it goes."""
    conn = await db.connect(info.dsn)
    try:
        result["postgres"] = await db.server_facts(conn)
        w, result["corpus"] = await prepare(opts, root, info, conn, progress)
        progress.say(f"  corpus: {result['corpus']}")
        secret = secrets.token_urlsafe(32)
        service = ServiceProcess(
            dsn=info.dsn,
            jwt_secret=secret,
            data_dir=root / "service-data",
            log_path=root / "service.log",
            settings={"COLLECTION_NAME": opts.collection, **opts.service_env},
        )
        result["service"] = {"env": opts.service_env}
        client: Client | None = None
        try:
            await start_service(opts, conn, info, service, progress, result["service"])
            client = Client(service.base_url, {u: make_token(secret, u) for u in w.tenants.user_ids})
            result["health_floor_ms"] = await client.health_floor()
            with progress.phase("prime the query cache"):
                await prime(client, w.tenants.user_ids[0], w.texts, opts.k)
            with progress.phase("target rows, the mix one by one, probes"):
                result["rows"] = await measure_rows(client, w, progress)
            mix = make_mix(w.tenants, w.query_topics, opts.searches, opts.spec.seed)
            result["throughput"] = []
            with progress.phase("throughput on the mix"):
                for c in opts.concurrency:
                    result["throughput"].append(await throughput(client, w, mix, c))
                    progress.say(f"  c={c}: {result['throughput'][-1]['req_per_s']} req/s")
            with progress.phase("fan-out: 373 parallel /query"):
                result["fanout"] = await fanout(client, w, result["rows"]["kb-373"]["client_ms"].get("p50"))
            result["checks"] = judgement_summary(w.judged)
        finally:
            if client is not None:
                await client.aclose()
            result["service"]["memory"] = await service.stop()
    finally:
        await conn.close()


async def wait_for_namespaces(
    opts: TenantOptions, conn: asyncpg.Connection, progress: Progress
) -> dict[str, Any]:
    """Wait until every namespace large enough for an index of its own has a valid one (or time out)."""
    default_min = Settings.model_fields["hnsw_namespace_min_rows"].default
    min_rows = int(opts.service_env.get("HNSW_NAMESPACE_MIN_ROWS", default_min))
    cap = int(opts.service_env.get("HNSW_NAMESPACE_MAX", Settings.model_fields["hnsw_namespace_max"].default))
    collection_id = await db.collection_id_of(conn, opts.collection)
    if collection_id is None:
        return {"summary": "no collection"}
    t0 = last_say = time.perf_counter()
    while True:
        state = await db.namespace_indexes(conn, collection_id, min_rows)
        wanted = min(state["large"], cap)
        waited = time.perf_counter() - t0
        # the service builds them one after another in the background; none wanted: nothing to wait for
        if state["valid"] >= wanted or waited > opts.index_timeout:
            return {**state, "wanted": wanted, "waited_s": round(waited, 1), "min_rows": min_rows}
        if time.perf_counter() - last_say > 30:
            last_say = time.perf_counter()
            progress.say(f"  namespace indexes: {state['valid']} of {wanted} valid after {waited:.0f} s")
        await asyncio.sleep(2.0)


async def start_service(
    opts: TenantOptions,
    conn: asyncpg.Connection,
    info: Any,
    service: ServiceProcess,
    progress: Progress,
    out: dict[str, Any],
) -> None:
    """Start it; wait for its vector copy and HNSW index; prewarm; wait until the database is quiet."""
    with progress.phase("service: start"):
        out["start_s"] = round(await service.start(300.0), 2)
    with progress.phase("service: vector copy backfill"):
        out["vector_copy"] = await wait_for_copy(conn, service, opts.index_timeout)
    with progress.phase("service: HNSW index"):
        out["index"] = await wait_for_index(
            Options(index_timeout=opts.index_timeout), conn, service, progress
        )
    progress.say(f"  HNSW index: {out['index']['summary']}")
    with progress.phase("service: namespace indexes"):
        out["namespace_indexes"] = await wait_for_namespaces(opts, conn, progress)
    progress.say(f"  namespace indexes: {out['namespace_indexes']}")
    if out["index"].get("valid") and not out["index"].get("pre_existing"):
        await db.checkpoint(info.superuser_dsn)
    out["prewarm_pages"] = await db.prewarm(info.superuser_dsn)
    out["quiet_wait_s"] = await wait_quiet(conn)
    out["loadavg_before_measuring"] = [round(x, 2) for x in os.getloadavg()]
