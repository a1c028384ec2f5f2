"""`scripts/bench quality` in miniature: a handful of documents, the real service, every metric.

Keeps the harness from rotting; asserts that it runs and reports every figure, never a level of
quality or speed. The man pages and HTML pages are written here (a fresh machine may have neither
python3-doc nor the same man pages); `man` and `col` must exist.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.http import LeanHTTP
from benchmarks.progress import Progress
from benchmarks.quality import service as svc
from benchmarks.quality.natural import bench as natural
from benchmarks.quality.natural.busy import BUSY_KB
from benchmarks.quality.run import Options, Sizes, run_async
from benchmarks.quality.systems import SystemUnavailable
from benchmarks.quality.v2 import FINAL, STAGE_SYSTEMS, V2Client
from benchmarks.quality.v2index import wait_for_index
from tests.fixtures.patience import ceiling

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAN_PAGES = {
    "frobnicate": ("adjust the widget tension of a loom", "The loom keeps its threads taut with springs."),
    "quuxctl": ("control the quux daemon over its socket", "It sends start, stop and reload to quuxd."),
    "tidewatch": ("print the harbour tide tables for a date", "High and low water for each port, in metres."),
    "lampkeep": ("rotate the lighthouse lamp log files", "Old logs are compressed and kept for a year."),
    "saltpan": ("measure the salinity of a sample of brine", "Reads a conductivity probe and prints ppt."),
    "netmend": (
        "repair torn fishing nets from a pattern file",
        "Each knot is retied in the pattern's order.",
    ),
}

HTML_PAGES = {
    "library/boats.html": (
        "Boats",
        [("Skiff", "4.2 metres of larch planking"), ("Trawler", "18 metres with a steel hull")],
        [("boats.Hull.caulk", "caulk(seam, pitch='pine tar')"), ("boats.launch", "launch(boat, tide)")],
    ),
    "library/knots.html": (
        "Knots",
        [("Bowline", "a fixed loop that never slips"), ("Clove hitch", "binds a line to a post quickly")],
        [("knots.tie", "tie(rope, kind='bowline')"), ("knots.Rope.splice", "splice(other, tucks=5)")],
    ),
}


NATURAL = {
    "tiny-html": (
        "html",
        "html",
        ["library/boats.html", "library/knots.html"],
        [
            (
                "table",
                "How is a skiff built?",
                "library/boats.html",
                "Boats",
                "Skiff",
                "4.2 metres of larch planking",
            ),
            (
                "paraphrase",
                "Which knot can be trusted to hold?",
                "library/knots.html",
                "Knots",
                None,
                "a fixed loop that never slips",
            ),
            ("unanswerable-named", "What does boats.Hull.scrape do?", None, None, None, "boats.Hull.scrape"),
        ],
    ),
    "tiny-man": (
        "",
        "man",
        ["man1/frobnicate.1.gz"],
        [
            (
                "identifier",
                "What does frobnicate --dry-run do?",
                "man1/frobnicate.1.gz",
                "OPTIONS",
                None,
                "Show what would be done.",
            )
        ],
    ),
}


def _natural_sets(root: Path) -> Path:
    """Corpus and question files of two tiny natural corpora over the smoke test's pages."""
    folder = root / "natural"
    folder.mkdir(exist_ok=True)
    for name, (sub, render, files, items) in NATURAL.items():
        spec = {"name": name, "language": "en", "package": "smoke", "root": str(root / sub), "render": render}
        (folder / f"{name}.corpus.json").write_text(json.dumps({**spec, "files": files}))
        lines = []
        for n, (kind, question, gold, section, row, answer) in enumerate(items, start=1):
            unanswerable = kind.startswith("unanswerable")
            item = {
                "id": f"{name}-{n:03d}",
                "corpus": name,
                "lang": "en",
                "kind": kind,
                "split": "dev",
                "question": question,
                "gold_files": [] if unanswerable else [gold],
                "gold_location": {"section": section, "table_row": row},
                "answer": None if unanswerable else answer,
                "evidence": None if unanswerable else (f"{row} {answer}" if row else answer),
                "absent_terms": [answer] if unanswerable else [],
            }
            lines.append(json.dumps(item))
        (folder / f"{name}.questions.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _roff(name: str, description: str, body: str) -> str:
    filler = " ".join(
        f"The {name} command reads its settings from /etc/{name}.conf line {i}." for i in range(6)
    )
    return (
        f'.TH {name.upper()} 1 "2026" "smoke" "User Commands"\n.SH NAME\n{name} \\- {description}\n'
        f".SH SYNOPSIS\n.B {name}\n[\\-\\-dry\\-run] [\\-\\-keep\\-going]\n"
        f".SH DESCRIPTION\n{body}\n{filler}\n"
        f".SH OPTIONS\n.TP\n.B \\-\\-dry\\-run\nShow what would be done.\n"
    )


def _html(title: str, rows: list[tuple[str, str]], defs: list[tuple[str, str]]) -> str:
    body_rows = "".join(f"<tr><td><p>{label}</p></td><td><p>{value}</p></td></tr>" for label, value in rows)
    dts = "".join(
        f'<dl><dt class="sig sig-object py" id="{ident}">{sig}<a class="headerlink" href="#">¶</a></dt>'
        f"<dd><p>Documented behaviour of {ident} for the smoke test.</p></dd></dl>"
        for ident, sig in defs
    )
    return (
        f"<html><head><title>{title}</title></head><body><div class='body'><h1>{title}</h1>"
        f"<p>This page describes {title.lower()} used in the harbour.</p>"
        f"<table><thead><tr><th><p>Name</p></th><th><p>Build</p></th></tr></thead><tbody>{body_rows}"
        f"</tbody></table>{dts}</div></body></html>"
    )


@pytest.fixture(scope="module")
def sources() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-quality-"))
    root.chmod(0o755)  # the embedded server may run as another user when tests run as root
    man1 = root / "man1"
    man1.mkdir()
    for name, (description, body) in MAN_PAGES.items():
        (man1 / f"{name}.1.gz").write_bytes(gzip.compress(_roff(name, description, body).encode()))
    for rel, (title, rows, defs) in HTML_PAGES.items():
        target = root / "html" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_html(title, rows, defs))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_quality_benchmark_runs_and_reports_every_metric(sources: Path) -> None:
    if shutil.which("man") is None or shutil.which("col") is None:
        pytest.skip("man-db (man, col) is not installed")
    opts = Options(
        sizes=Sizes(pages=4, held_out=2, html_pages=2, table_queries=4, identifier_queries=4, mutants=4),
        systems=("v1-dense", "bm25", "rrf"),
        data_dir=sources / "data",
        out_dir=sources / "results",
        man_dirs=(sources / "man1",),
        html_root=sources / "html",
        v2_wait_s=ceiling(180),
    )

    async def scenario() -> tuple[dict, int, str, dict, dict | None]:
        kbs = ["agent_quality_man_1", "agent_quality_html", *(natural.kb_name(n) for n in NATURAL), BUSY_KB]
        env = {"RAG_V2_NAMESPACE_IDS": ",".join(kbs)}
        served = await svc.start(sources / "service", env, timeout_s=ceiling(240))
        try:
            assert served.token  # the benchmark's own service runs with auth and an admin
            opts.service_url, opts.token = served.base_url, served.token
            headers = svc.auth_headers(served.token)
            async with httpx.AsyncClient(
                base_url=served.base_url, timeout=ceiling(30), headers=headers
            ) as client:
                probe = await client.post("/query_v2", json={"query": "x", "file_ids": ["man-frobnicate.1"]})
            message = ""
            if probe.status_code == 404:
                # no route: the V2 system must fail clearly, never be skipped
                http = LeanHTTP("127.0.0.1", served.port)
                try:
                    await V2Client(http, {"agent_quality_man_1": ["man-frobnicate.1"]}, debug=True).ask(
                        "tide tables", "agent_quality_man_1"
                    )
                except SystemUnavailable as exc:
                    message = str(exc)
                finally:
                    await http.aclose()
            else:
                opts.systems = (*opts.systems, "query_v2")
            result = await run_async(opts, Progress())
            # the wait for the V2 index against the real admin routes: the first run backfills each
            # knowledge base (uploads alone make no run), a second wait finds them ready
            async with httpx.AsyncClient(
                base_url=served.base_url, timeout=ceiling(60), headers=headers
            ) as client:
                first = await wait_for_index(client, result["corpus"]["kb_files"], timeout_s=ceiling(180))
                again = await wait_for_index(client, result["corpus"]["kb_files"], timeout_s=ceiling(30))
            natural_result = None
            if probe.status_code != 404:
                # the natural questions through the same service: two corpora (HTML, a man page)
                nat_opts = natural.Options(
                    split="all",
                    folder=_natural_sets(sources),
                    data_dir=sources / "data",
                    out_dir=sources / "results",
                    v2_wait_s=ceiling(180),
                    service_url=served.base_url,
                    token=served.token,
                    busy=True,  # and timed again while uploads run beside the questions
                )
                natural_result = await natural.run_async(nat_opts, Progress())
                async with httpx.AsyncClient(
                    base_url=served.base_url, timeout=ceiling(30), headers=headers
                ) as client:
                    left = await svc.stored_ids(client, BUSY_KB)
                    assert not [f for f in left if f.startswith("busy-")]  # the copies were deleted
                    # the copies went to a namespace evidence search serves: their uploads started its
                    # index (the first one queues a run; later ones stage into it once it is active)
                    runs = (await client.get("/v2/runs", params={"namespace": BUSY_KB})).json()
                    assert runs and all(r["namespace"] == BUSY_KB for r in runs), runs
            return result, probe.status_code, message, {"first": first, "again": again}, natural_result
        finally:
            svc.stop(served)

    result, v2_status, v2_message, waits, nat = asyncio.run(scenario())

    corpus = result["corpus"]
    assert corpus["knowledge_bases"] == {"agent_quality_man_1": 4, "agent_quality_html": 2}
    kinds = corpus["queries"]
    assert kinds["man/description"] == 4
    assert kinds["unanswerable/held-out-description"] == 2
    assert kinds.get("html-tables/table-cell", 0) >= 1 and kinds.get("html-identifiers/identifier", 0) >= 1
    assert kinds.get("unanswerable/mutated-identifier", 0) + kinds.get("unanswerable/mutated-option", 0) >= 1

    metrics = ("recall_at_1", "recall_at_5", "recall_at_10", "mrr", "ndcg_at_10", "false_refusal_rate")
    for system in ("v1-dense", "bm25", "rrf(v1-dense, bm25)"):
        sets = result["summary"][system]
        for set_name in ("man", "html-tables", "html-identifiers"):
            s = sets[set_name]
            for metric in metrics:
                assert s[metric] is not None and 0.0 <= s[metric] <= 1.0, (system, set_name, metric)
            assert s["latency_p50_ms"] is not None and s["latency_p95_ms"] >= s["latency_p50_ms"]
        for set_name in ("html-tables", "html-identifiers"):
            assert sets[set_name]["answer_in_passage"] is not None
        assert sets["man"]["answer_in_passage"] is None  # man queries carry no answer text
        assert sets["unanswerable"]["refusal_rate"] == 0.0  # none of these systems refuses

    written = json.loads((sources / "results" / "quality-latest.json").read_text())
    assert written["summary"] == result["summary"]
    report = (sources / "results" / "quality-latest.md").read_text()
    assert "| v1-dense |" in report and "nDCG@10" in report and "Unanswerable" in report

    for kb, files in result["corpus"]["knowledge_bases"].items():
        first, again = waits["first"]["knowledge_bases"][kb], waits["again"]["knowledge_bases"][kb]
        assert first["files"] == files and first["chunks"] > 0 and first["run_id"] == again["run_id"]
        assert first["backfilled"] == (v2_status == 404) and not again["backfilled"]

    # /query_v2: a missing route is a clear failure, never a silent skip; with the route, every stage,
    # the targets, the V2 index phase and both grids are reported
    if v2_status == 404:
        assert "/query_v2" in v2_message and "404" in v2_message
        return
    for system in (*STAGE_SYSTEMS.values(), FINAL):
        for set_name in ("man", "html-tables", "html-identifiers"):
            s = result["summary"][system][set_name]
            for metric in metrics:
                assert s[metric] is not None and 0.0 <= s[metric] <= 1.0, (system, set_name, metric)
    final = result["summary"][FINAL]
    assert final["unanswerable"]["refusal_rate"] is not None and final["all"]["latency_p95_ms"] is not None
    assert final["all"]["timed"] == sum(kinds.values())
    v2 = result["v2"]
    assert set(v2["index"]["knowledge_bases"]) == {"agent_quality_man_1", "agent_quality_html"}
    assert v2["refusal_grid"]["chosen"] is not None and v2["fusion_grid"]["service"] is not None
    assert v2["agreement"]["same"] + v2["agreement"]["differ"] == v2["timed"]
    assert any(r["target"].startswith("fused >=") for r in result["targets"])
    assert "/query_v2 targets" in report and "Refusal policy, offline grid" in report

    # the natural questions: every question asked of V1 and of V2 with its stages, every figure reported
    assert nat is not None
    assert {n: c["questions"] for n, c in nat["corpus"]["corpora"].items()} == {"tiny-html": 3, "tiny-man": 1}
    assert nat["corpus"]["knowledge_bases"]["agent_nat_tiny_man"] == ["tiny-man:man1/frobnicate.1.gz"]
    for system in ("v1-dense", *STAGE_SYSTEMS.values(), FINAL):
        answerable = nat["summary"][system]["answerable"]
        assert answerable["answerable"] == 3, system
        for metric in ("first", "top5", "answer", "answer_caseless", "answerable_refused"):
            assert 0.0 <= answerable[metric] <= 1.0, (system, metric)
    assert nat["summary"]["v1-dense"]["kind:unanswerable-named"]["unanswerable_refused"] == 0.0
    assert nat["summary"][FINAL]["kind:unanswerable-named"]["unanswerable_refused"] is not None
    assert {r["target"] for r in nat["targets"]} >= {"V2 top 5 >= V1", "V2 false refusals", "V2 refused"}
    assert len(nat["per_item"]) == 4
    busy = nat["latency_busy"]
    assert busy["uploads"] >= 1 and busy["failures"] == 0 and busy["evidence_chunks"] >= 0
    assert busy["latency"]["groups"]["all"]["n"] == 4 and busy["latency"]["target"]["value"] is not None
    printed = (sources / "results" / "quality-natural-latest.txt").read_text()
    assert "tiny-man" in printed and "first V1" in printed and "Targets" in printed
    assert "while uploads ran in the service" in printed
