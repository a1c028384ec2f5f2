"""`scripts/bench --ab REF`: this checkout (B) against a git ref (A), on one corpus and one database.

REF is checked out with `git worktree add --detach` under the run's folder; it runs on this
checkout's virtual environment when both lock files are equal, else on its own (made by its own
`scripts/lib/venv.sh`). The corpus is built once in one embedded PostgreSQL. REF's service starts
first and alone, so its migrations run before any of ours (an older REF never meets, at start-up,
a schema it did not make); then this checkout's alone (it runs the V2 backfill's jobs, which the
other side's code may refuse for good); then REF's again. Both run with EMBEDDED_POSTGRES=false on
that database, and both must take the same search path before anything is timed. One client
then alternates requests between them, A, B, A, B ..., the same query text for both of a pair, for
each row of the workload (1 / 100 / 373 / 1,000 files on /query_multiple, and /query_v2 where both
sides answer it), and prints A and B side by side with the ratio B/A. The worktree is removed at
the end, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks import corpus as cp
from benchmarks import database as db
from benchmarks.corpus_load import data_root, prepare_corpus
from benchmarks.progress import Progress
from benchmarks.recall import VisibleRows, judge
from benchmarks.service import REPO_ROOT, ServiceProcess, make_token, terminate_all
from benchmarks.service_state import wait_for_copy, wait_for_index, wait_quiet
from benchmarks.stats import summarize
from benchmarks.workload import Client, Reply, Scenario, _judgements, _timing_stats, prime

# files in the rows of the A/B table (each cut to what the namespace holds at small sizes)
AB_LISTS = [1, 100, 373, 1000]
LOCK_FILES = ("pyproject.toml", "requirements.lock")
# a ref's Python dependencies install from its locks in minutes; a service starts in seconds
VENV_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Checkout:
    """One side: a label, what it is, the folder its `app` comes from, and its interpreter."""

    label: str
    name: str
    root: Path
    python: str


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd or REPO_ROOT, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def resolve_ref(ref: str) -> str:
    """The commit `ref` names (a branch, a tag, `main`, `HEAD~3` ...)."""
    return _git("rev-parse", "--verify", f"{ref}^{{commit}}")


def same_locks(other: Path, here: Path = REPO_ROOT) -> bool:
    """True when `other` pins exactly our dependencies (it can then run on our .venv)."""
    for name in LOCK_FILES:
        a, b = other / name, here / name
        if not a.is_file() or not b.is_file() or a.read_bytes() != b.read_bytes():
            return False
    return True


def python_for(worktree: Path, progress: Progress) -> tuple[str, str]:
    """The interpreter for `worktree` and how it was chosen (shared .venv, or the ref's own)."""
    if same_locks(worktree):
        return sys.executable, "this checkout's .venv (the lock files are equal)"
    with progress.phase("ab: the ref's own .venv (its lock files differ)"):
        subprocess.run(
            ["bash", "-c", ". scripts/lib/venv.sh; ensure_venv"],
            cwd=worktree,
            check=True,
            timeout=VENV_TIMEOUT_S,
        )
    return str(worktree / ".venv" / "bin" / "python"), "its own .venv (the lock files differ)"


@contextlib.contextmanager
def ref_worktree(commit: str, folder: Path) -> Iterator[Path]:
    """`commit` checked out (detached) in `folder`, removed again on the way out."""
    if folder.exists():
        _remove_worktree(folder)
    _git("worktree", "add", "--detach", str(folder), commit)
    try:
        yield folder
    finally:
        _remove_worktree(folder)


def _remove_worktree(folder: Path) -> None:
    with contextlib.suppress(subprocess.CalledProcessError):
        _git("worktree", "remove", "--force", str(folder))
    if folder.exists():  # not (or no longer) a registered worktree: a plain folder
        shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(subprocess.CalledProcessError):
        _git("worktree", "prune")


def sql_code_differs(commit: str) -> bool:
    """True when the SQL code files (app/store/sql) of `commit` and this checkout differ.

    Each service applies its own code files when their checksums differ from the database's record,
    so the side started last would run its functions for both: the figures would not be A's.
    """
    done = subprocess.run(
        ["git", "diff", "--quiet", commit, "--", "app/store/sql"], cwd=REPO_ROOT, check=False
    )
    return done.returncode != 0


def ab_scenarios(layout: cp.Layout, seed: int, lists: Sequence[int] = AB_LISTS) -> list[Scenario]:
    """Own-file allow-lists of each size, nested prefixes of one seeded order (as the main run's)."""
    import numpy as np

    rng = np.random.default_rng([seed, 8])
    own = [layout.file_ids[i] for i in rng.permutation(layout.files_of(cp.NAMESPACE_A))]
    return [Scenario(f"own-{n}", n, own[:n], cp.NAMESPACE_A, None, [cp.NAMESPACE_A]) for n in lists]


def v2_body(scenario: Scenario, query: str) -> dict[str, Any]:
    """The `/query_v2` request of `scenario` (k 8, the contract's default)."""
    return {"query": query, "file_ids": scenario.file_ids[:1000], "k": 8}


@dataclass
class SideResult:
    """What one side answered in one row."""

    replies: list[Reply] = field(default_factory=list)
    recalls: list[Any] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Client latency, what of it is not the search, Server-Timing entries, statuses and recall."""
        return {
            "client_ms": summarize([r.client_ms for r in self.replies]),
            "overhead_ms": summarize([overhead_ms(r, r.client_ms) for r in self.replies if r.timing]),
            "server_overhead_ms": summarize(
                [overhead_ms(r, float(r.timing["total"])) for r in self.replies if "total" in r.timing]
            ),
            "server_timing": _timing_stats(self.replies),
            "statuses": dict(Counter(str(r.status) for r in self.replies)),
            "recall": _judgements(self.recalls),
        }


def overhead_ms(reply: Reply, elapsed_ms: float) -> float:
    """`elapsed_ms` minus the search's own stages (embedding, connection wait, database)."""
    stages = sum(float(reply.timing.get(name, 0.0)) for name in ("embed", "pool", "db"))
    return elapsed_ms - stages


async def alternate(
    clients: tuple[Client, Client],
    path: str,
    bodies: Sequence[dict[str, Any]],
    user: str,
    *,
    warmup: int = 3,
) -> tuple[SideResult, SideResult]:
    """Each body sent to A then B, in turn (A, B, A, B ...); the first `warmup` pairs are not kept."""
    a, b = SideResult(), SideResult()
    for i, body in enumerate([*bodies[:warmup], *bodies]):
        first = await clients[0].post(path, body, user)
        second = await clients[1].post(path, body, user)
        if i >= warmup:
            a.replies.append(first)
            b.replies.append(second)
    return a, b


def ratio(a: float | None, b: float | None) -> str:
    """B/A as `0.62x`, or `-` when either is missing."""
    if a is None or b is None or a <= 0:
        return "-"
    return f"{b / a:.2f}x"


def _p50(summary: dict[str, Any], *keys: str) -> float | None:
    node: Any = summary
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def render(rows: list[dict[str, Any]], sides: tuple[Checkout, Checkout]) -> str:
    """The side-by-side table: per row, client p50/p95, server embed/db p50 for A and B, and B/A."""
    a, b = sides
    lines = [
        f"A = {a.name}   B = {b.name}   (p50 ms unless noted; ratio B/A)",
        "",
        "| row | files | A client p50 | B client p50 | B/A | A p95 | B p95 | A embed | B embed | B/A "
        "| A db | B db | B/A | A overhead p50 / p95 | B overhead p50 / p95 | B/A "
        "| A recall | B recall | statuses A / B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['name']} | {row['files']} | n/a: {row['skipped']} |" + " |" * 16)
            continue
        sa, sb = row["A"], row["B"]
        ca, cb = _p50(sa, "client_ms", "p50"), _p50(sb, "client_ms", "p50")
        ea, eb = _p50(sa, "server_timing", "embed", "p50"), _p50(sb, "server_timing", "embed", "p50")
        da, dbb = _p50(sa, "server_timing", "db", "p50"), _p50(sb, "server_timing", "db", "p50")
        oa, ob = _p50(sa, "overhead_ms", "p50"), _p50(sb, "overhead_ms", "p50")

        def cell(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}"

        recall_a = sa["recall"].get("mean") if sa["recall"] else None
        recall_b = sb["recall"].get("mean") if sb["recall"] else None
        lines.append(
            f"| {row['name']} | {row['files']} | {cell(ca)} | {cell(cb)} | {ratio(ca, cb)} "
            f"| {cell(_p50(sa, 'client_ms', 'p95'))} | {cell(_p50(sb, 'client_ms', 'p95'))} "
            f"| {cell(ea)} | {cell(eb)} | {ratio(ea, eb)} | {cell(da)} | {cell(dbb)} | {ratio(da, dbb)} "
            f"| {cell(oa)} / {cell(_p50(sa, 'overhead_ms', 'p95'))} "
            f"| {cell(ob)} / {cell(_p50(sb, 'overhead_ms', 'p95'))} | {ratio(oa, ob)} "
            f"| {'-' if recall_a is None else recall_a} | {'-' if recall_b is None else recall_b} "
            f"| {sa['statuses']} / {sb['statuses']} |"
        )
    return "\n".join(lines)


def degraded(reply: Reply) -> bool:
    """True for a `/query_v2` answer that says a channel failed (`degraded`)."""
    try:
        return bool(json.loads(reply.content).get("degraded"))
    except (ValueError, AttributeError):
        return False


async def probe_v2(clients: tuple[Client, Client], scenario: Scenario, query: str) -> str | None:
    """None when both sides answer `/query_v2` whole (200, not degraded); else why the row is left out.

    A degraded answer did less work (e.g. no vector channel: the run was embedded under another
    model identity than the side's), so its latency says nothing about the same request.
    """
    why = []
    for client, label in zip(clients, "AB", strict=True):
        reply = await client.post("/query_v2", v2_body(scenario, query), scenario.user)
        if reply.status != 200:
            try:
                detail = str(json.loads(reply.content).get("detail", ""))[:80]
            except (ValueError, AttributeError):
                detail = ""
            why.append(f"{label} answers {reply.status}" + (f" ({detail})" if detail else ""))
        elif degraded(reply):
            why.append(f"{label} answers degraded (a channel failed; see its log)")
    return "; ".join(why) or None


@dataclass
class ABRun:
    """Both services on one database, and what is measured between them."""

    opts: Any  # benchmarks.run.Options
    root: Path
    dsn: str
    secret: str
    progress: Progress

    def service(self, side: Checkout) -> ServiceProcess:
        """A (not yet started) service of `side` on the shared database."""
        env = {
            "COLLECTION_NAME": self.opts.collection,
            "EMBEDDED_POSTGRES": "false",
            "RAG_V2_NAMESPACE_IDS": cp.NAMESPACE_A if self.opts.ab_v2 else "",
            **self.opts.service_env,
        }
        return ServiceProcess(
            dsn=self.dsn,
            jwt_secret=self.secret,
            data_dir=self.root / f"service-data-{side.label}",
            log_path=self.root / f"service-ab-{side.label}.log",
            settings=env,
            repo_root=side.root,
            python=side.python,
        )

    def tokens(self) -> dict[str, str]:
        """A token for each namespace (both services share the secret)."""
        return {u: make_token(self.secret, u) for u in (cp.NAMESPACE_A, cp.NAMESPACE_B)}

    async def measure(
        self,
        clients: tuple[Client, Client],
        scenarios: list[Scenario],
        truth: dict[str, VisibleRows],
        texts: list[str],
        vectors: Any,
    ) -> list[dict[str, Any]]:
        """Every row, A and B alternating: /query_multiple, /query (one file), then /query_v2 where both
        answer it."""
        opts, rows = self.opts, []
        picks = [i % len(texts) for i in range(opts.timed)]
        v1_rows = [("/query_multiple", s, [s.body(texts[q], opts.k) for q in picks]) for s in scenarios]
        # LibreChat's stock file_search: one `/query` per file
        single = min(scenarios, key=lambda s: len(s.file_ids))
        query_bodies = [{"query": texts[q], "file_id": single.file_ids[0], "k": opts.k} for q in picks]
        v1_rows.append(("/query", single, query_bodies))
        for path, s, bodies in v1_rows:
            with self.progress.phase(f"ab: {path} {s.name}"):
                a, b = await alternate(clients, path, bodies, s.user)
            for side in (a, b):
                side.recalls = [
                    judge(truth[s.name], vectors[q], r.pairs(), opts.k)
                    for q, r in zip(picks, side.replies, strict=True)
                ]
            row = {
                "name": f"{path.lstrip('/')} {s.name}",
                "files": 1 if path == "/query" else len(s.file_ids),
                "A": a.summary(),
                "B": b.summary(),
            }
            rows.append(row)
            self.progress.say(self.line(row))
        for s in scenarios:
            name = f"query_v2 {s.name}"
            why = await probe_v2(clients, s, texts[0])
            if why is not None:
                rows.append({"name": name, "files": len(s.file_ids), "skipped": why})
                self.progress.say(f"  {name}: left out: {why}")
                continue
            bodies = [v2_body(s, texts[q]) for q in picks]
            with self.progress.phase(f"ab: /query_v2 {s.name}"):
                a, b = await alternate(clients, "/query_v2", bodies, s.user)
            summaries = {"A": a.summary(), "B": b.summary()}
            for label, side in (("A", a), ("B", b)):
                summaries[label]["degraded"] = sum(1 for r in side.replies if degraded(r))
            row = {"name": name, "files": len(s.file_ids), **summaries}
            rows.append(row)
            self.progress.say(self.line(row))
        return rows

    @staticmethod
    def line(row: dict[str, Any]) -> str:
        """One progress line: client p50 of A and B, and the ratio."""
        a, b = _p50(row["A"], "client_ms", "p50"), _p50(row["B"], "client_ms", "p50")
        return f"  {row['name']:>24}: A p50 {a or 0:7.2f} ms  B p50 {b or 0:7.2f} ms  B/A {ratio(a, b)}"


# a service reads what its maintenance learned (a valid HNSW index, statistics) every minute
REFRESH_S = 65.0


async def settle(
    clients: tuple[Client, Client],
    scenario: Scenario,
    query: str,
    *,
    lagging: bool,
    limit_s: float = 150.0,
) -> dict[str, str]:
    """Wait until A and B take the same search path (Server-Timing `db` desc) for `scenario`.

    Measuring one side on the exact scan and the other on the HNSW index compares paths, not code.
    B learns of an index it builds at once; A, when the index became valid after A started
    (`lagging`), at its next refresh: then the paths must agree after a refresh interval, or both be
    on the index. Returns each side's path when they agree, or when `limit_s` is up (they may then
    differ: the report shows it).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        paths = {}
        for client, label in zip(clients, "AB", strict=True):
            reply = await client.post("/query_multiple", scenario.body(query, 10), scenario.user)
            paths[label] = str(reply.timing.get("db.desc", ""))
        waited = loop.time() - started
        same = paths["A"] == paths["B"]
        if same and (not lagging or paths["A"] == "index" or waited >= REFRESH_S):
            return paths
        if waited > limit_s:
            return paths
        await asyncio.sleep(2.0)


async def v2_backfill(client: Client, admin: str, progress: Progress, limit_s: float) -> str:
    """Build side B's V2 index of namespace A from its V1 chunks (admin route); what became of it.

    Waits while the run makes progress (files staged, chunks held) and gives up only after
    `limit_s` without any: a slow machine or a big corpus takes longer, a stuck run does not.
    """
    reply = await client.post("/v2/backfill", {"namespace": cp.NAMESPACE_A}, admin)
    if reply.status != 202:
        return f"backfill refused: {reply.status}"
    run_id = json.loads(reply.content)["run"]["run_id"]
    loop = asyncio.get_running_loop()
    seen: tuple[int, int] | None = None
    moved = said = loop.time()
    with progress.phase("ab: V2 backfill of namespace A (side B)"):
        while loop.time() - moved < limit_s:
            assert client.lean is not None
            r = await client.lean.request("GET", f"/v2/runs/{run_id}", b"", client.headers[admin])
            body = json.loads(r.content) if r.status == 200 else {}
            status = body.get("run", {}).get("status")
            if status in ("active", "failed", "abandoned"):
                return f"run {run_id} {status}"
            now = (int(body.get("counts", {}).get("staged", 0)), int(body.get("chunks", 0)))
            if now != seen:
                seen, moved = now, loop.time()
                if moved - said >= 30.0:
                    progress.say(f"  V2 backfill: {now[0]} files staged, {now[1]} chunks")
                    said = moved
            await asyncio.sleep(2.0)
    return f"run {run_id} not active: no progress for {limit_s:.0f} s (at {seen})"


async def _migrate(run: ABRun, side: Checkout, conn: asyncpg.Connection) -> None:
    """Start `side` alone for its migrations and its vector copy, then stop it."""
    opts, progress = run.opts, run.progress
    first = run.service(side)
    with progress.phase(f"ab: start {side.label} ({side.name}) for its migrations"):
        await first.start(opts.start_timeout)
    try:
        with progress.phase(f"ab: {side.label}: wait for the vector copy backfill"):
            state = await wait_for_copy(conn, first, opts.index_timeout)
        progress.say(f"  vector copy: {state['summary']}")
    finally:
        await first.stop()


async def ab_bench(
    opts: Any, root: Path, info: Any, sides: tuple[Checkout, Checkout], progress: Progress
) -> dict[str, Any]:
    """The corpus once, REF's service then ours, the alternating rows; both services stopped."""
    result: dict[str, Any] = {}
    conn = await db.connect(info.dsn)
    services: dict[str, ServiceProcess] = {}
    clients: list[Client] = []
    try:
        corpus, facts = await prepare_corpus(opts, root, info.dsn, info.superuser_dsn, conn, progress)
        result["corpus"] = facts
        scenarios = ab_scenarios(corpus.layout, opts.seed)
        truth = {
            s.name: await db.visible_rows(conn, corpus.collection_id, s.file_ids, s.visible_owners)
            for s in scenarios
        }
        run = ABRun(opts, root, info.dsn, secret=os.urandom(24).hex(), progress=progress)
        admin = "bench-admin"
        tokens = run.tokens()
        tokens[admin] = make_token(run.secret, admin)
        # The two share the job queue (it is the collection's), and a job of one side's run can be
        # refused by the other's code (a V2 run of another model identity fails for good there). So:
        # A alone first (its migrations, its vector copy), stopped; then B alone, which runs the V2
        # backfill's jobs; then A again, to be measured. Both keep their job workers: a service
        # learns of its HNSW index through its maintenance, and without it would scan exactly.
        await _migrate(run, sides[0], conn)
        b = run.service(sides[1])
        if opts.ab_v2:
            b.settings["RAG_ADMIN_USER_IDS"] = admin
        services["B"] = b
        with progress.phase(f"ab: start {sides[1].label} ({sides[1].name})"):
            await b.start(opts.start_timeout)
        with progress.phase(f"ab: {sides[1].label}: wait for the vector copy backfill"):
            state = await wait_for_copy(conn, b, opts.index_timeout)
        progress.say(f"  vector copy: {state['summary']}")
        if opts.ab_v2:
            client = Client(b.base_url, tokens, kind="lean")
            try:
                result["v2_backfill"] = await v2_backfill(client, admin, progress, opts.index_timeout)
            finally:
                await client.aclose()
            progress.say(f"  V2 backfill: {result['v2_backfill']}")
        index_before_a = any(i["valid"] for i in await db.hnsw_indexes(conn))
        a = run.service(sides[0])
        services["A"] = a
        with progress.phase(f"ab: start {sides[0].label} again"):
            await a.start(opts.start_timeout)
        with progress.phase("ab: prewarm"):
            await db.prewarm(info.superuser_dsn)
        clients = [Client(services[label].base_url, tokens, kind="lean") for label in "AB"]
        pair = (clients[0], clients[1])
        with progress.phase("ab: prime both query caches"):
            for client in pair:
                await prime(client, cp.NAMESPACE_A, corpus.texts, opts.k)
        # a service's first query makes it build (or look for) the HNSW index of its dimension; each
        # learns that the index is valid from its own maintenance, up to a minute apart
        with progress.phase("ab: wait for the HNSW index"):
            index = await wait_for_index(opts, conn, b, progress)
        progress.say(f"  HNSW index: {index['summary']}")
        with progress.phase("ab: both sides on the same search path"):
            largest = max(scenarios, key=lambda s: len(s.file_ids))
            lagging = bool(index.get("valid")) and not index_before_a
            result["paths"] = await settle(pair, largest, corpus.texts[0], lagging=lagging)
        progress.say(f"  search paths of the largest list: {result['paths']}")
        result["quiet_wait_s"] = await wait_quiet(conn)
        result["rows"] = await run.measure(pair, scenarios, truth, corpus.texts, corpus.vectors)
    finally:
        for client in clients:
            await client.aclose()
        result["memory"] = {}
        for label, service in services.items():
            result["memory"][label] = await service.stop()
        await conn.close()
    return result


def run_ab(opts: Any) -> int:
    """`--ab REF`: the A/B run; prints the table, writes bench-results/ab-<UTC>.json."""
    from app.runtime.postgres import EmbeddedPostgres
    from benchmarks.embedded import raise_interrupt

    progress = Progress()
    started = datetime.now(UTC)
    commit = resolve_ref(opts.ab)
    root, temporary = data_root(opts)
    out: dict[str, Any] = {
        "started_utc": started.isoformat(timespec="seconds"),
        "ref": opts.ab,
        "ref_commit": commit,
        "this_commit": _git("rev-parse", "HEAD"),
        "this_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "options": {"files": opts.files, "chunks": opts.chunks, "timed": opts.timed, "k": opts.k},
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    if sql_code_differs(commit):
        progress.say(
            "warning: app/store/sql differs between REF and this checkout: the side started last "
            "(this one) applies its SQL functions for both"
        )
        out["sql_code_differs"] = True
    server = EmbeddedPostgres(root / "postgres")
    previous = signal.signal(signal.SIGTERM, raise_interrupt)  # a stop still cleans up
    code = 0
    try:
        with ref_worktree(commit, root / "ref-checkout") as tree:
            python, how = python_for(tree, progress)
            out["ref_python"] = how
            sides = (
                Checkout("A", f"{opts.ab} ({commit[:10]})", tree, python),
                Checkout(
                    "B",
                    "this checkout" + (" (uncommitted changes)" if out["this_dirty"] else ""),
                    REPO_ROOT,
                    sys.executable,
                ),
            )
            with progress.phase("postgres: start"):
                info = server.start()
            try:
                out.update(asyncio.run(ab_bench(opts, root, info, sides, progress)))
            finally:
                terminate_all()
                with progress.phase("postgres: stop"):
                    server.stop()
    except KeyboardInterrupt:
        out["interrupted"] = True
        code = 130
    except Exception as exc:
        progress.say(f"failed: {type(exc).__name__}: {exc}")
        out["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out["total_s"] = round(progress.elapsed(), 1)
    if "rows" in out:
        table = render(out["rows"], sides)
        print(table)
        out["table"] = table
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    path = opts.out_dir / f"ab-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    progress.say(f"wrote {path}")
    return code
