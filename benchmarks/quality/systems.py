"""The retrieval systems the quality benchmark measures, each behind one small interface.

- `v1-dense`: the service's `POST /query_multiple` over real HTTP (what LibreChat's overlay sends);
- `bm25`: the in-process reference BM25 of `bm25.py` over exactly the chunks the service stored;
- `rrf`: reciprocal-rank fusion of the two (each taken `depth` deep), cut to k;
- `query_v2` and its stages: `v2.py` (one debug request of `POST /query_v2` per query, read per
  stage); a 404 stops the run with a message, it is never skipped silently.
Latency is what the client sees per query (for `rrf`, dense plus BM25 plus fusion, one after the other).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from benchmarks.http import LeanHTTP
from benchmarks.quality.bm25 import BM25, rrf
from benchmarks.quality.dataset import Chunk, Query, chunk_key


class SystemUnavailable(RuntimeError):
    """A system cannot be measured on this service (e.g. the route does not exist)."""


@dataclass(frozen=True)
class Passage:
    """One returned passage, reduced to what the metrics read."""

    file_id: str
    content: str
    page: int | None
    score: float | None
    key: tuple[str, str]


@dataclass
class Outcome:
    """One system's answer to one query."""

    passages: list[Passage]
    refused: bool
    latency_ms: float | None  # None: measured elsewhere (query_v2's latency comes from its timed pass)
    info: dict[str, Any] = field(default_factory=dict)


class System(Protocol):
    """What the runner calls."""

    name: str
    refuses: bool  # False: the system never refuses (its refusal rate is 0 by construction)
    description: str

    async def prepare(self) -> None:
        """Check the system can answer (and build what it needs)."""

    async def search(self, query: Query) -> Outcome:
        """Answer one query."""


def _content_key(file_id: str, metadata: Mapping[str, Any], content: str) -> tuple[str, str]:
    digest = metadata.get("digest")
    if not isinstance(digest, str) or not digest:
        digest = hashlib.md5(content.encode("utf-8"), usedforsecurity=False).hexdigest()
    return chunk_key(file_id, digest)


class V1Dense:
    """`POST /query_multiple` with every file id of the query's knowledge base and its `entity_id`."""

    refuses = False

    def __init__(
        self,
        http: LeanHTTP,
        kbs: Mapping[str, Sequence[str]],
        k: int = 10,
        name: str = "v1-dense",
        headers: Mapping[str, str] | None = None,
    ):
        self.http, self.kbs, self.k, self.name = http, kbs, k, name
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.description = f"POST /query_multiple, k={k}, the query's whole knowledge base"

    async def prepare(self) -> None:
        """Nothing to build: the service holds the index."""

    async def search(self, query: Query) -> Outcome:
        """One request; 404 (nothing matched) is an empty answer, as the overlay reads it."""
        body = json.dumps(
            {"query": query.text, "file_ids": list(self.kbs[query.kb]), "k": self.k, "entity_id": query.kb}
        ).encode()
        t0 = time.perf_counter()
        reply = await self.http.request("POST", "/query_multiple", body, self.headers)
        latency = (time.perf_counter() - t0) * 1000
        if reply.status == 404:
            return Outcome([], refused=False, latency_ms=latency)
        if reply.status != 200:
            raise RuntimeError(f"/query_multiple answered {reply.status}: {reply.content[:300]!r}")
        passages = []
        for doc, distance in json.loads(reply.content):
            meta = doc.get("metadata") or {}
            fid = str(meta.get("file_id", ""))
            content = doc.get("page_content") or ""
            page = meta.get("page")
            passages.append(
                Passage(
                    fid,
                    content,
                    page if isinstance(page, int) else None,
                    1.0 - float(distance),
                    _content_key(fid, meta, content),
                )
            )
        return Outcome(passages, refused=False, latency_ms=latency)


class BM25Reference:
    """The reference BM25 over the service's stored chunks, one index per knowledge base."""

    refuses = False

    def __init__(self, chunks: Mapping[str, Sequence[Chunk]], k: int = 10, name: str = "bm25"):
        self.chunks, self.k, self.name = chunks, k, name
        self.description = f"reference Okapi BM25 in process (k1 1.2, b 0.75), k={k}, per knowledge base"
        self._indexes: dict[str, BM25] = {}
        self.build_seconds = 0.0

    async def prepare(self) -> None:
        """Build one index per knowledge base (timed, outside the per-query latency)."""
        t0 = time.perf_counter()
        for kb, chunks in self.chunks.items():
            if kb not in self._indexes:
                self._indexes[kb] = BM25([c.content for c in chunks])
        self.build_seconds += time.perf_counter() - t0

    async def search(self, query: Query) -> Outcome:
        """Score the query's knowledge base."""
        t0 = time.perf_counter()
        chunks = self.chunks[query.kb]
        hits = self._indexes[query.kb].search(query.text, self.k)
        passages = [
            Passage(
                chunks[h.index].file_id,
                chunks[h.index].content,
                chunks[h.index].page,
                h.score,
                chunk_key(chunks[h.index].file_id, chunks[h.index].digest),
            )
            for h in hits
        ]
        return Outcome(passages, refused=False, latency_ms=(time.perf_counter() - t0) * 1000)


class RRFusion:
    """RRF of a dense and a lexical system (each `depth` deep), cut to k."""

    refuses = False

    def __init__(
        self,
        dense: V1Dense,
        lexical: BM25Reference,
        k: int = 10,
        rrf_k: float = 60.0,
        name: str = "rrf(v1-dense, bm25)",
    ):
        self.dense, self.lexical, self.k, self.rrf_k, self.name = dense, lexical, k, rrf_k, name
        self.description = (
            f"reciprocal-rank fusion (k={rrf_k:g}, equal weights) of /query_multiple k={dense.k} and "
            f"BM25 top {lexical.k}, cut to {k}"
        )

    async def prepare(self) -> None:
        """Prepare both legs."""
        await self.dense.prepare()
        await self.lexical.prepare()

    async def search(self, query: Query) -> Outcome:
        """Both legs one after the other, then fusion; latency is their sum plus the fusion."""
        a = await self.dense.search(query)
        b = await self.lexical.search(query)
        t0 = time.perf_counter()
        by_key: dict[tuple[str, str], Passage] = {}
        for p in [*a.passages, *b.passages]:
            by_key.setdefault(p.key, p)
        fused = rrf([[p.key for p in a.passages], [p.key for p in b.passages]], k=self.rrf_k)[: self.k]
        passages = [by_key[key] for key, _ in fused]  # type: ignore[index]
        latency = (a.latency_ms or 0.0) + (b.latency_ms or 0.0) + (time.perf_counter() - t0) * 1000
        return Outcome(passages, refused=False, latency_ms=latency)


NO_V2_ROUTE = (
    "POST /query_v2 answered 404: this service has no /query_v2 route. "
    "Leave query_v2 out of --systems until the route exists."
)
