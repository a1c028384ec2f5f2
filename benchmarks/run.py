"""One benchmark run: database, corpus, then each service configuration measured in turn."""

from __future__ import annotations

import asyncio
import os
import platform
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import psutil

from benchmarks import corpus as cp
from benchmarks import database as db
from benchmarks import report
from benchmarks.corpus_load import Corpus, data_root, prepare_corpus
from benchmarks.options import Options
from benchmarks.progress import Progress
from benchmarks.recall import VisibleRows
from benchmarks.service import Configuration, ServiceProcess, configurations, make_token
from benchmarks.service_state import db_state, wait_for_copy, wait_for_index, wait_quiet
from benchmarks.workload import Client, Scenario, measure_fanout, measure_latency, measure_throughput, prime


def machine_facts() -> dict[str, Any]:
    """Cores, CPU model, memory, OS and Python."""
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def make_scenarios(opts: Options, layout: cp.Layout) -> list[Scenario]:
    """Own-file allow-lists of each size (nested prefixes of a seeded order), and the mixed cases."""
    rng = np.random.default_rng([opts.seed, 8])
    own = [layout.file_ids[i] for i in rng.permutation(layout.files_of(cp.NAMESPACE_A))]
    other = [layout.file_ids[i] for i in rng.permutation(layout.files_of(cp.NAMESPACE_B))]
    out = [Scenario(f"own-{n}", n, own[:n], cp.NAMESPACE_A, None, [cp.NAMESPACE_A]) for n in opts.lists]
    if opts.mixed:
        n = max(opts.lists)
        half = min(n // 2, len(own), len(other))
        mixed = own[:half] + other[:half]
        out.append(
            Scenario(
                f"entity-mix-{n}", n, mixed, cp.NAMESPACE_A, cp.NAMESPACE_B, [cp.NAMESPACE_A, cp.NAMESPACE_B]
            )
        )
        # same list without entity_id: the agent's half is out of scope and must never appear
        out.append(Scenario(f"no-entity-mix-{n}", n, mixed, cp.NAMESPACE_A, None, [cp.NAMESPACE_A]))
    return out


def distance_profile(rows: VisibleRows, queries: np.ndarray, k: int) -> dict[str, float]:
    """Median exact distances of the queries' 1st and k-th neighbours, and the k-th to (k+1)-th gap."""
    if len(rows) <= k:
        return {}
    firsts, kths, gaps = [], [], []
    for q in queries:
        d = np.partition(rows.distances(q), [0, k - 1, k])
        firsts.append(d[0])
        kths.append(d[k - 1])
        gaps.append(d[k] - d[k - 1])
    return {
        "top1_median": round(float(np.median(firsts)), 4),
        "topk_median": round(float(np.median(kths)), 4),
        "gap_k_to_k1_median": float(f"{np.median(gaps):.3g}"),
    }


@dataclass
class Bench:
    """The state shared by every configuration of one run."""

    opts: Options
    root: Path
    dsn: str
    superuser_dsn: str
    db_user: str
    conn: asyncpg.Connection
    corpus: Corpus
    scenarios: list[Scenario]
    truth: dict[str, VisibleRows]
    progress: Progress
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    calibration: dict[str, Any] = field(default_factory=dict)

    def tokens(self) -> dict[str, str]:
        """A token for each namespace."""
        return {u: make_token(self.secret, u) for u in (cp.NAMESPACE_A, cp.NAMESPACE_B)}

    def service(self, cfg: Configuration, suffix: str = "") -> ServiceProcess:
        """A (not yet started) service process for `cfg`."""
        return ServiceProcess(
            dsn=self.dsn,
            jwt_secret=self.secret,
            data_dir=self.root / "service-data",
            log_path=self.root / f"service-{cfg.name}{suffix}.log",
            settings={"COLLECTION_NAME": self.opts.collection, **cfg.env},
        )

    def scenario(self, name: str) -> Scenario | None:
        """A scenario by name."""
        return next((s for s in self.scenarios if s.name == name), None)

    def largest_own(self) -> Scenario:
        """The own-file scenario with the most files (throughput runs on it)."""
        return max((s for s in self.scenarios if s.name.startswith("own-")), key=lambda s: len(s.file_ids))

    async def run_configuration(self, cfg: Configuration, *, fanout: bool) -> dict[str, Any]:
        """Start the service with `cfg`, measure everything, stop it; then the plan pass."""
        # other work on this machine (tests, builds) skews every figure: note how busy it was
        out: dict[str, Any] = {
            "description": cfg.description,
            "env": cfg.env,
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        }
        opts, progress = self.opts, self.progress
        service = self.service(cfg)
        client: Client | None = None
        try:
            with progress.phase(f"{cfg.name}: service start"):
                out["start_s"] = round(await service.start(opts.start_timeout), 2)
            await self.settle(cfg, service, out)
            client = Client(service.base_url, self.tokens(), kind=self.opts.client)
            out["health_floor_ms"] = await client.health_floor()
            with progress.phase(f"{cfg.name}: prime query cache"):
                await prime(client, cp.NAMESPACE_A, self.corpus.texts, opts.k)
            with progress.phase(f"{cfg.name}: latency + recall"):
                out["latency"] = await self.latency(client)
            if cfg.name != "index":
                with progress.phase(f"{cfg.name}: throughput"):
                    out["throughput"] = await self.throughput(client)
            if fanout:
                out["fanout"] = await self.fanout(client)
        finally:
            if client is not None:
                await client.aclose()
            out["memory"] = await service.stop()
        if opts.explain:
            with progress.phase(f"{cfg.name}: plan capture (auto_explain)"):
                try:
                    out["plans"] = await self.capture_plans(cfg)
                except (RuntimeError, OSError, asyncpg.PostgresError) as exc:
                    out["plans_error"] = f"{type(exc).__name__}: {exc}"
        return out

    async def settle(self, cfg: Configuration, service: ServiceProcess, out: dict[str, Any]) -> None:
        """Wait for the started service's vector copy and HNSW index, prewarm, wait for quiet; into `out`."""
        opts, progress = self.opts, self.progress
        with progress.phase(f"{cfg.name}: wait for the vector copy backfill"):
            out["vector_copy"] = await wait_for_copy(self.conn, service, opts.index_timeout)
        progress.say(f"  vector copy: {out['vector_copy']['summary']}")
        if cfg.env.get("VECTOR_INDEX") != "none":
            with progress.phase(f"{cfg.name}: wait for HNSW index"):
                out["index"] = await wait_for_index(opts, self.conn, service, progress)
            progress.say(f"  HNSW index: {out['index']['summary']}")
            if out["index"].get("valid"):
                if not out["index"].get("pre_existing"):
                    with progress.phase(f"{cfg.name}: CHECKPOINT after the index build"):
                        await db.checkpoint(self.superuser_dsn)
                await self.calibrate(out["index"]["definition"])
        else:
            out["index"] = {
                "summary": "not requested (VECTOR_INDEX=none)",
                "existing": [i["name"] for i in await db.hnsw_indexes(self.conn)],
            }
        with progress.phase(f"{cfg.name}: prewarm the vector copy and its indexes"):
            out["prewarm_pages"] = await db.prewarm(self.superuser_dsn)
        out["quiet_wait_s"] = await wait_quiet(self.conn)
        out["db_state"] = await db_state(self.conn)

    async def latency(self, client: Client) -> dict[str, Any]:
        """Latency and recall of every scenario, by name."""
        opts, latency = self.opts, {}
        for s in self.scenarios:
            data = await measure_latency(
                client,
                s,
                self.truth[s.name],
                self.corpus.texts,
                self.corpus.vectors,
                timed=opts.timed,
                k=opts.k,
            )
            latency[s.name] = data
            st = data["server_timing"].get("total") or data["server_timing"].get("db") or {}
            self.progress.say(
                f"  {s.name:>20}: visible {data['visible_rows']:>7,}  "
                f"client p50 {data['client_ms']['p50']:7.2f} p95 {data['client_ms']['p95']:7.2f} ms  "
                f"server(total|db) p50 {st.get('p50', float('nan')):7.2f} ms"
                f"  recall {data['recall']['mean']:.3f} (min {data['recall']['min']:.2f})"
                f"  statuses {data['statuses']}"
            )
        return latency

    async def throughput(self, client: Client) -> list[dict[str, Any]]:
        """Requests per second over the largest own-file list at each concurrency."""
        opts, target, measured = self.opts, self.largest_own(), []
        for c in opts.concurrency:
            t = await measure_throughput(
                client,
                target,
                self.corpus.texts,
                concurrency=c,
                seconds=opts.tp_seconds,
                k=opts.k,
            )
            measured.append(t)
            self.progress.say(
                f"  {target.name} c={c:>3}: {t['req_per_s']:8.1f} req/s  p50 "
                f"{t['client_ms'].get('p50', 0):.1f} ms  errors {t['errors']}"
            )
        return measured

    async def calibrate(self, index_definition: str) -> None:
        """Once per run: the raw (unfiltered, service-free) recall of the HNSW index on this corpus."""
        if "raw_hnsw_recall" in self.calibration:
            return
        with self.progress.phase("calibration: raw HNSW recall, unfiltered"):
            queries = self.corpus.vectors[: min(30, len(self.corpus.vectors))]
            try:
                self.calibration["raw_hnsw_recall"] = await db.raw_hnsw_recall(
                    self.conn, self.corpus.collection_id, index_definition, queries, self.opts.k
                )
            except asyncpg.PostgresError as exc:
                self.calibration["raw_hnsw_recall"] = {"error": f"{type(exc).__name__}: {exc}"}
        self.progress.say(f"  raw HNSW recall@{self.opts.k}: {self.calibration['raw_hnsw_recall']}")

    async def fanout(self, client: Client) -> dict[str, Any]:
        """LibreChat's per-file fan-out over the fan-out list, and its ratio to the batched call."""
        opts = self.opts
        name = f"own-{opts.fanout_files}"
        scenario = self.scenario(name)
        if scenario is None:  # a list size not among --lists: measure its batched call here too
            base = self.largest_own()
            scenario = Scenario(
                name,
                opts.fanout_files,
                base.file_ids[: opts.fanout_files],
                base.user,
                None,
                base.visible_owners,
            )
            self.truth[name] = await db.visible_rows(
                self.conn, self.corpus.collection_id, scenario.file_ids, scenario.visible_owners
            )
        with self.progress.phase(f"fan-out: {len(scenario.file_ids)} parallel /query x {opts.fanout_reps}"):
            fan = await measure_fanout(
                client,
                scenario,
                self.truth[name],
                self.corpus.texts,
                self.corpus.vectors,
                reps=opts.fanout_reps,
                k_per_file=5,
                top=opts.k,
            )
            batched = await measure_latency(
                client,
                scenario,
                self.truth[name],
                self.corpus.texts,
                self.corpus.vectors,
                timed=max(opts.timed, 30),
                k=opts.k,
            )
        fan["batched_p50_ms"] = batched["client_ms"]["p50"]
        fan["batched_p95_ms"] = batched["client_ms"]["p95"]
        fan["ratio_to_batched_p50"] = round(fan["wall_ms"]["p50"] / max(batched["client_ms"]["p50"], 1e-9), 1)
        self.progress.say(
            f"  fan-out p50 {fan['wall_ms']['p50']:.0f} ms vs batched p50 {fan['batched_p50_ms']:.2f} ms"
            f" -> {fan['ratio_to_batched_p50']:.0f}x"
        )
        return fan

    async def capture_plans(self, cfg: Configuration) -> dict[str, Any]:
        """A second start with auto_explain on for the service's role: the plans of a few queries per list."""
        capture = db.PlanCapture(self.superuser_dsn, self.db_user, self.root / "postgres.log")
        service = self.service(cfg, "-explain")
        plans: dict[str, Any] = {}
        client: Client | None = None
        await capture.enable()
        try:
            await service.start(self.opts.start_timeout)
            await wait_quiet(self.conn)
            client = Client(service.base_url, self.tokens(), kind=self.opts.client)
            texts, per_list = self.corpus.texts, 3
            for s in self.scenarios:
                await client.post("/query_multiple", s.body(texts[0], self.opts.k), s.user)  # embed + connect
                await asyncio.sleep(0.2)
                mark = capture.mark()
                for q in range(1, per_list + 1):
                    await client.post("/query_multiple", s.body(texts[q % len(texts)], self.opts.k), s.user)
                await asyncio.sleep(0.5)  # the server writes its log asynchronously to us
                found = capture.plans_since(mark)
                if found:
                    inner = [p for p in found if not p["wrapper"]] or found
                    slowest = max(inner, key=lambda p: p["duration_ms"])
                    plans[s.name] = {
                        **slowest,
                        "statements_per_request": round(len(found) / per_list, 2),
                        "all": found[: 4 * per_list],
                    }
        finally:
            if client is not None:
                await client.aclose()
            await service.stop()
            await capture.disable()
        return plans


async def bench(opts: Options, root: Path, info: Any, progress: Progress, result: dict[str, Any]) -> None:
    """Everything after the database is up; fills `result` as it goes."""
    conn = await db.connect(info.dsn)
    try:
        result["postgres"] = await db.server_facts(conn)
        corpus, facts = await prepare_corpus(opts, root, info.dsn, info.superuser_dsn, conn, progress)
        with progress.phase("corpus: table statistics"):
            facts["table"] = await db.table_stats(conn)
            facts["rows"] = facts["table"].get("rows", opts.chunks)
            facts["files"] = facts["table"].get("files", opts.files)
        result["corpus"] = facts
        scenarios = make_scenarios(opts, corpus.layout)
        truth: dict[str, VisibleRows] = {}
        with progress.phase("truth: fetch visible rows"):
            for s in scenarios:
                truth[s.name] = await db.visible_rows(
                    conn, corpus.collection_id, s.file_ids, s.visible_owners
                )
        result["scenarios"] = {
            s.name: {
                "files": len(s.file_ids),
                "requested": s.requested,
                "user": s.user,
                "entity_id": s.entity_id,
                "visible_rows": len(truth[s.name]),
                "distances": distance_profile(truth[s.name], corpus.vectors, opts.k),
            }
            for s in scenarios
        }
        state = Bench(
            opts, root, info.dsn, info.superuser_dsn, info.user, conn, corpus, scenarios, truth, progress
        )
        result["throughput_files"] = len(state.largest_own().file_ids)
        cfgs = configurations(opts.configs, opts.service_env)
        fanout_cfg = "auto" if "auto" in opts.configs else opts.configs[0]
        result["configs"] = {}
        result["calibration"] = state.calibration
        for cfg in cfgs:
            if cfg.name == "index" and not any(i["valid"] for i in await db.hnsw_indexes(conn)):
                result["configs"][cfg.name] = {
                    "description": cfg.description,
                    "env": cfg.env,
                    "skipped": "no valid HNSW index in the database",
                }
                progress.say("skipping config 'index': no valid HNSW index exists")
                continue
            progress.say(f"=== configuration '{cfg.name}': {cfg.description}")
            try:
                result["configs"][cfg.name] = await state.run_configuration(
                    cfg, fanout=cfg.name == fanout_cfg
                )
            except (RuntimeError, OSError, asyncpg.PostgresError) as exc:
                # a broken configuration (e.g. the service does not start) must not cost the others
                progress.say(f"configuration '{cfg.name}' failed: {type(exc).__name__}: {exc}")
                result["configs"][cfg.name] = {
                    "description": cfg.description,
                    "env": cfg.env,
                    "error": f"{type(exc).__name__}: {exc}",
                }
    finally:
        await conn.close()


def run(opts: Options) -> int:
    """Run the benchmark; print the report; write JSON and markdown under `opts.out_dir`."""
    from benchmarks.embedded import run_on_embedded_postgres

    progress = Progress()
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    result: dict[str, Any] = {
        "started_utc": started.isoformat(timespec="seconds"),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "machine": machine_facts(),
    }
    result["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    if result["loadavg_at_start"][0] > 0.5:
        progress.say(
            f"warning: load average {result['loadavg_at_start']} before we start anything: other work "
            "on this machine will skew the figures"
        )
    root, temporary = data_root(opts)
    result["data_dir"] = str(root)
    progress.say(f"data folder {root}{' (temporary)' if temporary else ''}")
    code = run_on_embedded_postgres(
        root, temporary, progress, result, lambda info: bench(opts, root, info, progress, result)
    )
    if code == 0 and any(cfg.get("error") for cfg in result.get("configs", {}).values()):
        code = 1
    result["targets"] = report.evaluate_targets(result)
    json_path, md_path = report.write(result, opts.out_dir, stamp)
    print(report.render(result))
    progress.say(f"wrote {json_path} and {md_path} (also latest.json / latest.md)")
    return code
