"""`POST /query_v2` per stage: one debug request per query, read as six systems.

The admin-only `debug` of a `/query_v2` answer holds each stage's own top list (CONTRACT.md section 6):

    debug.stages.{exact,lexical,vector}   each channel alone, in its own order
    debug.stages.fused                    reciprocal rank fusion (de-duplicated, capped)
    debug.stages.reranked                 the reranked window: the results before the refusal decision
    results / safe_refusal                what a client gets (empty with a refusal)

`V2Debugged` sends one debug request per query and keeps the parsed answer; `V2Stage` views read a
stage from it, so one request is judged six times (`v2:exact`, `v2:lexical`, `v2:vector`,
`v2:fused`, `v2:reranked`, `query_v2`). A stage's latency is the server's own time for it, from
`debug`; the latency of `query_v2` comes from a separate pass WITHOUT debug (`timed_pass`), since a
debug answer is several times larger. Relevance is judged per file (V2 chunks are not V1 chunks,
so nothing here keys on rag_api's digests); a passage's key is `(file_id, chunk_id)`.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.http import LeanHTTP
from benchmarks.quality.dataset import Query
from benchmarks.quality.systems import NO_V2_ROUTE, Outcome, Passage, SystemUnavailable

CHANNEL_STAGES = ("exact", "lexical", "vector")
STAGES = (*CHANNEL_STAGES, "fused", "reranked")
FINAL = "query_v2"
STAGE_SYSTEMS = {stage: f"v2:{stage}" for stage in STAGES}
STAGE_DESCRIPTIONS = {
    "exact": "debug.stages.exact: the exact channel alone (names, labels, identifiers); latency: its ms",
    "lexical": "debug.stages.lexical: the BM25 channel alone; latency: its ms",
    "vector": "debug.stages.vector: the vector channel alone; latency: its ms",
    "fused": "debug.stages.fused: RRF of the three channels, de-duplicated and capped; latency: fusion ms",
    "reranked": "debug.stages.reranked: the reranked window, before the refusal; latency: rerank ms",
}
DEBUG_NEEDS_ADMIN = (
    "POST /query_v2 with debug answered {status}: the V2 stages need an admin token (RAG_ADMIN_USER_IDS "
    "or role ADMIN). The benchmark's own service gets one; for --service-url pass --token or --jwt-secret"
)


class MalformedReply(ValueError):
    """A `/query_v2` answer that does not have the contract's shape."""


@dataclass(frozen=True)
class StageItem:
    """One item of a stage's list in `debug.stages`."""

    chunk_id: str
    file_id: str
    page: int | None
    score: float | None
    content: str


@dataclass(frozen=True)
class ChannelRun:
    """`debug.channels.<name>`: hits, time, error and the plan's path (exact scan or HNSW)."""

    hits: int
    ms: float | None
    error: str | None
    path: str | None


@dataclass(frozen=True)
class RefusalRecord:
    """`debug.refusal`, reduced to what the offline refusal grid replays (`tuning.py`)."""

    refuse: bool
    reasons: tuple[str, ...]  # hard reason codes: any one refuses, whatever the knobs
    signals: tuple[str, ...]  # soft signal codes that fired under the service's policy
    best_score: float | None
    coverage: float | None
    candidates: int
    signal_weight: float | None
    rare_terms: int
    best_dense: float | None = None  # the vector channel's best similarity among the top candidates


@dataclass(frozen=True)
class V2Debug:
    """The parsed `debug` of one answer."""

    stages: dict[str, list[StageItem]]
    missing_stages: tuple[str, ...]
    channels: dict[str, ChannelRun]
    refusal: RefusalRecord | None
    rerank: dict[str, Any]
    timing: dict[str, float]
    run_id: int | None = None


@dataclass(frozen=True)
class V2Reply:
    """One `/query_v2` answer: results as passages, the refusal, and `debug` when asked for."""

    passages: list[Passage]
    chunk_ids: tuple[str, ...]
    refused: bool
    degraded: bool
    index_version: str | None
    channel_counts: dict[str, int]
    debug: V2Debug | None = None


def _opt_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _chunk_id(file_id: str, metadata: Mapping[str, Any], content: str) -> str:
    cid = metadata.get("chunk_id")
    if isinstance(cid, str) and cid:
        return cid
    # no chunk id: the content identifies the passage within its file
    return "md5:" + hashlib.md5(content.encode("utf-8"), usedforsecurity=False).hexdigest()


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MalformedReply(f"{where} is not an object")
    return value


def parse_stage_item(raw: Any, where: str) -> StageItem:
    """One `debug.stages` item: `chunk_id` and `file_id` are required, the rest optional."""
    item = _mapping(raw, where)
    chunk_id, file_id = item.get("chunk_id"), item.get("file_id")
    if not isinstance(chunk_id, str) or not isinstance(file_id, str):
        raise MalformedReply(f"{where} needs string chunk_id and file_id")
    content = item.get("content")
    return StageItem(
        chunk_id,
        file_id,
        _opt_int(item.get("page")),
        _opt_float(item.get("score")),
        content if isinstance(content, str) else "",
    )


def parse_refusal(raw: Any) -> RefusalRecord:
    """`debug.refusal` (`app/evidence/query/refusal.py` `RefusalDecision.as_debug`)."""
    body = _mapping(raw, "debug.refusal")
    checked = body.get("checked") if isinstance(body.get("checked"), Mapping) else {}
    assert isinstance(checked, Mapping)

    def codes(key: str) -> tuple[str, ...]:
        items = body.get(key) or []
        if not isinstance(items, list):
            raise MalformedReply(f"debug.refusal.{key} is not a list")
        return tuple(str(x.get("code")) for x in items if isinstance(x, Mapping) and x.get("code"))

    rare = checked.get("rare_terms")
    candidates = _opt_int(checked.get("candidates"))
    return RefusalRecord(
        refuse=bool(body.get("refuse")),
        reasons=codes("reasons"),
        signals=codes("signals"),
        best_score=_opt_float(checked.get("best_score")),
        coverage=_opt_float(checked.get("coverage")),
        candidates=candidates if candidates is not None else 0,
        signal_weight=_opt_float(checked.get("signal_weight")),
        rare_terms=len(rare) if isinstance(rare, list) else 0,
        best_dense=_opt_float(checked.get("best_dense")),
    )


def parse_debug(raw: Any) -> V2Debug:
    """The `debug` object; a stage missing from it is recorded in `missing_stages` (read as empty)."""
    body = _mapping(raw, "debug")
    raw_stages = body.get("stages")
    stages_in = _mapping(raw_stages, "debug.stages") if raw_stages is not None else {}
    stages: dict[str, list[StageItem]] = {}
    missing = []
    for stage in STAGES:
        items = stages_in.get(stage)
        if items is None:
            missing.append(stage)
            stages[stage] = []
            continue
        if not isinstance(items, list):
            raise MalformedReply(f"debug.stages.{stage} is not a list")
        stages[stage] = [parse_stage_item(x, f"debug.stages.{stage}[{i}]") for i, x in enumerate(items)]
    channels: dict[str, ChannelRun] = {}
    raw_channels = body.get("channels")
    for name, info in raw_channels.items() if isinstance(raw_channels, Mapping) else []:
        if isinstance(info, Mapping):
            hits = _opt_int(info.get("hits"))
            channels[str(name)] = ChannelRun(
                hits if hits is not None else 0,
                _opt_float(info.get("ms")),
                _opt_str(info.get("error")),
                _opt_str(info.get("path")),
            )
    timing_raw = body.get("timing_ms")
    timing = {
        str(k): v
        for k, v in (
            (k, _opt_float(v)) for k, v in (timing_raw.items() if isinstance(timing_raw, Mapping) else [])
        )
        if v is not None
    }
    rerank = body.get("rerank")
    run = body.get("run")
    return V2Debug(
        stages=stages,
        missing_stages=tuple(missing),
        channels=channels,
        refusal=parse_refusal(body["refusal"]) if body.get("refusal") is not None else None,
        rerank=dict(rerank) if isinstance(rerank, Mapping) else {},
        timing=timing,
        run_id=_opt_int(run.get("run_id")) if isinstance(run, Mapping) else None,
    )


def parse_reply(body: Any) -> V2Reply:
    """A `/query_v2` answer (CONTRACT.md section 6); refusal = no results and a `safe_refusal`."""
    reply = _mapping(body, "the answer")
    results = reply.get("results")
    if not isinstance(results, list):
        raise MalformedReply("results is not a list")
    passages: list[Passage] = []
    chunk_ids: list[str] = []
    counts: dict[str, int] = {}
    for i, raw in enumerate(results):
        item = _mapping(raw, f"results[{i}]")
        fid = item.get("file_id")
        if not isinstance(fid, str):
            raise MalformedReply(f"results[{i}].file_id is not a string")
        content = item.get("content") if isinstance(item.get("content"), str) else ""
        assert isinstance(content, str)
        meta = item.get("metadata") if isinstance(item.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        cid = _chunk_id(fid, meta, content)
        chunk_ids.append(cid)
        passages.append(
            Passage(fid, content, _opt_int(item.get("page")), _opt_float(item.get("score")), (fid, cid))
        )
        for ch in item.get("channels") or []:
            counts[str(ch)] = counts.get(str(ch), 0) + 1
    debug = reply.get("debug")
    return V2Reply(
        passages=passages,
        chunk_ids=tuple(chunk_ids),
        refused=not passages and reply.get("safe_refusal") is not None,
        degraded=bool(reply.get("degraded")),
        index_version=_opt_str(reply.get("index_version")),
        channel_counts=counts,
        debug=parse_debug(debug) if debug is not None else None,
    )


def stage_passages(items: Sequence[StageItem]) -> list[Passage]:
    """A stage list as passages (key: file and chunk id)."""
    return [Passage(i.file_id, i.content, i.page, i.score, (i.file_id, i.chunk_id)) for i in items]


def stage_ms(debug: V2Debug, stage: str) -> float | None:
    """The server's own time for a stage: a channel's `ms`, or the fusion or rerank step's."""
    if stage in CHANNEL_STAGES:
        run = debug.channels.get(stage)
        return run.ms if run is not None else None
    return debug.timing.get("fuse" if stage == "fused" else "rerank")


class V2Client:
    """`POST /query_v2` with every file id of the query's knowledge base, its `entity_id` and k."""

    def __init__(
        self,
        http: LeanHTTP,
        kbs: Mapping[str, Sequence[str]],
        k: int = 10,
        *,
        debug: bool,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.http, self.kbs, self.k, self.debug = http, kbs, min(k, 10), debug
        self.headers = {"Content-Type": "application/json", **(headers or {})}

    def body(self, text: str, kb: str) -> bytes:
        """The request body."""
        payload = {"query": text, "file_ids": list(self.kbs[kb]), "k": self.k, "entity_id": kb}
        return json.dumps({**payload, "debug": self.debug}).encode()

    async def ask(self, text: str, kb: str) -> tuple[V2Reply, float]:
        """One request: the parsed answer and the client's latency in ms; SystemUnavailable otherwise."""
        body = self.body(text, kb)
        t0 = time.perf_counter()
        reply = await self.http.request("POST", "/query_v2", body, self.headers)
        latency = (time.perf_counter() - t0) * 1000
        if reply.status == 404:
            try:
                detail = json.loads(reply.content).get("detail")
            except (ValueError, AttributeError):
                detail = None
            raise SystemUnavailable(f"{NO_V2_ROUTE} (detail: {detail!r})")
        if reply.status in (401, 403) and self.debug:
            raise SystemUnavailable(DEBUG_NEEDS_ADMIN.format(status=reply.status))
        if reply.status != 200:
            raise SystemUnavailable(f"POST /query_v2 answered {reply.status}: {reply.content[:300]!r}")
        try:
            parsed = parse_reply(json.loads(reply.content))
        except (ValueError, KeyError) as exc:
            raise SystemUnavailable(f"POST /query_v2 answered 200 with an unexpected body: {exc}") from None
        return parsed, latency


@dataclass
class QueryRecord:
    """What the tuning grids need of one query's debug answer (kept per query id)."""

    stages: dict[str, list[StageItem]]
    refusal: RefusalRecord | None
    degraded: bool
    channel_errors: dict[str, str]
    rerank_fell_back: bool
    debug_ms: float
    final_chunks: tuple[str, ...]
    final_refused: bool


@dataclass
class V2Debugged:
    """One debug request per query, shared by the `V2Stage` views (the first view to ask sends it)."""

    client: V2Client
    records: dict[str, QueryRecord] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    prepared: bool = False
    _last: tuple[str, V2Reply] | None = None

    async def prepare(self) -> None:
        """A probe: a missing route, a non-admin token or a debug without stages stops the run here."""
        if self.prepared:
            return
        kb = next(iter(self.client.kbs))
        reply, _ = await self.client.ask("probe", kb)
        if reply.debug is None:
            raise SystemUnavailable(
                "POST /query_v2 answered without `debug` although an admin asked for it: the V2 stages "
                "cannot be measured (is the token an admin's?)"
            )
        if len(reply.debug.missing_stages) == len(STAGES):
            raise SystemUnavailable(
                "POST /query_v2 debug has no `stages`: this service cannot be measured per stage"
            )
        self.prepared = True

    async def reply(self, query: Query) -> V2Reply:
        """The debug answer to `query` (sent once; later views of the same query read it)."""
        if self._last is not None and self._last[0] == query.qid:
            return self._last[1]
        reply, latency = await self.client.ask(query.text, query.kb)
        if reply.debug is None:
            raise SystemUnavailable(f"POST /query_v2 answered {query.qid} without `debug`")
        d = reply.debug
        self.records[query.qid] = QueryRecord(
            stages=d.stages,
            refusal=d.refusal,
            degraded=reply.degraded,
            channel_errors={n: c.error for n, c in d.channels.items() if c.error},
            rerank_fell_back=bool(d.rerank.get("fell_back")),
            debug_ms=latency,
            final_chunks=reply.chunk_ids,
            final_refused=reply.refused,
        )
        if len(self.samples) < 3:
            self.samples.append({"query": query.qid, "stages_missing": list(d.missing_stages)})
        self._last = (query.qid, reply)
        return reply


class V2Stage:
    """One stage of the shared debug answer as a system (`v2:<stage>`), or the final results (`query_v2`)."""

    def __init__(self, source: V2Debugged, stage: str) -> None:
        if stage not in (*STAGES, FINAL):
            raise ValueError(f"unknown V2 stage {stage!r}")
        self.source, self.stage = source, stage
        self.name = FINAL if stage == FINAL else STAGE_SYSTEMS[stage]
        self.refuses = stage == FINAL
        self.description = (
            f"POST /query_v2 results (refusals included), k={source.client.k}; "
            "latency: a separate pass without debug"
            if stage == FINAL
            else STAGE_DESCRIPTIONS[stage]
        )

    async def prepare(self) -> None:
        """The shared probe."""
        await self.source.prepare()

    async def search(self, query: Query) -> Outcome:
        """The stage's list from the query's debug answer."""
        reply = await self.source.reply(query)
        assert reply.debug is not None
        if self.stage == FINAL:
            info: dict[str, Any] = {"channels": reply.channel_counts, "degraded": reply.degraded}
            return Outcome(reply.passages, refused=reply.refused, latency_ms=None, info=info)
        items = reply.debug.stages[self.stage]
        return Outcome(stage_passages(items), refused=False, latency_ms=stage_ms(reply.debug, self.stage))


def v2_systems(source: V2Debugged) -> list[V2Stage]:
    """The six views of one debug answer, channels first, the final results last."""
    return [V2Stage(source, stage) for stage in (*STAGES, FINAL)]


def timed_sample(queries: Sequence[Query], n: int, seed: int) -> list[Query]:
    """The queries of the timed pass: all of them (n <= 0 or n >= len), else a seeded sample in run order."""
    if n <= 0 or n >= len(queries):
        return list(queries)
    chosen = set(random.Random(seed + 7).sample(range(len(queries)), n))
    return [q for i, q in enumerate(queries) if i in chosen]


@dataclass(frozen=True)
class Timed:
    """One query of the timed pass (no debug)."""

    latency_ms: float
    chunk_ids: tuple[str, ...]
    refused: bool


async def timed_pass(client: V2Client, queries: Sequence[Query]) -> dict[str, Timed]:
    """Each query once, one at a time, without debug: the client's latency and what came back."""
    if client.debug:
        raise ValueError("the timed pass measures /query_v2 without debug")
    out: dict[str, Timed] = {}
    for q in queries:
        reply, latency = await client.ask(q.text, q.kb)
        out[q.qid] = Timed(latency, reply.chunk_ids, reply.refused)
    return out


def agreement(records: Mapping[str, QueryRecord], timed: Mapping[str, Timed]) -> dict[str, int]:
    """How many timed answers equal the debug answer of their query (same chunks in order, same refusal)."""
    same = differ = 0
    for qid, t in timed.items():
        r = records.get(qid)
        if r is None:
            continue
        if r.final_chunks == t.chunk_ids and r.final_refused == t.refused:
            same += 1
        else:
            differ += 1
    return {"same": same, "differ": differ}
