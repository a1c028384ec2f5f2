"""`scripts/bench ingest`: ingestion as LibreChat drives it, through `POST /embed` of the real service.

    scripts/bench ingest                          # 4 files of each kind (~30k chars), one 95 MiB PDF
    scripts/bench ingest --per-kind 20 --chars 100000
    scripts/bench ingest --big-kind text --big-mb 20   # the big upload as plain text instead
    scripts/bench ingest --no-big

Writes the files first (`benchmarks.ingest_files`: text, Markdown, PDF, DOCX and XLSX from a seed,
each file's text its own, so no vector is reused), starts an embedded PostgreSQL and the service
with its defaults (the offline embedding model; `--service-env` adds settings), uploads one small
file to load the model, then every file one after another as LibreChat does (multipart `file_id`,
`file`, a user's token), and last the big upload while the service's RSS is sampled every
`--sample-ms`. For every upload it reads the service's `/metrics` before and after: the time inside
the embedder's document calls, the parse / embed / store stages, and the CPU seconds of the
service's process tree (parse workers included). Prints files/s and chunks/s (wall and per
CPU-second, i.e. per core), the embedder's share of wall time and the overhead beyond it (target
<= 10 %), and the big upload's peak RSS over idle (target <= 500 MB). Nothing asserts a speed; the
exit code is 1 when an upload fails or the run breaks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.options import parse_env_pairs

if TYPE_CHECKING:  # imported where they run: `--help` needs nothing installed
    import asyncpg
    import httpx

    from benchmarks.ingest_files import BenchFile
    from benchmarks.ingest_measure import Counters, Upload
    from tests.fixtures.fake_providers import FakeProvider

_MB = 1000 * 1000
OVERHEAD_TARGET = 0.10
RSS_TARGET_MB = 500


@dataclass(frozen=True)
class IngestOptions:
    """What to upload and how."""

    per_kind: int = 4
    chars: int = 30_000
    big_mb: float = 95.0
    big_kind: str = "pdf"
    seed: int = 7
    sample_ms: float = 20.0
    embedder: str = "local"
    stand_in_dims: int = 384
    xlsx_rows: int = 50_000
    data_dir: Path | None = None
    out_dir: Path = Path("bench-results")
    json_path: Path | None = None
    service_env: dict[str, str] = field(default_factory=dict)


def parse(argv: list[str]) -> IngestOptions:
    """Options from the command line."""
    d = IngestOptions()
    p = argparse.ArgumentParser(
        prog="scripts/bench ingest",
        description="Upload generated text, Markdown, PDF, DOCX and XLSX files and one big file to the "
        "real service over POST /embed; print throughput per core, the embedder's share of the time, "
        "the overhead beyond it and the big upload's peak memory over idle.",
    )
    p.add_argument("--per-kind", type=int, default=d.per_kind, help="files of each kind (%(default)s)")
    p.add_argument("--chars", type=int, default=d.chars, help="text per file, about (%(default)s)")
    p.add_argument("--big-mb", type=float, default=d.big_mb, help="big upload in MiB (%(default)s)")
    p.add_argument("--big-kind", choices=("pdf", "text"), default=d.big_kind, help="(%(default)s)")
    p.add_argument("--no-big", action="store_true", help="skip the big upload")
    p.add_argument(
        "--stand-in-dims",
        type=int,
        default=d.stand_in_dims,
        help="dimensions of the stand-in's vectors (%(default)s; OpenAI's text-embedding-3-small: 1536)",
    )
    p.add_argument(
        "--xlsx-rows",
        type=int,
        default=d.xlsx_rows,
        help="rows of the workbook both XLSX readers parse in this process (%(default)s; 0 skips)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--sample-ms", type=float, default=d.sample_ms, help="RSS sampling interval")
    p.add_argument(
        "--embedder",
        choices=("local", "stand-in"),
        default=d.embedder,
        help="local: the offline model the service defaults to; stand-in: an OpenAI-compatible server "
        "in this process (deterministic 384-d vectors over a real socket), for memory runs on text "
        "the local model would take half an hour to embed (default %(default)s)",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="data folder (kept); default temporary")
    p.add_argument("--out", type=Path, default=d.out_dir, help="results folder (%(default)s)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON figures here")
    p.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    if a.per_kind < 1 or a.chars < 500:
        p.error("need --per-kind >= 1 and --chars >= 500")
    return IngestOptions(
        per_kind=a.per_kind,
        chars=a.chars,
        big_mb=0.0 if a.no_big else a.big_mb,
        big_kind=a.big_kind,
        seed=a.seed,
        sample_ms=a.sample_ms,
        embedder=a.embedder,
        stand_in_dims=a.stand_in_dims,
        xlsx_rows=a.xlsx_rows,
        data_dir=a.data_dir,
        out_dir=a.out,
        json_path=a.json,
        service_env=parse_env_pairs(a.service_env),
    )


async def bench(opts: IngestOptions, root: Path, info: Any, progress: Any, result: dict[str, Any]) -> None:
    """Start the service on `info`'s database, upload everything, record the figures in `result`."""
    import asyncpg
    import httpx

    from benchmarks import ingest_files as files
    from benchmarks import ingest_measure as m
    from benchmarks.service import ServiceProcess, make_token

    if opts.xlsx_rows:
        from benchmarks.ingest_xlsx import compare

        with progress.phase(f"XLSX readers on {opts.xlsx_rows:,} rows"):
            result["loadavg_before_xlsx"] = [round(x, 2) for x in os.getloadavg()]
            result["xlsx_readers"] = await asyncio.to_thread(
                compare, root / "xlsx", opts.xlsx_rows, opts.seed
            )
    with progress.phase("write the files"):
        small = files.write_set(root / "files", opts.per_kind, opts.chars, opts.seed)
        warm = files.write_set(root / "warm", 1, 2000, opts.seed + 1)[0]
        big = files.write_big(root / "big", opts.big_kind, opts.big_mb, opts.seed) if opts.big_mb else None
    secret, metrics_token = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    settings = {"METRICS_TOKEN": metrics_token}
    stand_in = _stand_in(opts, settings)
    service = ServiceProcess(
        dsn=info.dsn,
        jwt_secret=secret,
        data_dir=root / "service-data",
        log_path=root / "service.log",
        settings={**settings, **opts.service_env},
    )
    with progress.phase("service: start"):
        result["service"] = {"start_s": round(await service.start(300.0), 2), "env": opts.service_env}
    assert service.process is not None
    pid = service.process.pid
    conn = await asyncpg.connect(info.dsn)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=1800.0) as client:
        uploads = _Uploads(
            client, conn, pid, metrics_token, make_token(secret, "bench-user"), stand_in, progress
        )
        try:
            with progress.phase("warm-up upload (loads the model)"):
                result["warmup"] = asdict(await uploads.upload(warm, "warm-up"))
            result["loadavg_before_set"] = [round(x, 2) for x in os.getloadavg()]
            measured: list[m.Upload] = []
            with progress.phase(f"upload {len(small)} files one after another"):
                for number, item in enumerate(small):
                    measured.append(await uploads.upload(item, f"set-{number:04d}"))
            result["loadavg_after_set"] = [round(x, 2) for x in os.getloadavg()]
            result["uploads"] = [asdict(u) for u in measured]
            result["set"] = m.summary(measured)
            result["by_kind"] = {
                kind: m.summary([u for u in measured if u.kind == kind]) for kind in files.KINDS
            }
            if big is not None:
                result["big"] = await _big(big, pid, opts, uploads.upload, progress)
        finally:
            await conn.close()
            result["service"].update(await service.stop())
            if stand_in is not None:
                stand_in.stop()


def _stand_in(opts: IngestOptions, settings: dict[str, str]) -> FakeProvider | None:
    """With `--embedder stand-in`: the OpenAI-compatible stand-in, started; its settings go in `settings`."""
    if opts.embedder != "stand-in":
        return None
    from tests.fixtures.fake_providers import FakeProvider

    stand_in = FakeProvider(dims=opts.stand_in_dims)
    stand_in.reverse_order = False
    stand_in.start()
    settings.update(
        EMBEDDINGS_PROVIDER="openai",
        RAG_OPENAI_API_KEY="bench-stand-in",
        RAG_OPENAI_BASEURL=stand_in.url + "/v1",
    )
    return stand_in


@dataclass
class _Uploads:
    """Uploads as LibreChat sends them, each measured between two reads of the service's /metrics."""

    client: httpx.AsyncClient
    conn: asyncpg.Connection
    pid: int  # the service's process (its tree's CPU seconds)
    metrics_token: str
    user_token: str
    stand_in: FakeProvider | None
    progress: Any

    async def counters(self) -> Counters:
        """The service's counters and its process tree's CPU seconds, now."""
        from benchmarks import ingest_measure as m

        reply = await self.client.get("/metrics", headers={"Authorization": f"Bearer {self.metrics_token}"})
        reply.raise_for_status()
        return m.Counters.read(reply.text, m.tree_cpu_seconds(self.pid))

    async def upload(self, item: BenchFile, file_id: str) -> Upload:
        """`POST /embed` of one file as `file_id`: its figures, and the chunks it stored."""
        from benchmarks import ingest_measure as m

        before = await self.counters()
        started = time.perf_counter()
        with item.path.open("rb") as handle:
            reply = await self.client.post(
                "/embed",
                headers={"Authorization": f"Bearer {self.user_token}"},
                data={"file_id": file_id},
                files={"file": (item.path.name, handle, item.content_type)},
            )
        wall = time.perf_counter() - started
        after = await self.counters()
        size = item.path.stat().st_size
        out = m.Upload.between(item.path.name, item.kind, size, reply.status_code, wall, before, after)
        if reply.status_code != 200:
            self.progress.say(f"  {item.path.name}: {reply.status_code} {reply.text[:300]}")
        out.chunks = await self.conn.fetchval(
            "SELECT count(*) FROM langchain_pg_embedding WHERE custom_id = $1", file_id
        )
        if self.stand_in is not None:
            self.stand_in.requests.clear()  # it records every request: keep this process small
        return out


async def _big(big: Any, pid: int, opts: IngestOptions, upload: Any, progress: Any) -> dict[str, Any]:
    """The big upload with the service's RSS sampled throughout; peaks over the idle level."""
    from benchmarks import ingest_measure as m

    await asyncio.sleep(1.0)  # the previous upload's memory settles
    idle_own, idle_tree = await asyncio.to_thread(m.idle_rss, pid, 1.0, opts.sample_ms / 1000)
    sampler = m.RssSampler(pid, opts.sample_ms / 1000)
    sampler.start()
    loadavg = [round(x, 2) for x in os.getloadavg()]
    try:
        with progress.phase(f"big upload ({big.path.stat().st_size / 2**20:.0f} MiB {big.kind})"):
            figures = await upload(big, "big-upload")
    finally:
        sampler.stop()
    peak_own, peak_tree = sampler.peaks()
    return {
        "upload": asdict(figures),
        "summary": m.summary([figures]),
        "loadavg_at_start": loadavg,
        "rss_samples": len(sampler.samples),
        "idle_rss_mb": round(idle_own / _MB, 1),
        "peak_rss_mb": round(peak_own / _MB, 1),
        "peak_over_idle_mb": round((peak_own - idle_own) / _MB, 1),
        "idle_tree_rss_mb": round(idle_tree / _MB, 1),
        "peak_tree_rss_mb": round(peak_tree / _MB, 1),
        "tree_peak_over_idle_mb": round((peak_tree - idle_tree) / _MB, 1),
    }


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f} %"


def render(result: dict[str, Any]) -> str:
    """The report as markdown."""
    lines = [f"# Ingestion through POST /embed ({result['started_utc']})", ""]
    lines.append(
        f"Machine: {result['machine']['nproc']} cores, load average at start "
        f"{result['loadavg_at_start']}, before the set {result.get('loadavg_before_set')}, "
        f"at end {result.get('loadavg_at_end')}."
    )
    if "error" in result:
        lines += ["", f"**The run failed**: {result['error']}"]
    rows = [("all files", result.get("set"))]
    rows += [(kind, s) for kind, s in result.get("by_kind", {}).items()]
    if "big" in result:
        rows.append((f"big upload ({result['big']['upload']['kind']})", result["big"]["summary"]))
    lines += [
        "",
        "| uploads | files | chunks | MB | wall s | files/s | chunks/s | chunks per CPU-s | embedder s | "
        "embedder share | overhead beyond embedder (target <= 10 %) | overhead ms/file |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, s in rows:
        if not s:
            continue
        lines.append(
            f"| {name} | {s['files']} | {s['chunks']} | {s['bytes'] / _MB:.1f} | {s['wall_s']} | "
            f"{s['files_per_s']} | {s['chunks_per_s']} | {s['chunks_per_cpu_s']} | {s['embedder_s']} | "
            f"{_pct(s['embedder_share'])} | {_pct(s['overhead_share'])} | {s['overhead_ms_per_file']} |"
        )
    if result.get("set"):
        st = result["set"]["stages_s"]
        lines += [
            "",
            f"Stages of the set (s): parse+chunk {st['parse']}, embed {st['embed']}, "
            f"store {st['store']}, total in the service {st['total']}.",
        ]
    x = result.get("xlsx_readers")
    if x:
        lines += [
            "",
            f"XLSX readers, in-process, {x['rows']:,} rows ({x['cells']:,} cells, "
            f"{x['bytes'] / _MB:.1f} MB), "
            f"fastest of 3 at load {result.get('loadavg_before_xlsx')}: openpyxl {x['openpyxl_s']} s "
            f"({x['openpyxl_cells_per_s']:,} cells/s), calamine {x['calamine_s']} s "
            f"({x['calamine_cells_per_s']:,} cells/s): {x['speedup']}x; same text: {x['same_text']}.",
        ]
    big = result.get("big")
    if big:
        lines += [
            "",
            f"Big upload: {big['upload']['size_bytes'] / 2**20:.1f} MiB, status {big['upload']['status']}, "
            f"{big['upload']['chunks']} chunks; service RSS idle {big['idle_rss_mb']} MB, peak "
            f"{big['peak_rss_mb']} MB: **{big['peak_over_idle_mb']} MB over idle** (target <= "
            f"{RSS_TARGET_MB} MB; {big['rss_samples']} samples). With its parse workers: idle "
            f"{big['idle_tree_rss_mb']} MB, peak {big['peak_tree_rss_mb']} MB "
            f"({big['tree_peak_over_idle_mb']} MB over idle; a worker is capped by PARSE_MEMORY_MB).",
        ]
    return "\n".join(lines) + "\n"


def failed(result: dict[str, Any]) -> bool:
    """True when the run broke or an upload was not stored."""
    statuses = [u["status"] for u in result.get("uploads", [])]
    if "big" in result:
        statuses.append(result["big"]["upload"]["status"])
    same_text = result.get("xlsx_readers", {}).get("same_text", True)
    return "error" in result or not statuses or any(s != 200 for s in statuses) or not same_text


def run(opts: IngestOptions) -> int:
    """Run the benchmark; print the report; write the JSON."""
    from benchmarks.embedded import run_on_embedded_postgres
    from benchmarks.progress import Progress
    from benchmarks.run import machine_facts

    progress = Progress()
    started = datetime.now(UTC)
    result: dict[str, Any] = {
        "benchmark": "ingest",
        "started_utc": started.isoformat(timespec="seconds"),
        "options": json.loads(json.dumps(asdict(opts), default=str)),
        "machine": machine_facts(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    if opts.data_dir is not None:
        root, temporary = opts.data_dir.resolve(), False
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    else:
        root, temporary = Path(tempfile.mkdtemp(prefix="ragoverlay-ingest-")), True
    root.chmod(0o755)  # the embedded server runs as another user and must reach its folder
    progress.say(f"data folder {root}{' (temporary)' if temporary else ''}")
    run_on_embedded_postgres(
        root, temporary, progress, result, lambda info: bench(opts, root, info, progress, result)
    )
    text = json.dumps(result, indent=2, default=str) + "\n"
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    for path in (opts.out_dir / f"ingest-{stamp}.json", opts.out_dir / "ingest-latest.json", opts.json_path):
        if path is not None:
            path.write_text(text)
    print(render(result))
    return 1 if failed(result) else 0


def main(argv: list[str]) -> int:
    """Parse and run."""
    return run(parse(argv))
