"""`scripts/bench quality ...`: command-line options of the retrieval quality benchmark."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from benchmarks.options import parse_env_pairs
from benchmarks.quality.embedders import CANDIDATES
from benchmarks.quality.run import QUICK, SET_NAMES, SYSTEM_NAMES, Options, Sizes, run

# size options that override the --quick or full sizes when given
SIZE_OPTIONS = (
    "pages",
    "held_out",
    "html_pages",
    "table_queries",
    "identifier_queries",
    "mutants",
    "max_chars",
)


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def parse(argv: list[str]) -> Options:
    """Options from the command line."""
    d = Options()
    p = _parser(d, Sizes())
    a = p.parse_args(argv)
    base = QUICK if a.quick else Sizes()
    overrides = {name: getattr(a, name) for name in SIZE_OPTIONS if getattr(a, name) is not None}
    _check(p, a, overrides)
    return Options(
        sizes=replace(base, **overrides),
        quick=a.quick,
        sets=a.sets,
        systems=tuple(x for x in a.systems if x != "none"),
        models=a.models,
        seed=a.seed,
        k=a.k,
        depth=a.depth,
        rrf_k=a.rrf_k,
        kb_size=a.kb_size,
        data_dir=a.data_dir.resolve(),
        out_dir=a.out.resolve(),
        fresh=a.fresh,
        setup=a.setup,
        service_env=parse_env_pairs(a.service_env),
        tag=a.tag,
        service_url=a.service_url,
        token=a.token,
        jwt_secret=a.jwt_secret,
        v2_timed=a.v2_timed,
        v2_wait_s=a.v2_wait,
        man_dirs=a.man_dirs,
        html_root=a.html_root,
    )


def _check(p: argparse.ArgumentParser, a: argparse.Namespace, overrides: dict[str, int]) -> None:
    """Stop with the parser's error on a combination the run cannot use."""
    for name, value in overrides.items():
        if value < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    unknown = [x for x in a.sets if x not in SET_NAMES]
    if unknown or not a.sets:
        p.error(f"--sets takes {', '.join(SET_NAMES)}")
    bad = [x for x in a.systems if x not in (*SYSTEM_NAMES, "none")]
    if any(m not in CANDIDATES for m in a.models):
        p.error(f"--models takes {', '.join(CANDIDATES)}")
    if bad or not (a.systems or a.models):
        p.error(f"--systems takes {', '.join(SYSTEM_NAMES)}")
    if not 1 <= a.kb_size <= 1000:
        p.error("--kb-size must be 1..1000 (the service answers at most 1,000 file ids per request)")
    if not 1 <= a.k <= 10 or a.depth < a.k or a.depth > 100:
        p.error("--k must be 1..10 and --depth k..100")
    if a.v2_timed < 0 or a.v2_wait <= 0:
        p.error("--v2-timed must not be negative and --v2-wait must be positive")
    if (a.token or a.jwt_secret) and not a.service_url:
        p.error("--token and --jwt-secret are for --service-url (the benchmark's own service gets a token)")


def _parser(d: Options, s: Sizes) -> argparse.ArgumentParser:
    """The quality benchmark's arguments, with `d`'s values and the full sizes `s` as defaults."""
    p = argparse.ArgumentParser(
        prog="scripts/bench quality",
        description="Retrieval quality on sets built from this machine's documentation: a seeded sample "
        "of man pages (sections 1 and 8) and Python's HTML reference (Debian's python3-doc), plus "
        "unanswerable questions. Uploads through the service's POST /embed (scripts/serve on its "
        "defaults), asks each system every query, prints Recall@1/5/10, MRR, nDCG@10, answer in a "
        "returned passage, refusal rates and p50/p95 latency; writes bench-results/quality-*.json.",
    )
    _set_arguments(p, d, s)
    _system_arguments(p, d)
    _run_arguments(p, d)
    return p


def _set_arguments(p: argparse.ArgumentParser, d: Options, s: Sizes) -> None:
    """Which query sets, and how large."""
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"small sets ({QUICK.pages} man pages, {QUICK.html_pages} HTML pages) for routine use",
    )
    p.add_argument("--pages", type=int, default=None, help=f"man pages indexed (full: {s.pages})")
    p.add_argument("--held-out", type=int, default=None, help=f"man pages left out (full: {s.held_out})")
    p.add_argument("--html-pages", type=int, default=None, help=f"HTML pages indexed (full: {s.html_pages})")
    p.add_argument("--table-queries", type=int, default=None, help=f"(full: {s.table_queries})")
    p.add_argument("--identifier-queries", type=int, default=None, help=f"(full: {s.identifier_queries})")
    p.add_argument("--mutants", type=int, default=None, help=f"mutated identifiers (full: {s.mutants})")
    p.add_argument(
        "--max-chars",
        type=int,
        default=None,
        help=f"man page text cut at this many characters (full: {s.max_chars})",
    )
    p.add_argument("--sets", type=_names, default=d.sets, help=f"of {','.join(SET_NAMES)} (default both)")


def _system_arguments(p: argparse.ArgumentParser, d: Options) -> None:
    """The systems asked and how: V2's timed pass and wait, models, seed, k, fusion depth, KB size."""
    p.add_argument(
        "--systems",
        type=_names,
        default=d.systems,
        help=f"of {','.join(SYSTEM_NAMES)} or none (default {','.join(d.systems)}). query_v2 is "
        "/query_v2 per stage (v2:exact, v2:lexical, v2:vector, v2:fused, v2:reranked and the final "
        "results) from one debug request per question, a timed pass without debug, the wait for the V2 "
        "index and the offline tuning grids; it stops the run with a message while the service has no "
        "/query_v2. Without V2: --systems v1-dense,bm25,rrf",
    )
    p.add_argument(
        "--v2-timed",
        type=int,
        default=d.v2_timed,
        help="questions of the timed /query_v2 pass without debug: a seeded sample of this many, "
        "0 = all (%(default)s)",
    )
    p.add_argument(
        "--v2-wait",
        type=float,
        default=d.v2_wait_s,
        help="seconds the V2 index (backfill of each knowledge base) may take before the run stops "
        "(%(default)s)",
    )
    p.add_argument(
        "--models",
        type=_names,
        default=(),
        help=f"also measure these embedding models in process ({', '.join(CANDIDATES)}); "
        "see docs/performance.md, Stronger local embedding models",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--k", type=int, default=d.k, help="passages per answer (%(default)s)")
    p.add_argument("--depth", type=int, default=d.depth, help="list depth of each fused leg (%(default)s)")
    p.add_argument("--rrf-k", type=float, default=d.rrf_k, help="RRF constant (%(default)s)")
    p.add_argument(
        "--kb-size",
        type=int,
        default=d.kb_size,
        help="files per knowledge base (the service's per-request limit, %(default)s)",
    )


def _run_arguments(p: argparse.ArgumentParser, d: Options) -> None:
    """Where it runs: its folders, the service, the documentation it reads, the results' name."""
    p.add_argument(
        "--data-dir",
        type=Path,
        default=d.data_dir,
        help="cache of renders, texts and the service's data (%(default)s; not committed)",
    )
    p.add_argument("--out", type=Path, default=d.out_dir, help="results folder (%(default)s)")
    p.add_argument("--fresh", action="store_true", help="discard this corpus's service data and upload again")
    p.add_argument(
        "--setup",
        action="store_true",
        help="install python3-doc with apt-get first when it is missing (root)",
    )
    p.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra service setting (repeatable)",
    )
    p.add_argument(
        "--service-url",
        default=None,
        help="measure this running service instead of starting scripts/serve; query_v2 then needs "
        "--token or --jwt-secret",
    )
    p.add_argument("--token", default=None, help="an admin's bearer token for --service-url")
    p.add_argument(
        "--jwt-secret",
        default=None,
        help="the --service-url service's JWT_SECRET: the benchmark mints a token with role ADMIN",
    )
    p.add_argument(
        "--man-dirs",
        type=lambda t: tuple(Path(x) for x in _names(t)),
        default=d.man_dirs,
        help="man page folders (default: sections 1 and 8 under /usr/share/man)",
    )
    p.add_argument(
        "--html-root", type=Path, default=d.html_root, help="HTML documentation root (%(default)s)"
    )
    p.add_argument("--tag", default="", help="name part of the result files (quality-<tag>-...)")
    p.add_argument(
        "--natural",
        action="store_true",
        help="the hand-written questions of benchmarks/quality/natural/ instead, V1 beside V2 "
        "(its own options: scripts/bench quality --natural --help)",
    )


def main(argv: list[str]) -> int:
    """Parse and run (`--natural`: the natural-question benchmark, with its own options)."""
    if "--natural" in argv:
        from benchmarks.quality.natural.bench import main as natural_main

        return natural_main(argv)
    return run(parse(argv))
