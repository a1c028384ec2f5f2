"""The multi-tenant corpus and LibreChat's query mix for `scripts/bench tenants` (pure, seeded).

Who owns what (rag_api's `user_id`, the namespace):
- `agents` Agents (default 300), each with its knowledge base in its own namespace (the Agent id,
  `agent_` + 21 characters, as LibreChat sends it in `entity_id`). KB sizes follow a Zipf-like law
  over the Agents' rank r = 1..agents: files(r) = round(kb_max * r^-s), with s = ln(kb_max / kb_min) /
  ln(agents), so the largest KB has `kb_max` (5,000) files and the smallest `kb_min` (10). The KB
  nearest 1,000 files is set to exactly 1,000 and the one nearest 373 to exactly 373, so the target
  rows measure a whole KB in one batch. With 300 Agents: 5,000, 2,350, 1,510, 1,000, 866, ..., 407
  at rank 10, ~50 at rank 70, 21 at the median, 10 at rank 300; about 25,000 files in all.
- `users` users (default 3,000, LibreChat ObjectId-like ids), each with 1 + Poisson(2) attachments
  (at most 10) in the user's own namespace (no `entity_id`): about 8,900 files.
- Chunks per file: lognormal (sigma 1) around chunks / files, every file at least one chunk; at the
  default 200,000 chunks 5.9 per file (a 1,000-file KB holds about 6,000 rows), at 1M about 29.
- Load order: files reach the table in a random order (as uploads over time would), so an Agent's
  KB is spread over the table, each file's chunks together.
- Topics: an Agent's KB is about a few topics (round(sqrt(files) / 2), 1..40), an attachment about
  any topic; vectors and texts are those of `benchmarks.corpus` (clustered around local-model
  embeddings of topic texts and questions, so that questions have coherent nearest regions).

The query mix, per search: an Agent drawn uniformly (every Agent equally used), a user drawn
uniformly, a question about one of the Agent's topics; the Agent's whole KB in batches of at most
1,000 file ids with its `entity_id`, then 0-10 of the user's attachments (uniform in 0..count)
without, as LibreChat's overlay sends them (`/query_multiple`, k 10).
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import corpus as cp
from benchmarks.recall import Judgement, VisibleRows, judge

FORMAT_VERSION = 2  # bump when generation changes, so `--reuse` rebuilds stale data
BATCH_MAX = 1000  # file ids per /query_multiple (the overlay's and the service's limit)
ATTACH_MAX = 10
PINNED_KB = (1000, 373)  # KB sizes set exactly, for the target rows
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-"


@dataclass(frozen=True)
class TenantSpec:
    """The size and seed of a multi-tenant corpus; equal specs give identical corpora."""

    chunks: int = 200_000
    agents: int = 300
    users: int = 3000
    kb_min: int = 10
    kb_max: int = 5000
    topics: int = 300
    queries: int = 300
    seed: int = 42

    def fingerprint(self) -> str:
        """A short hash of the spec and the generator versions (for `--reuse`)."""
        blob = json.dumps(
            {**asdict(self), "format": FORMAT_VERSION, "base": cp.FORMAT_VERSION}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def corpus_spec(self, files: int) -> cp.CorpusSpec:
        """The base generator's spec (its fingerprint keys the cached topic and query embeddings)."""
        return cp.CorpusSpec(self.chunks, files, self.topics, self.queries, self.seed)


@dataclass
class TenantOptions:
    """Everything `scripts/bench tenants` can be told."""

    spec: TenantSpec = field(default_factory=TenantSpec)
    k: int = 10
    timed: int = 60
    searches: int = 200
    probes: int = 10
    concurrency: list[int] = field(default_factory=lambda: [1, 8])
    tp_seconds: float = 8.0
    fanout_reps: int = 10
    reuse: bool = False
    data_dir: Path | None = None
    out_dir: Path = Path("bench-results")
    json_path: Path | None = None
    service_env: dict[str, str] = field(default_factory=dict)
    load_parallel: int = 2
    batch_rows: int = 5000
    index_timeout: float = 1800.0
    collection: str = "testcollection"
    rag_api: bool = False  # rag_api live beside this checkout (benchmarks.ragapi_measure)
    rag_api_git: Path | None = None  # a git directory holding rag_api's pinned release
    previous: str | None = None  # with rag_api: the previous release's git ref as a third side


@dataclass(frozen=True)
class Tenants:
    """Agents with their KB file indexes, users with their attachment indexes, and the file layout."""

    layout: cp.Layout
    agent_ids: list[str]
    agent_files: list[list[int]]  # file indexes per Agent, in KB order
    agent_topics: list[np.ndarray]
    user_ids: list[str]
    user_files: list[list[int]]

    def agent_with(self, files: int) -> int:
        """Index of the Agent whose KB has exactly `files` files (else the nearest)."""
        return min(range(len(self.agent_files)), key=lambda a: abs(len(self.agent_files[a]) - files))

    def facts(self) -> dict[str, Any]:
        """Counts and the KB size distribution, for the report."""
        kb = np.array([len(f) for f in self.agent_files])
        att = np.array([len(f) for f in self.user_files])
        sizes = self.layout.sizes
        return {
            "agents": len(self.agent_ids),
            "users": len(self.user_ids),
            "files": len(self.layout.file_ids),
            "chunks": int(sizes.sum()),
            "kb_files": {
                "total": int(kb.sum()),
                "max": int(kb.max()),
                "median": float(np.median(kb)),
                "min": int(kb.min()),
                "top5": sorted(kb.tolist(), reverse=True)[:5],
                "at_least_1000": int((kb >= 1000).sum()),
            },
            "attachments": {
                "total": int(att.sum()),
                "mean": round(float(att.mean()), 2),
                "max": int(att.max()),
            },
            "chunks_per_file": {"mean": round(float(sizes.mean()), 2), "max": int(sizes.max())},
        }


def kb_sizes(spec: TenantSpec) -> np.ndarray:
    """Files per Agent by rank (Zipf-like, `kb_max` down to `kb_min`), with the pinned sizes set."""
    ranks = np.arange(1, spec.agents + 1, dtype=np.float64)
    s = math.log(spec.kb_max / spec.kb_min) / math.log(spec.agents) if spec.agents > 1 else 1.0
    sizes = np.clip(np.round(spec.kb_max * ranks**-s), spec.kb_min, spec.kb_max).astype(np.int64)
    taken: set[int] = set()
    for pinned in PINNED_KB:
        if spec.kb_min <= pinned <= spec.kb_max:
            free = [i for i in range(len(sizes)) if i not in taken]
            nearest = min(free, key=lambda i: abs(int(sizes[i]) - pinned))
            sizes[nearest] = pinned
            taken.add(nearest)
    return sizes


def _agent_id(rng: np.random.Generator) -> str:
    return "agent_" + "".join(_ALPHABET[int(i)] for i in rng.integers(0, len(_ALPHABET), 21))


def make_tenants(spec: TenantSpec) -> Tenants:
    """The seeded layout: every Agent's KB, every user's attachments, chunk counts and topics."""
    rng = np.random.default_rng([spec.seed, 101])
    kb = kb_sizes(spec)
    attach = np.minimum(ATTACH_MAX, 1 + rng.poisson(2.0, spec.users))
    files = int(kb.sum() + attach.sum())
    if spec.chunks < files:
        raise ValueError(f"--chunks must be at least the {files:,} files this tenant layout has")
    agent_ids = [_agent_id(rng) for _ in range(spec.agents)]
    user_ids = [rng.bytes(12).hex() for _ in range(spec.users)]
    owners: list[str] = []
    topics = np.empty(files, dtype=np.int64)
    agent_files: list[list[int]] = []
    agent_topics: list[np.ndarray] = []
    for a, n in enumerate(kb.tolist()):
        home = rng.choice(
            spec.topics, min(spec.topics, max(1, min(40, round(math.sqrt(n) / 2)))), replace=False
        )
        agent_files.append(list(range(len(owners), len(owners) + n)))
        agent_topics.append(np.sort(home))
        topics[len(owners) : len(owners) + n] = rng.choice(home, n)
        owners.extend([agent_ids[a]] * n)
    user_files: list[list[int]] = []
    for u, n in enumerate(attach.tolist()):
        user_files.append(list(range(len(owners), len(owners) + n)))
        topics[len(owners) : len(owners) + n] = rng.integers(0, spec.topics, n)
        owners.extend([user_ids[u]] * n)
    # files reach the table in upload order, not tenant by tenant: position p holds file order[p]
    order = rng.permutation(files)
    position = np.argsort(order)
    file_ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(files)]
    sizes = cp.file_sizes(spec.chunks, files, rng)
    kinds = [cp.KINDS[k] for k in rng.choice(len(cp.KINDS), files, p=cp.KIND_WEIGHTS)]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    layout = cp.Layout(file_ids, [owners[i] for i in order], sizes, topics[order], kinds, offsets)
    agent_files = [[int(position[f]) for f in fs] for fs in agent_files]
    user_files = [[int(position[f]) for f in fs] for fs in user_files]
    return Tenants(layout, agent_ids, agent_files, agent_topics, user_ids, user_files)


@dataclass(frozen=True)
class Request:
    """One `/query_multiple` as LibreChat sends it: who asks, the Agent if any, the ids, the question."""

    kind: str  # "kb" (an Agent's KB batch, with entity_id) or "attach" (the user's files, without)
    search: int  # the search this request belongs to
    user: str
    entity_id: str | None
    file_ids: tuple[str, ...]
    query: int  # index into the query texts

    def body(self, texts: Sequence[str], k: int) -> dict[str, Any]:
        """The JSON body."""
        body: dict[str, Any] = {"query": texts[self.query], "file_ids": list(self.file_ids), "k": k}
        if self.entity_id:
            body["entity_id"] = self.entity_id
        return body

    def owners(self) -> tuple[str, ...]:
        """The namespaces the caller may read: its own, and the Agent's when `entity_id` is sent."""
        return (self.user, self.entity_id) if self.entity_id else (self.user,)


def topical_query(rng: np.random.Generator, home: np.ndarray, query_topics: np.ndarray) -> int:
    """A question about one of the Agent's topics (any question when none is about them)."""
    about = np.flatnonzero(np.isin(query_topics, home))
    pool = about if len(about) else np.arange(len(query_topics))
    return int(rng.choice(pool))


def kb_batches(t: Tenants, agent: int, user: int, query: int, search: int) -> list[Request]:
    """An Agent's whole KB in batches of at most 1,000 ids, each with its `entity_id`."""
    ids = [t.layout.file_ids[f] for f in t.agent_files[agent]]
    return [
        Request("kb", search, t.user_ids[user], t.agent_ids[agent], tuple(ids[i : i + BATCH_MAX]), query)
        for i in range(0, len(ids), BATCH_MAX)
    ]


def make_mix(t: Tenants, query_topics: np.ndarray, searches: int, seed: int) -> list[Request]:
    """`searches` LibreChat searches as their `/query_multiple` requests, in order."""
    rng = np.random.default_rng([seed, 102])
    out: list[Request] = []
    for s in range(searches):
        agent = int(rng.integers(0, len(t.agent_ids)))
        user = int(rng.integers(0, len(t.user_ids)))
        q = topical_query(rng, t.agent_topics[agent], query_topics)
        out.extend(kb_batches(t, agent, user, q, s))
        own = t.user_files[user]
        n = int(rng.integers(0, min(ATTACH_MAX, len(own)) + 1))
        if n:
            picked = rng.choice(own, n, replace=False)
            ids = tuple(t.layout.file_ids[int(f)] for f in picked)
            out.append(Request("attach", s, t.user_ids[user], None, ids, q))
    return out


class Truth:
    """Every stored row (id, file, owner, vector) in memory; the exact answer of any request's scope."""

    def __init__(
        self, ids: Sequence[str], files: Sequence[str], owners: Sequence[str], vectors: np.ndarray
    ) -> None:
        self.ids = np.asarray(ids, dtype=object)
        # owners as small integers: comparing object arrays row by row is slow at 1M rows
        self.owner_code: dict[str, int] = {}
        self.owners = np.asarray([self.owner_code.setdefault(o, len(self.owner_code)) for o in owners])
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.rows_of: dict[str, list[int]] = {}
        for i, f in enumerate(files):
            self.rows_of.setdefault(f, []).append(i)
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], VisibleRows] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def _rows(self, file_ids: Sequence[str], owners: Sequence[str]) -> np.ndarray:
        rows = [i for f in dict.fromkeys(file_ids) for i in self.rows_of.get(f, ())]
        idx = np.asarray(rows, dtype=np.int64)
        codes = [self.owner_code[o] for o in owners if o in self.owner_code]
        return idx[np.isin(self.owners[idx], codes)] if len(idx) else idx

    def count(self, file_ids: Sequence[str], owners: Sequence[str]) -> int:
        """How many rows a request with this allow-list and these owners may see."""
        return len(self._rows(file_ids, owners))

    def visible(self, file_ids: Sequence[str], owners: Sequence[str]) -> VisibleRows:
        """Exactly the rows of `file_ids` whose owner is one of `owners` (a small cache of recent scopes)."""
        key = (tuple(file_ids), tuple(owners))
        found = self._cache.get(key)
        if found is not None:
            return found
        idx = self._rows(file_ids, owners)
        vis = (
            VisibleRows.build(self.ids[idx].tolist(), self.vectors[idx])
            if len(idx)
            else VisibleRows([], np.zeros((0, 1)), {})
        )
        if len(self._cache) >= 32:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = vis
        return vis

    def judge(
        self, request: Request, query: np.ndarray, answer: Sequence[tuple[str, float]], k: int
    ) -> Judgement:
        """Recall@k of one answer against brute force over exactly the rows the request may see."""
        return judge(self.visible(request.file_ids, request.owners()), query, answer, k)


def judgement_summary(judged: Sequence[Judgement]) -> dict[str, Any]:
    """Queries judged, recall min/mean, answers below 1.0, short answers and foreign rows."""
    if not judged:
        return {"queries": 0}
    recalls = [j.recall for j in judged]
    return {
        "queries": len(judged),
        "mean": round(float(np.mean(recalls)), 4),
        "min": round(float(np.min(recalls)), 4),
        "below_1": sum(1 for r in recalls if r < 1.0),
        "short_answers": sum(1 for j in judged if j.returned < j.expected),
        "foreign_rows": sum(j.foreign for j in judged),
        "max_distance_error": float(f"{max(j.max_distance_error for j in judged):.3g}"),
    }
