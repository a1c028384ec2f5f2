"""`scripts/bench ingest-ab`: ingestion cost of the previous release (A) beside this checkout (B), one run.

    scripts/bench ingest-ab --quick        # 2 Debian Reference chapters (en, de) and a 30-page manual
    scripts/bench ingest-ab --set middle   # the same chapters, 300-page manuals (en, de)
    scripts/bench ingest-ab                # every chapter (en, de), 300- and 1,400-page manuals (en, de)
    scripts/bench ingest-ab --set big      # the 1,400-page English manual alone
    scripts/bench ingest-ab --resume bench-results/ingest-ab-<UTC>.json   # go on with a stopped run

A is `--ref` (default c670082, where evidence search was a second job after /embed), exported with
`git archive` into ~/.cache/ragoverlay/bench-ingest-ab/ref-<commit> with its own .venv (kept for the
next run). Each side runs its own service on its own embedded PostgreSQL, with its offline default
model and V2 enabled for one user (benchmarks/ingest_ab_side.py). After a warm-up, every PDF
(benchmarks/ingest_ab_pdfs.py, made once and cached) is uploaded as V1 alone, then as V1 + evidence,
the client alternating between the sides upload by upload, the side that goes first swapped at every
step (A B, B A, A B ...) so that load drift hits both alike. Last, on each side,
170-byte uploads one after another while a ~300-page PDF uploads (its wait). Prints the per-page
table, the totals, the issue's target rows (met / not met, never asserted) and peak RSS; writes
bench-results/ingest-ab-<UTC>.json (after every upload, so a stopped run keeps what it measured)
and ingest-ab-latest.json. Every upload records the machine's 1-minute load average before and after
it: CPU seconds grow on a busy machine (the same German 300-page upload cost 236 and 180 CPU s at
about the same load average), so a ratio is read beside its load. `--resume FILE` goes on with a
stopped run of the same set and ref: the uploads FILE holds with status 200 are kept (and marked
`resumed`), the rest are made, on fresh services and databases (every upload is a file of its own,
so none depends on another); the full set takes hours on 2 cores and may be run in parts.
Exit code 1 when an upload failed or the run broke.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.ingest_ab_pdfs import SETS  # the standard library only: `--help` needs nothing installed

if TYPE_CHECKING:  # imported where they run: `--help` needs nothing installed
    from benchmarks.ingest_ab_pdfs import BenchPdf
    from benchmarks.ingest_ab_side import Side
    from benchmarks.progress import Progress

DEFAULT_REF = "c670082"


@dataclass(frozen=True)
class AbOptions:
    """What to upload, against which ref, and where the results go."""

    set_name: str = "full"
    ref: str = DEFAULT_REF
    latency: bool = True
    this_only: bool = False  # side B alone (no previous release): a quick look at one big file
    resume: Path | None = None  # a stopped run's JSON: its good uploads are kept, the rest made
    data_dir: Path | None = None
    out_dir: Path = Path("bench-results")


def parse(argv: list[str]) -> AbOptions:
    """Options from the command line."""
    d = AbOptions()
    p = argparse.ArgumentParser(
        prog="scripts/bench ingest-ab",
        description="Ingestion cost of the previous release beside this checkout, in one run: CPU and "
        "wall seconds per page of V1 alone and V1 + evidence, time until the evidence index answers, a "
        "small upload's latency while a big one embeds, peak RSS, and the issue's target rows.",
    )
    p.add_argument("--quick", action="store_true", help="the quick set (same as --set quick)")
    p.add_argument(
        "--set",
        dest="set_name",
        choices=tuple(SETS),
        default=d.set_name,
        help="quick: Debian Reference ch03, ch04 (en, de) and a 30-page manual; middle: those chapters "
        "and 300-page manuals (en, de); full: every chapter, 300- and 1,400-page manuals (en, de); "
        "big: the 1,400-page English manual alone (default %(default)s)",
    )
    p.add_argument("--ref", default=d.ref, help="the previous release's git ref (%(default)s)")
    p.add_argument("--no-latency", action="store_true", help="skip the small uploads during a big one")
    p.add_argument(
        "--this-only", action="store_true", help="this checkout alone, without the previous release (no A)"
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="a stopped run's JSON (same set and ref): keep its uploads with status 200, make the rest",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="data folder (kept); default temporary")
    p.add_argument("--out", type=Path, default=d.out_dir, help="results folder (%(default)s)")
    a = p.parse_args(argv)
    if a.quick and a.set_name not in (d.set_name, "quick"):
        p.error("--quick and --set disagree")
    return AbOptions(
        set_name="quick" if a.quick else a.set_name,
        ref=a.ref,
        latency=not a.no_latency,
        this_only=a.this_only,
        resume=a.resume,
        data_dir=a.data_dir,
        out_dir=a.out,
    )


def latency_pdf(pdfs: list[BenchPdf]) -> BenchPdf:
    """The big upload the small ones wait beside: the English 300-page manual, else the largest up to
    400 pages."""
    for pdf in pdfs:
        if pdf.name == "manual-300p.en":
            return pdf
    return max((p for p in pdfs if p.pages <= 400), key=lambda p: p.pages, default=pdfs[-1])


def pair_order(sides: list[Side], step: int) -> list[Side]:
    """The sides in the order of `step`: A B, then B A, then A B ... (load drift hits both alike)."""
    return sides if step % 2 == 0 else sides[::-1]


def kept_uploads(previous: dict[str, Any], set_name: str, sides: dict[str, Any]) -> list[dict[str, Any]]:
    """The uploads of a stopped run to keep: status 200, same set and same commit on each side.

    Raises ValueError when the run is of another set or another commit (its figures would not be
    comparable with the uploads made now).
    """
    if previous.get("set") != set_name:
        raise ValueError(f"--resume: that run is of the set {previous.get('set')!r}, not {set_name!r}")
    for label, side in sides.items():
        before = previous.get("sides", {}).get(label, {}).get("commit")
        if before is not None and before != side.get("commit"):
            raise ValueError(
                f"--resume: that run's side {label} was {before[:10]}, this one is {side['commit'][:10]}"
            )
    kept = [dict(u, resumed=True) for u in previous.get("uploads", []) if u.get("status") == 200]
    return [u for u in kept if u.get("side") in sides]


def resume_into(result: dict[str, Any], stopped: dict[str, Any], opts: AbOptions) -> None:
    """Carry a stopped run's good uploads (and its latency phase) into `result` (`--resume`)."""
    result["uploads"] = kept_uploads(stopped, opts.set_name, result["sides"])
    result["resumed_from"] = {"file": str(opts.resume), "started_utc": stopped.get("started_utc")}
    if opts.latency and stopped.get("latency"):
        result["latency"] = stopped["latency"]


def done_keys(uploads: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(side, file name, mode) of every upload already measured."""
    return {(str(u["side"]), str(u["name"]), str(u["mode"])) for u in uploads}


def _git(*args: str) -> str:
    from benchmarks.service import REPO_ROOT

    done = subprocess.run(["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True)
    return done.stdout.strip()


class _Writer:
    """Writes the result's JSON now and after every upload."""

    def __init__(self, result: dict[str, Any], out_dir: Path, stamp: str) -> None:
        self.result = result
        out_dir.mkdir(parents=True, exist_ok=True)
        self.paths = (out_dir / f"ingest-ab-{stamp}.json", out_dir / "ingest-ab-latest.json")

    def write(self) -> None:
        """The result as it stands."""
        text = json.dumps(self.result, indent=2, default=str) + "\n"
        for path in self.paths:
            path.write_text(text)


async def bench(
    opts: AbOptions, root: Path, pdfs: list[BenchPdf], sides: list[Side], progress: Progress, out: _Writer
) -> None:
    """Both services up, warmed; every PDF as V1 alone then V1 + evidence, A, B alternating; latency."""
    from benchmarks import ingest_ab_pdfs as gen
    from benchmarks.ingest_ab_side import small_files

    warm, small = small_files(root / "small")
    result = out.result
    result.setdefault("uploads", [])
    result.setdefault("latency", {})
    result.setdefault("memory", {})
    try:
        for side in sides:
            with progress.phase(f"{side.label}: start PostgreSQL and the service ({side.name})"):
                await side.start()
        for side in sides:
            with progress.phase(f"{side.label}: warm-up (the model, the evidence user's run)"):
                result.setdefault("warmup", {})[side.label] = await side.warm_up(warm)
            side.start_sampling()
        out.write()
        result["loadavg_before_uploads"] = [round(x, 2) for x in os.getloadavg()]
        steps = [(pdf, mode) for pdf in pdfs for mode in ("v1", "evidence")]
        done = done_keys(result["uploads"])
        for step, (pdf, mode) in enumerate(steps):
            path = gen.variant(pdf.path, root / "uploads", mode)
            for side in pair_order(sides, step):
                if (side.label, pdf.name, mode) in done:
                    continue
                with progress.phase(f"{side.label}: {pdf.name} ({pdf.pages} pages) {mode}"):
                    r = await side.upload(path, pdf.name, mode, pdf.pages, pdf.lang)
                progress.say(
                    f"  {side.label} {pdf.name} {mode}: {r.status} wall {r.wall_s:.1f} s, "
                    f"CPU {r.cpu_s:.1f} s, ready after {r.ready_after_s} s, load {r.load}"
                )
                result["uploads"].append(_asdict(r))
                out.write()
        result["loadavg_after_uploads"] = [round(x, 2) for x in os.getloadavg()]
        if opts.latency:
            big = latency_pdf(pdfs)
            path = gen.variant(big.path, root / "uploads", "latency")
            for side in sides:
                if side.label in result["latency"]:  # kept from the run resumed
                    continue
                with progress.phase(f"{side.label}: 170-byte uploads while {big.name} uploads"):
                    figures = await side.small_while_big(path, small, big.lang)
                result["latency"][side.label] = {**figures, "pages": big.pages}
                out.write()
    finally:
        for side in sides:
            result["memory"][side.label] = await side.stop()


def _asdict(value: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(value)


def _sides(opts: AbOptions, root: Path, progress: Progress, result: dict[str, Any]) -> list[Side]:
    """A (the ref's export and .venv, cached) and B (this checkout, this interpreter)."""
    from benchmarks.ingest_ab_side import Side, ref_checkout
    from benchmarks.service import REPO_ROOT

    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    this = _git("rev-parse", "HEAD")
    result["sides"] = {
        "B": {"name": "this checkout" + (" (uncommitted changes)" if dirty else ""), "commit": this},
    }
    b = Side("B", result["sides"]["B"]["name"], REPO_ROOT, sys.executable, root / "B")
    if opts.this_only:
        return [b]
    commit = _git("rev-parse", "--verify", f"{opts.ref}^{{commit}}")
    with progress.phase(f"A: the checkout of {opts.ref} ({commit[:10]}) and its .venv"):
        tree = ref_checkout(commit)
    result["sides"]["A"] = {"name": f"{opts.ref} ({commit[:10]})", "commit": commit, "tree": str(tree)}
    a = Side("A", result["sides"]["A"]["name"], tree, str(tree / ".venv" / "bin" / "python"), root / "A")
    return [a, b]


def run(opts: AbOptions) -> int:
    """Run the benchmark; print the report; write the JSON."""
    from benchmarks import ingest_ab_pdfs as gen
    from benchmarks import ingest_ab_report as report
    from benchmarks.embedded import raise_interrupt
    from benchmarks.progress import Progress
    from benchmarks.run import machine_facts
    from benchmarks.service import terminate_all

    progress = Progress()
    started = datetime.now(UTC)
    result: dict[str, Any] = {
        "benchmark": "ingest-ab",
        "started_utc": started.isoformat(timespec="seconds"),
        "set": opts.set_name,
        "options": json.loads(json.dumps(opts.__dict__, default=str)),
        "machine": machine_facts(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    out = _Writer(result, opts.out_dir, started.strftime("%Y%m%dT%H%M%SZ"))
    root = (
        opts.data_dir.resolve() if opts.data_dir else Path(tempfile.mkdtemp(prefix="ragoverlay-ingest-ab-"))
    )
    if opts.data_dir:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    root.chmod(0o755)
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    code = 0
    sides: list[Side] = []
    try:
        with progress.phase(f"PDFs of the {opts.set_name} set (cached in {gen.CACHE})"):
            pdfs = gen.build_set(opts.set_name)
        result["pdfs"] = [{"name": p.name, "pages": p.pages, "file": p.path.name} for p in pdfs]
        sides = _sides(opts, root, progress, result)
        if opts.resume is not None:
            resume_into(result, json.loads(opts.resume.read_text()), opts)
        asyncio.run(bench(opts, root, pdfs, sides, progress, out))
    except KeyboardInterrupt:
        result["interrupted"] = True
        code = 130
    except Exception as exc:
        progress.say(f"failed: {type(exc).__name__}: {exc}")
        result["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        terminate_all()
        for side in sides:  # an interrupted run may not have stopped its database
            if side.server is not None:
                with contextlib.suppress(Exception):
                    side.server.stop()
        signal.signal(signal.SIGTERM, previous)
        if not opts.data_dir:
            shutil.rmtree(root, ignore_errors=True)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["total_s"] = round(progress.elapsed(), 1)
    result["table"] = report.render(result)
    out.write()
    print(result["table"])
    progress.say(f"wrote {out.paths[0]}")
    failed = any(u["status"] != 200 for u in result.get("uploads", [])) or not result.get("uploads")
    return code or (1 if failed else 0)


def main(argv: list[str]) -> int:
    """Parse and run."""
    return run(parse(argv))
