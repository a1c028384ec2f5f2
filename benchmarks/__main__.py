"""`python -m benchmarks`: the search benchmark (see `scripts/bench --help`); `python -m benchmarks
quality ...` runs the retrieval quality benchmark instead (see `scripts/bench quality --help`), and
`python -m benchmarks v2-query ...` the /query_v2 latency benchmark (`scripts/bench v2-query --help`), and
`python -m benchmarks mcp ...` `rag_search` over MCP beside the HTTP routes (`scripts/bench mcp --help`), and
`python -m benchmarks pdf-text ...` the PDF text extractors (see `scripts/bench pdf-text --help`), and
`python -m benchmarks ocr ...` OCR of scanned pages (see `scripts/bench ocr --help`), and
`python -m benchmarks scan-retrieval ...` retrieval on scanned against text pages, and
`python -m benchmarks tenants ...` many Agents and users with LibreChat's query mix
(`scripts/bench tenants --help`), and `python -m benchmarks overhead ...` a search request's cost
outside the database (`scripts/bench overhead --help`), and `python -m benchmarks ingest ...` uploads
through `POST /embed`: throughput, the overhead beyond the embedder, peak memory
(`scripts/bench ingest --help`), and `python -m benchmarks ingest-ab ...` the previous release's
ingestion cost beside this checkout's (`scripts/bench ingest-ab --help`), and `python -m benchmarks pii`
the PII detectors' precision, recall and cost (`scripts/bench pii --help`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.options import Options, parse_env_pairs


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str]) -> Options:
    """Options from the command line."""
    d = Options()
    p = _parser(d)
    a = p.parse_args(argv)
    if a.files < 1 or a.chunks < a.files:
        p.error("--chunks must be at least --files")
    return Options(
        chunks=a.chunks,
        files=a.files,
        topics=a.topics,
        queries=a.queries,
        seed=a.seed,
        k=a.k,
        timed=a.timed,
        lists=a.lists,
        mixed=not a.no_mixed,
        configs=a.configs,
        concurrency=a.concurrency,
        tp_seconds=a.tp_seconds,
        fanout_files=a.fanout_files,
        fanout_reps=a.fanout_reps,
        reuse=a.reuse,
        data_dir=a.data_dir,
        out_dir=a.out,
        gin=not a.no_gin,
        explain=not a.no_explain,
        load_parallel=a.load_parallel,
        index_timeout=a.index_timeout,
        service_env=parse_env_pairs(a.service_env),
        client=a.client,
        ab=a.ab,
        ab_v2=a.ab_v2,
    )


def _parser(d: Options) -> argparse.ArgumentParser:
    """The search benchmark's arguments with `d`'s values as defaults (its --help needs nothing installed)."""
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Build a rag_api-format corpus in an embedded PostgreSQL, run ragoverlay against it "
        "and measure /query_multiple latency, recall@k, throughput, LibreChat's per-file fan-out "
        "and memory. Prints a markdown report; writes bench-results/<UTC>.json and latest.json.",
        epilog="Other benchmarks, each with its own --help: scripts/bench quality (retrieval quality), "
        "v2-query (/query_v2 latency), tenants (many Agents and users, LibreChat's query mix), "
        "mcp (rag_search over MCP beside the HTTP routes), ingest (uploads through POST /embed: "
        "throughput, overhead beyond the embedder, peak memory), ingest-ab (the previous release's "
        "ingestion cost beside this checkout's), pii (PII detectors: precision, recall, cost), pdf-text (PDF "
        "text extractors). This help needs nothing installed; a run, or another benchmark's help, "
        "creates .venv first.",
    )
    _corpus_arguments(p, d)
    _measurement_arguments(p, d)
    _run_arguments(p, d)
    p.add_argument(
        "--ab",
        metavar="REF",
        default=None,
        help="A/B: this checkout (B) against git ref REF (A) on one corpus and database, requests "
        "alternating A, B per row (1/100/373/1000 files, /query_multiple and /query_v2); uses --timed",
    )
    p.add_argument(
        "--ab-v2",
        action="store_true",
        help="with --ab: enable V2 for namespace A on both sides and build its index (through B) first",
    )
    return p


def _corpus_arguments(p: argparse.ArgumentParser, d: Options) -> None:
    """The corpus's shape: rows, files, topics, queries, seed."""
    p.add_argument(
        "--chunks", type=int, default=d.chunks, help="rows in langchain_pg_embedding (%(default)s)"
    )
    p.add_argument("--files", type=int, default=d.files, help="files, half per namespace (%(default)s)")
    p.add_argument("--topics", type=int, default=d.topics, help="vector clusters (%(default)s)")
    p.add_argument("--queries", type=int, default=d.queries, help="distinct query texts (%(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)


def _measurement_arguments(p: argparse.ArgumentParser, d: Options) -> None:
    """What is measured: k, timed queries, allow-lists, configurations, throughput, fan-out."""
    p.add_argument("--k", type=int, default=d.k)
    p.add_argument("--timed", type=int, default=d.timed, help="timed queries per allow-list (%(default)s)")
    p.add_argument(
        "--lists", type=_ints, default=d.lists, help="allow-list sizes (default 1,10,100,373,1000)"
    )
    p.add_argument("--no-mixed", action="store_true", help="skip the entity_id / foreign-file scenarios")
    p.add_argument(
        "--configs",
        type=_names,
        default=d.configs,
        help="service configurations in order: exact, auto, index (default all three)",
    )
    p.add_argument("--concurrency", type=_ints, default=d.concurrency, help="default 1,8,32")
    p.add_argument("--tp-seconds", type=float, default=d.tp_seconds, help="window per concurrency level")
    p.add_argument("--fanout-files", type=int, default=d.fanout_files)
    p.add_argument("--fanout-reps", type=int, default=d.fanout_reps)


def _run_arguments(p: argparse.ArgumentParser, d: Options) -> None:
    """Where the run keeps its data and how it starts the service and talks to it."""
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep the data folder (/tmp/ragoverlay-bench-<spec hash>) and reuse a loaded corpus",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="data folder (kept); default: temporary")
    p.add_argument("--out", type=Path, default=d.out_dir, help="results folder (%(default)s)")
    p.add_argument("--no-gin", action="store_true", help="skip langchain's GIN index on cmetadata")
    p.add_argument("--no-explain", action="store_true", help="skip the auto_explain plan pass")
    p.add_argument("--load-parallel", type=int, default=d.load_parallel, help="COPY connections")
    p.add_argument(
        "--index-timeout",
        type=float,
        default=d.index_timeout,
        help="seconds to wait for the HNSW index to become valid; with --ab-v2 also the longest the V2 "
        "backfill may go without progress (%(default)s)",
    )
    p.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra service setting for every configuration (repeatable), e.g. HNSW_EF_SEARCH=80",
    )
    p.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default=d.client,
        help="HTTP client: lean (asyncio streams, default) or httpx (costs ms of client CPU per request)",
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["quality"]:
        from benchmarks.quality.cli import main as quality_main

        sys.exit(quality_main(sys.argv[2:]))
    if sys.argv[1:2] == ["pdf-text"]:
        from benchmarks.pdf_text import main as pdf_text_main

        sys.exit(pdf_text_main(sys.argv[2:]))
    if sys.argv[1:2] == ["ocr"]:
        from benchmarks.ocr import main as ocr_main

        sys.exit(ocr_main(sys.argv[2:]))
    if sys.argv[1:2] == ["scan-retrieval"]:
        from benchmarks.scan_retrieval import main as scan_main

        sys.exit(scan_main(sys.argv[2:]))
    if sys.argv[1:2] == ["tenants"]:
        from benchmarks.tenants import main as tenants_main

        sys.exit(tenants_main(sys.argv[2:]))
    if sys.argv[1:2] == ["overhead"]:
        from benchmarks.overhead import main as overhead_main

        sys.exit(overhead_main(sys.argv[2:]))
    if sys.argv[1:2] == ["ingest"]:
        from benchmarks.ingest import main as ingest_main

        sys.exit(ingest_main(sys.argv[2:]))
    if sys.argv[1:2] == ["ingest-ab"]:
        from benchmarks.ingest_ab import main as ingest_ab_main

        sys.exit(ingest_ab_main(sys.argv[2:]))
    if sys.argv[1:2] == ["pii"]:
        from benchmarks.pii import main as pii_main

        sys.exit(pii_main(sys.argv[2:]))
    if sys.argv[1:2] == ["v2-query"]:
        from benchmarks.v2_query import main as v2_query_main

        sys.exit(v2_query_main(sys.argv[2:]))
    if sys.argv[1:2] == ["mcp"]:
        from benchmarks.mcp import main as mcp_main

        sys.argv = [sys.argv[0], *sys.argv[2:]]
        mcp_main()
        sys.exit(0)
    options = parse(sys.argv[1:])
    # after parsing: the help above needs the standard library only, a run needs everything
    from benchmarks.run import run

    if options.ab is not None:
        from benchmarks.ab import run_ab

        sys.exit(run_ab(options))
    sys.exit(run(options))
