"""Replay the natural questions through /query_v2's rank stage offline, for choosing defaults on dev.

    python -m benchmarks.quality.natural.replay capture [--others 60]     # once per index
    python -m benchmarks.quality.natural.replay score [--set fusion.rrf_k=30 ...] [--split dev]

`capture` opens the natural benchmark's service data (`data/bench-quality/natural-service-<fp>`,
made by `scripts/bench quality --natural` with the same `--others`; that service must not be
running) in process, with the service's own code: for every question the query analysis, the
channel plan and `V2SearchService.retrieve` (the single retrieve statement, inside the same
`Scope` the route builds) are run once and pickled with what they returned. `score` then runs the
service's pure `rank` and `build_evidence` on those lists with the settings given (`--set
section.field=value`, nested by dots, as `RAG_V2__SECTION__FIELD`), scores every answer as the
benchmark does, and prints V2 per split and kind beside V1 (read from the benchmark's JSON of the
same corpus). A rank-stage change is measured in seconds; a retrieval or index change needs a new
capture.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.progress import Progress
from benchmarks.quality.natural import bench, dense, dense_rows, dense_windows, scoring, sets
from benchmarks.quality.natural.diagnose import diagnose
from benchmarks.quality.natural.sets import UNANSWERABLE
from benchmarks.service import REPO_ROOT


@dataclass
class Case:
    """One question as captured: what rank() needs, and what scoring needs."""

    qid: str
    corpus: str
    kind: str
    split: str
    text: str
    kb: str
    gold: tuple[str, ...]
    answer: str | None
    file_ids: list[str]
    analysis: Any
    lists: dict[str, list[Any]]
    statistics: Any
    failed: list[str] = field(default_factory=list)
    # V1 (/query_multiple's search, k 10) in the same capture: (file_id, text) nearest first
    v1: list[tuple[str, str]] = field(default_factory=list)
    # the chunks around every candidate ((document_id, ordinal) -> Neighbour), for the passages
    neighbours: dict[tuple[int, int], Any] = field(default_factory=dict)
    # the question's vector (the service's embedder), for the dense variants of `dense.py`
    query_vector: Any = None


# the benchmark's data and results may live in another checkout (the one that ran it)
DATA_ROOT = Path(os.environ.get("NATURAL_REPLAY_ROOT", str(REPO_ROOT)))


def _options(others: int | None) -> bench.Options:
    return bench.Options(
        split="all",
        others=others,
        write_results=False,
        data_dir=DATA_ROOT / "data" / "bench-quality",
        out_dir=DATA_ROOT / "bench-results",
    )


def _splits(folder: Path, key: str = "split") -> dict[str, str]:
    """Each question's `key` (its split, or its language with "lang"), by id."""
    out: dict[str, str] = {}
    for name in sets.corpus_names(folder):
        path = sets.questions_path(name, folder)
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    item = json.loads(line)
                    out[item["id"]] = item[key]
    return out


async def capture(
    others: int | None, out: Path, corpora: Sequence[str] = (), *, attach: bool = False
) -> None:
    """Run analysis, plan and retrieve for every question in process; pickle the cases.

    `attach`: the benchmark's service is still running (uploading another corpus): use its database
    through the address it records, as scripts/mcp does, and ask only `corpora`'s questions.
    """
    from app.access.principal import anonymous
    from app.config import Settings
    from app.main import create_app

    opts = _options(others)
    progress = Progress()
    corpus, _items, _facts = bench.build(opts, progress)
    service_dir = opts.data_dir / f"natural-service-{corpus.fingerprint()}"
    if not service_dir.is_dir():
        raise SystemExit(f"no service data at {service_dir}: run scripts/bench quality --natural first")
    kbs = corpus.kbs()
    files: dict[str, list[str]] = {}
    for doc in corpus.documents:
        files.setdefault(doc.kb, []).append(doc.file_id)
    splits = _splits(opts.folder)
    settings = Settings(
        DATA_DIR=str(service_dir), RAG_V2_NAMESPACE_IDS=",".join(sorted(kbs)), INDEXER_CONCURRENCY=0
    )
    app = create_app(settings, attach_database=attach)
    cases: list[Case] = []
    kb_data: dict[str, dense.KbData] = {}
    async with app.router.lifespan_context(app):
        services = app.state.services
        v2 = services.evidence.parts.search
        search = services.search
        for kb in sorted(kbs):
            if corpora and not any(q.kb == kb and q.set in corpora for q in corpus.queries):
                continue
            scope = await services.access.read_scope(anonymous(), kb, sorted(files[kb]))
            kb_data[kb] = await _kb_data(v2, search, kb, scope)
            progress.say(
                f"{kb}: {len(kb_data[kb].details)} evidence chunks, {len(kb_data[kb].v1_texts)} V1 chunks"
            )
        queries = [q for q in corpus.queries if not corpora or q.set in corpora]
        for n, q in enumerate(sorted(queries, key=lambda q: q.qid), start=1):
            cases.append(await _capture_case(services, q, sorted(files[q.kb]), splits.get(q.qid, "?")))
            if n % 50 == 0:
                progress.say(f"captured {n}/{len(corpus.queries)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        pickle.dump({"fingerprint": corpus.fingerprint(), "cases": cases, "kbs": kb_data}, f)
    progress.say(f"wrote {len(cases)} cases to {out}")


# every evidence chunk of a run's staged files, with its vector; every V1 chunk of the files, with its
# vector (the benchmark's own reads: the details themselves come through the service's scoped read)
EVIDENCE_VECTORS = """
    SELECT c.document_id, c.ordinal, c.embedding::real[] AS vector
    FROM ragoverlay_v2_run_files rf
    JOIN ragoverlay_v2_chunks c ON c.document_id = rf.document_id
    WHERE rf.run_id = $1 AND rf.state = 'staged' AND rf.file_id = ANY($2::text[])
    ORDER BY c.document_id, c.ordinal
"""
V1_VECTORS = """
    SELECT custom_id AS file_id, document, cmetadata::text AS metadata, embedding::real[] AS vector
    FROM langchain_pg_embedding
    WHERE collection_id = $1 AND custom_id = ANY($2::text[])
    ORDER BY custom_id, (cmetadata->>'page')::int NULLS FIRST, uuid
"""


async def _capture_case(services: Any, q: Any, ids: list[str], split: str) -> Case:
    """One question run through the service's analysis, plan and retrieve, and V1's search, as served."""
    from app.access.principal import anonymous
    from app.evidence.query.analysis import analyze_query
    from app.evidence.query.plan import plan_channels
    from app.evidence.query.schemas import QueryV2Request
    from app.evidence.query.service import QUERY_CONFIG

    v2, search = services.evidence.parts.search, services.search
    request = QueryV2Request(query=q.text, file_ids=ids, entity_id=q.kb, k=10)
    scope = await services.access.read_scope(anonymous(), q.kb, ids)
    analysis = analyze_query(q.text, QUERY_CONFIG)
    plan = plan_channels(analysis, QUERY_CONFIG.stopwords)
    retrieved = await v2.retrieve(request, scope, q.kb, plan)
    neighbours = await _neighbours(v2, scope, retrieved, v2.tuning.evidence.context_reach)
    v1 = await search.search(q.text, scope, 10)
    query_vector = np.asarray(await search.embedder.embed_query(q.text), dtype=np.float32)
    return Case(
        qid=q.qid,
        corpus=q.set,
        kind=q.kind,
        split=split,
        text=q.text,
        kb=q.kb,
        gold=tuple(q.relevant),
        answer=q.answer,
        file_ids=ids,
        analysis=analysis,
        lists=retrieved.lists,
        statistics=retrieved.statistics,
        failed=list(retrieved.failed),
        v1=[(h.file_id, h.text) for h in v1.hits],
        neighbours=neighbours,
        query_vector=query_vector,
    )


async def _kb_data(v2: Any, search: Any, kb: str, scope: Any) -> dense.KbData:
    """Every evidence chunk of the knowledge base's active run and every V1 chunk, with their vectors."""
    from app.evidence.store import channels as channels_sql

    ids = list(scope.file_ids)
    async with v2.pool.acquire(timeout=600) as conn:
        run = await v2.active_runs.run(conn, kb, None)
        rows = await conn.fetch(EVIDENCE_VECTORS, run.run_id, ids, timeout=600)
        keys = [(int(r["document_id"]), int(r["ordinal"])) for r in rows]
        details: dict[tuple[int, int], Any] = {}
        for start in range(0, len(keys), 2000):
            found = await channels_sql.chunk_details(conn, scope, run.run_id, keys[start : start + 2000])
            details.update({(d.document_id, d.ordinal): d for d in found})
        v1_rows = await conn.fetch(V1_VECTORS, search.info.collection_id, ids, timeout=600)
    dims = next((len(r["vector"]) for r in rows if r["vector"] is not None), 0)
    kept = [(r, details[k]) for r, k in zip(rows, keys, strict=True) if k in details]
    vectors = np.array(
        [r["vector"] if r["vector"] is not None else [0.0] * dims for r, _ in kept], dtype=np.float32
    )
    pages: list[int | None] = []
    for r in v1_rows:
        page = json.loads(r["metadata"] or "{}").get("page")
        pages.append(page if isinstance(page, int) and not isinstance(page, bool) else None)
    return dense.KbData(
        details=[d for _, d in kept],
        vectors=dense.unit_rows(vectors),
        v1_files=[r["file_id"] for r in v1_rows],
        v1_texts=[r["document"] or "" for r in v1_rows],
        v1_pages=pages,
        v1_vectors=dense.unit_rows(np.array([r["vector"] for r in v1_rows], dtype=np.float32)),
    )


async def _neighbours(v2: Any, scope: Any, retrieved: Any, reach: int) -> dict[tuple[int, int], Any]:
    """The chunks around every candidate of every list, read as the service reads a result's."""
    from app.evidence.query.passages import Neighbour, neighbour_keys
    from app.evidence.query.records import Fused

    candidates = {id(s.candidate): s.candidate for hits in retrieved.lists.values() for s in hits}
    items = [Fused(c, 0.0, (), {}) for c in candidates.values()]
    keys = neighbour_keys(items, len(items), reach)
    found = await v2.neighbours(scope, keys, list(scope.file_ids or ())) if keys else {}
    return {key: Neighbour(text, place) for key, (text, place) in found.items()}


def _coerce(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.startswith(("{", "[")):
        return json.loads(text)
    return text


def settings_with(pairs: Sequence[str]) -> Any:
    """V2Settings() with `a.b.c=value` overrides (validated as the service validates them)."""
    from app.evidence.settings import V2Settings

    data: dict[str, Any] = {}
    for pair in pairs:
        path, _, value = pair.partition("=")
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = _coerce(value)
    return V2Settings.model_validate(data)


async def _rank_all(cases: Sequence[Case], tuning: Any) -> list[tuple[Case, list[Any], Any]]:
    from app.evidence.query.evidence import build_evidence
    from app.evidence.query.passages import widen
    from app.evidence.query.ranking import rank
    from app.evidence.query.rerank import FeatureReranker

    reranker = FeatureReranker(tuning.rerank.features)
    policy = tuning.evidence
    out = []
    for case in cases:
        ranking = await rank(case.analysis, case.lists, case.statistics, tuning, reranker)
        items = ranking.items
        if policy.context_chars > 0:  # as the service widens its results (app/evidence/query/passages.py)
            items = widen(
                items, 10, case.neighbours, context_chars=policy.context_chars, reach=policy.context_reach
            )
        results = [] if ranking.decision.refuse else build_evidence(items, case.file_ids, 10)
        out.append((case, results, ranking))
    return out


def score_case(case: Case, files: Sequence[str], texts: Sequence[str], *, refused: bool) -> scoring.Scored:
    """One answer to `case` (its passages' files and texts) scored as the benchmark scores it."""
    return scoring.score(
        qid=case.qid,
        corpus=case.corpus,
        kind=case.kind,
        gold=case.gold,
        answer=case.answer,
        refused=refused,
        passage_files=files,
        passage_texts=texts,
    )


def score_cases(ranked: Sequence[tuple[Case, list[Any], Any]]) -> list[scoring.Scored]:
    """Each case's V2 answer scored as the benchmark scores it."""
    return [
        score_case(case, [r.file_id for r in results], [r.content for r in results], refused=not results)
        for case, results, _ in ranked
    ]


def v1_scores(fingerprint: str) -> dict[str, dict[str, Any]]:
    """V1's per-item scores from the newest benchmark JSON of this corpus (qid -> scores)."""
    best: dict[str, dict[str, Any]] = {}
    for path in sorted((DATA_ROOT / "bench-results").glob("quality-natural*-2*.json")):
        doc = json.loads(path.read_text())
        if doc.get("corpus", {}).get("fingerprint") != fingerprint:
            continue
        for row in doc.get("per_item", []):
            if "v1-dense" in row.get("systems", {}):
                best[row["id"]] = row["systems"]["v1-dense"]
    return best


def _rates(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float, float, float]:
    if not rows:
        return (float("nan"),) * 4
    n = len(rows)
    return (
        sum(bool(r["first"]) for r in rows) / n,
        sum(bool(r["top5"]) for r in rows) / n,
        sum(bool(r["answer"]) for r in rows) / n,
        sum(bool(r["refused"]) for r in rows) / n,
    )


def table(
    cases: Sequence[Case], scored: Sequence[Mapping[str, Any]], v1: Mapping[str, Any], split: str
) -> str:
    """Per kind: V1 | V2 first, top 5, answer, refused (answerable) or refused (unanswerable)."""
    lines = [f"split {split}: kind (n)        first V1/V2    top5 V1/V2     answer V1/V2   V2 refused"]
    by_kind: dict[str, list[tuple[Case, Mapping[str, Any]]]] = {}
    langs = _splits(sets.HERE, "lang")
    for case, s in zip(cases, scored, strict=True):
        if split != "all" and case.split != split:
            continue
        by_kind.setdefault(case.kind, []).append((case, s))
        by_kind.setdefault("answerable" if case.kind not in UNANSWERABLE else "unanswerable", []).append(
            (case, s)
        )
        if case.kind not in UNANSWERABLE:
            by_kind.setdefault(f"answerable, {langs.get(case.qid, '?')}", []).append((case, s))
        else:
            by_kind.setdefault(f"unanswerable, {langs.get(case.qid, '?')}", []).append((case, s))
    order = [
        "paraphrase",
        "table",
        "identifier",
        "keyword",
        "section",
        "answerable",
        "answerable, en",
        "answerable, de",
        "unanswerable-named",
        "unanswerable-topic",
        "unanswerable",
        "unanswerable, en",
        "unanswerable, de",
    ]
    for kind in order:
        group = by_kind.get(kind, [])
        if not group:
            continue
        mine = _rates([s for _, s in group])
        theirs = _rates([v1[c.qid] for c, _ in group if c.qid in v1])
        if kind.startswith("unanswerable"):
            lines.append(f"  {kind:22s}({len(group):3d})  {'':42s} {mine[3]:.3f}")
        else:
            lines.append(
                f"  {kind:22s}({len(group):3d})  {theirs[0]:.3f}/{mine[0]:.3f}  {theirs[1]:.3f}/{mine[1]:.3f}"
                f"  {theirs[2]:.3f}/{mine[2]:.3f}  {mine[3]:.3f}"
            )
    return "\n".join(lines)


def _as_row(s: scoring.Scored) -> dict[str, Any]:
    return {"first": s.first, "top5": s.top5, "answer": s.answer, "refused": s.refused}


def dense_facts(cases: Sequence[Case], prepared: Mapping[str, dense.Prepared], v1: Mapping[str, Any]) -> str:
    """Per knowledge base: chunks, evidence chunks no V1 chunk holds, V1 chunks holding none (pooled:
    left without a vector); and how often V1 recomputed here (stored vectors) equals V1 as served."""
    lines = []
    for kb, p in sorted(prepared.items()):
        lines.append(
            f"{kb}: {len(p.kb.details)} evidence chunks ({p.links.unmapped_evidence} in no V1 chunk), "
            f"{len(p.kb.v1_texts)} V1 chunks ({p.links.empty_v1} holding none; pooled zero: {p.pooled_empty})"
        )
    here = v1_offline(cases, prepared, pooled=False)
    same = sum(
        c.qid in v1 and all(bool(here[c.qid][k]) == bool(v1[c.qid][k]) for k in ("first", "top5", "answer"))
        for c in cases
    )
    lines.append(f"V1 from the captured vectors equals V1 as served on {same} of {len(cases)} questions")
    return "\n".join(lines)


def load(path: Path) -> tuple[str, list[Case]]:
    """The fingerprint and cases of a capture."""
    doc = load_document(path)
    return doc["fingerprint"], doc["cases"]


def load_document(path: Path) -> dict[str, Any]:
    """A capture as written: fingerprint, cases and (newer captures) each knowledge base's chunks."""
    with path.open("rb") as f:
        doc: dict[str, Any] = _Unpickler(f).load()  # our own capture, written by `capture` above
    return doc


def with_dense(
    cases: Sequence[Case], prepared: Mapping[str, dense.Prepared], *, source: str, hits: int, limit: int
) -> list[Case]:
    """The cases with the vector channel of `source` (dense.py) and every evidence chunk as a neighbour."""
    from dataclasses import replace

    out = []
    for case in cases:
        p = prepared[case.kb]
        lists = dict(case.lists)
        if source != "evidence" and "vector" in lists:  # a failed channel stays failed
            lists["vector"] = dense.vector_list(
                p,
                case.query_vector,
                case.analysis.terms,
                case.statistics,
                source=source,
                hits=hits,
                limit=limit,
            )
        out.append(replace(case, lists=lists, neighbours={**p.neighbours, **case.neighbours}))
    return out


def v1_offline(
    cases: Sequence[Case], prepared: Mapping[str, dense.Prepared], *, pooled: bool
) -> dict[str, Any]:
    """V1's rows computed here from the captured vectors (stored or pooled), scored as the run does."""
    rows = {}
    for case in cases:
        files, texts = dense.v1_answer(prepared[case.kb], case.query_vector, pooled=pooled)
        rows[case.qid] = _as_row(score_case(case, files, texts, refused=False))
    return rows


class _Unpickler(pickle.Unpickler):
    """Finds `Case` here whether the capture ran as `python -m` (`__main__.Case`) or imported."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__" and name == "Case":
            return Case
        return super().find_class(module, name)


def _parser() -> argparse.ArgumentParser:
    """The command line's two commands and their options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality.natural.replay", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture", help="run retrieve for every question once, in process")
    c.add_argument("--others", type=int, default=60)
    c.add_argument("--out", type=Path, default=None)
    c.add_argument("--corpora", default="", help="a,b: only these corpora's questions")
    c.add_argument("--attach", action="store_true", help="the benchmark's service is running: attach")
    s = sub.add_parser("score", help="rank the captured lists with these settings and score them")
    s.add_argument("--capture", type=Path, default=None)
    s.add_argument("--others", type=int, default=60)
    s.add_argument("--set", dest="pairs", action="append", default=[], help="section.field=value")
    s.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    s.add_argument("--dump", type=Path, default=None, help="write per-question outcomes (JSON lines)")
    s.add_argument("--diagnose", action="store_true", help="print the gold file's rank per stage")
    s.add_argument(
        "--vector-source",
        choices=dense.VECTOR_SOURCES,
        default="evidence",
        help="the vector channel (dense.py)",
    )
    s.add_argument(
        "--v1-hits", type=int, default=20, help="V1 chunks a v1-* vector channel maps (%(default)s)"
    )
    s.add_argument("--v1-source", choices=dense.V1_SOURCES, default="stored", help="V1's vectors (dense.py)")
    s.add_argument(
        "--pool",
        choices=("rows", "prose", "rows-own", "prose-own", *dense_rows.POOLS),
        default="rows",
        help="pooled: rows count or not; -own: a V1 chunk holding none keeps its vector (dense_rows.py)",
    )
    return p


def _v1_rows(fingerprint: str, cases: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """V1 as served by the benchmark's run where it asked the question, else as the capture asked it."""
    captured = {
        case.qid: _as_row(score_case(case, [f for f, _ in case.v1], [t for _, t in case.v1], refused=False))
        for case in cases
        if case.v1
    }
    served = v1_scores(fingerprint)
    keys = ("first", "top5", "answer")
    same = sum(
        qid in captured and all(bool(captured[qid][k]) == bool(row[k]) for k in keys)
        for qid, row in served.items()
    )
    print(
        f"V1: {len(served)} rows as the run served them ({same} scored alike by the capture); others captured"
    )
    return {**captured, **served}


def _with_representation(
    a: argparse.Namespace,
    doc: dict[str, Any],
    cases: list[Case],
    v1: dict[str, Any],
    capture: Path,
    limit: int,
) -> tuple[list[Case], dict[str, Any]]:
    """The cases with another dense representation's vector channel (and V1 pooled), as asked."""
    if a.vector_source == "evidence" and a.v1_source == "stored":
        return cases, v1
    if not doc.get("kbs"):
        raise SystemExit("this capture has no knowledge base data: capture again")
    pool = a.pool if a.v1_source == "pooled" else None
    windows = dense_windows.load(capture) if a.vector_source.startswith("v1w-") else {}
    prepared = {
        kb: dense_rows.prepare(data, pool=pool, windows=windows.get(kb), source=a.vector_source)
        for kb, data in doc["kbs"].items()
    }
    print(dense_facts(cases, prepared, v1))
    cases = with_dense(cases, prepared, source=a.vector_source, hits=a.v1_hits, limit=limit)
    if a.v1_source == "pooled":
        v1 = v1_offline(cases, prepared, pooled=True)
    return cases, v1


def _dump(path: Path, ranked: Sequence[Any], scored: Sequence[Any], v1: dict[str, Any]) -> None:
    """Per-question outcomes as JSON lines (for comparing two settings question by question)."""
    with path.open("w") as f:
        for (case, results, ranking), sc in zip(ranked, scored, strict=True):
            row = {
                "id": case.qid,
                "split": case.split,
                "kind": case.kind,
                "q": case.text,
                "gold": case.gold,
                "v2": _as_row(sc),
                "v1": v1.get(case.qid),
                "files": [r.file_id for r in results][:5],
                "refusal": ranking.decision.as_debug(),
            }
            f.write(json.dumps(row) + "\n")


def default_capture(others: int = 60) -> Path:
    """Where `capture --others N` writes by default."""
    return DATA_ROOT / "bench-results" / "replay" / f"capture-others{others}.pkl"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    a = _parser().parse_args(argv)
    default = default_capture(a.others)
    if a.command == "capture":
        names = tuple(x for x in a.corpora.split(",") if x)
        asyncio.run(capture(a.others, a.out or default, names, attach=a.attach))
        return 0
    doc = load_document(a.capture or default)
    tuning = settings_with(a.pairs)
    t0 = time.perf_counter()
    v1 = _v1_rows(doc["fingerprint"], doc["cases"])
    cases, v1 = _with_representation(a, doc, doc["cases"], v1, a.capture or default, tuning.channels.limit)
    ranked = asyncio.run(_rank_all(cases, tuning))
    scored = score_cases(ranked)
    print(table(cases, [_as_row(s) for s in scored], v1, a.split))
    if a.diagnose:
        print(diagnose(ranked, a.split))
    print(f"({len(cases)} cases ranked in {time.perf_counter() - t0:.1f} s; V1 rows: {len(v1)})")
    if a.dump:
        _dump(a.dump, ranked, scored, v1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
