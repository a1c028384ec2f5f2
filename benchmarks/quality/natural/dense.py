"""One dense representation for both indexes, measured offline on a replay capture (issue 37, item 1).

    (A) evidence   the vector channel as served: evidence chunks with their own vectors
    (B) v1-*       no evidence vectors: V1's dense search in the caller's scope (its top `hits` V1
                   chunks), each hit mapped onto the evidence chunks it contains, scored with that
                   hit's similarity; variants choose which of them the channel lists:
                     v1-all     every contained chunk, V1 hit by V1 hit (the flooding baseline)
                     v1-best1   per V1 hit only its best chunk by BM25 of the question within it
                     v1-best2   the best two
                     v1-ranked  every hit's best first, then the others, best by BM25 again
    (D) evidence-prose  only the evidence index's prose chunks have vectors (a small table's whole-table
                   chunk is prose); table rows are found by the exact and lexical channels alone.
                   `evidence-all` is (A) recomputed here by an exact scan, to check the capture.
    (D1)/(D2) evidence-rows-*  (D) with rows given a vector that is already computed: their V1 chunk's
                   pooled one, or their small table's whole-table one (dense_rows.py)
    (C) pooled     no V1 vectors: each V1 chunk's vector is the normalised mean of the vectors of
                   the evidence chunks it contains, each weighted by the words they share (V1's
                   quality measured against its own stored vectors; V2 stays (A))

A V1 chunk "contains" an evidence chunk of the same file (and page, when both have one: V1's are
0-based, V2's 1-based) that shares at least `MIN_CONTAINMENT` of its word 3-shingles (after
`normalize`) with it; a table row is compared by its cells in order, as V1's text holds them.
Everything here is pure: the capture (`replay.py`) reads the vectors and texts once per knowledge base.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.evidence.query.bm25 import idf
from app.evidence.query.records import Candidate, DocumentInfo, Scored
from app.evidence.store.channels import ChunkDetail
from app.text.chunk_records import ChunkPlace
from app.text.normalize import normalize
from app.text.stems import forms

VECTOR_SOURCES = (
    "evidence",
    "v1-all",
    "v1-best1",
    "v1-best2",
    "v1-ranked",
    "v1w-best1",
    "v1w-ranked",
    "evidence-all",
    "evidence-prose",
    "evidence-rows-v1",
    "evidence-rows-table",
    "evidence-rows-v1-best1",
    "evidence-rows-table-best1",
)
V1_SOURCES = ("stored", "pooled")
SHINGLE = 3
# an evidence chunk belongs to a V1 chunk holding at least this share of its shingles; one that no
# V1 chunk holds this much of goes to the V1 chunk holding the most of it (at least FALLBACK_SHARE)
MIN_CONTAINMENT = 0.5
FALLBACK_SHARE = 0.2


@dataclass
class KbData:
    """One knowledge base as captured: every evidence chunk of its active run, every V1 chunk."""

    details: list[ChunkDetail]  # evidence chunks, by (document_id, ordinal)
    vectors: np.ndarray  # evidence vectors, one unit row per detail (zeros: no vector stored)
    v1_files: list[str]
    v1_texts: list[str]
    v1_pages: list[int | None]
    v1_vectors: np.ndarray  # V1's stored vectors, unit rows


@dataclass
class Overlap:
    """Which evidence chunks each V1 chunk contains, and how many shingles they share."""

    members: list[list[tuple[int, int]]]  # per V1 chunk: (evidence index, shared shingles)
    unmapped_evidence: int  # evidence chunks no V1 chunk holds
    empty_v1: int  # V1 chunks holding no evidence chunk


class Chunk(Protocol):
    """What matching reads of an evidence chunk (a stored `ChunkDetail` or a fresh `ChunkRecord`)."""

    @property
    def place(self) -> ChunkPlace: ...

    @property
    def content(self) -> str: ...


def match_tokens(chunk: Chunk) -> list[str]:
    """The words an evidence chunk is matched by: a table row's cells in order, else its content."""
    if chunk.place.kind == "table_row" and chunk.place.row_values:
        return normalize(" ".join(chunk.place.row_values)).split()
    return normalize(chunk.content).split()


def shingles(tokens: Sequence[str], size: int = SHINGLE) -> set[tuple[str, ...]]:
    """The word n-grams of `tokens` (one n-gram of all of them when there are fewer than `size`)."""
    if len(tokens) < size:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def _pages_agree(v1_page: int | None, evidence_page: int | None) -> bool:
    return v1_page is None or evidence_page is None or evidence_page == v1_page + 1


def overlap(kb: KbData) -> Overlap:
    """Each V1 chunk's evidence chunks in a captured knowledge base (see `link`)."""
    return link(
        list(zip(kb.v1_files, kb.v1_pages, kb.v1_texts, strict=True)), [(d.file_id, d) for d in kb.details]
    )


def link(v1: Sequence[tuple[str, int | None, str]], evidence: Sequence[tuple[str, Chunk]]) -> Overlap:
    """Each V1 chunk's (file, page, text) evidence chunks: same file, same page, shared shingles."""
    by_file: dict[str, dict[tuple[str, ...], list[int]]] = {}
    for i, (file_id, _, text) in enumerate(v1):
        grams = by_file.setdefault(file_id, {})
        for g in shingles(normalize(text).split()):
            grams.setdefault(g, []).append(i)
    members: list[list[tuple[int, int]]] = [[] for _ in v1]
    unmapped = 0
    for j, (file_id, chunk) in enumerate(evidence):
        own = shingles(match_tokens(chunk))
        counts: Counter[int] = Counter()
        grams = by_file.get(file_id, {})
        for g in own:
            counts.update(grams.get(g, ()))
        hits = [(i, n) for i, n in counts.items() if _pages_agree(v1[i][1], chunk.place.page)]
        held = [(i, n) for i, n in hits if n / len(own) >= MIN_CONTAINMENT]
        if not held and hits:
            i, n = max(hits, key=lambda x: (x[1], -x[0]))
            held = [(i, n)] if n / len(own) >= FALLBACK_SHARE else []
        if not held:
            unmapped += 1
        for i, n in held:
            members[i].append((j, n))
    return Overlap(members, unmapped, sum(not m for m in members))


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: np.ndarray = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def pooled_vectors(kb: KbData, links: Overlap, *, rows: bool = True) -> tuple[np.ndarray, int]:
    """(C) of a captured knowledge base (see `pool`)."""
    return pool(kb.vectors, [d.place.kind for d in kb.details], links, rows=rows)


def pool(
    vectors: np.ndarray, kinds: Sequence[str], links: Overlap, *, rows: bool = True
) -> tuple[np.ndarray, int]:
    """(C): each V1 chunk's vector from its evidence chunks' vectors, weighted by shared shingles.

    `rows` False: table rows count only in a V1 chunk without any prose chunk (a small table is also
    a prose chunk, so its rows would count twice). A V1 chunk with no evidence chunk (or none with a
    vector) gets a zero vector: nothing finds it. Returns the vectors and how many are zero.
    """
    out = np.zeros((len(links.members), vectors.shape[1]), dtype=np.float64)
    for i, held in enumerate(links.members):
        use = held
        if not rows and any(kinds[j] != "table_row" for j, _ in held):
            use = [(j, n) for j, n in held if kinds[j] != "table_row"]
        if use:
            idx = np.array([j for j, _ in use])
            w = np.array([float(n) for _, n in use], dtype=np.float64)
            out[i] = (vectors[idx].astype(np.float64) * w[:, None]).sum(axis=0)
    empty = int(sum(not np.any(row) for row in out))
    return unit_rows(out), empty


def nearest(matrix: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k rows nearest to `query` by cosine (rows are unit or zero), best first, ties by row."""
    q = query.astype(np.float32) / max(float(np.linalg.norm(query)), 1e-12)
    sims = matrix @ q
    order = np.lexsort((np.arange(len(sims)), -sims))[:k]
    return [(int(i), float(sims[i])) for i in order]


def candidate(detail: ChunkDetail) -> Candidate:
    """An evidence chunk as the channels' candidates are made (app/evidence/query/candidates.py)."""
    from app.evidence.query.candidates import _document

    document: DocumentInfo = _document(detail)
    return Candidate(
        chunk_id=detail.chunk_id,
        file_id=detail.file_id,
        content=detail.content,
        search_text=detail.search_text,
        place=detail.place,
        document=document,
        entity_keys=detail.entity_keys,
        document_id=detail.document_id,
        ordinal=detail.ordinal,
    )


@dataclass
class Lexicon:
    """BM25 inside a V1 hit: each evidence chunk's tokens and the mean length of the knowledge base's."""

    tokens: list[list[str]]
    average: float

    @classmethod
    def of(cls, kb: KbData) -> Lexicon:
        """Tokens of every evidence chunk's search text."""
        tokens = [d.search_text.split() for d in kb.details]
        return cls(tokens, sum(map(len, tokens)) / max(len(tokens), 1))

    def bm25(self, j: int, terms: Sequence[str], statistics: Any, k1: float = 1.2, b: float = 0.75) -> float:
        """BM25 of evidence chunk j for the question's terms, idf from the visible set's statistics."""
        tokens = self.tokens[j]
        if not tokens or not terms:
            return 0.0
        offered = Counter(form for t in tokens for form in forms(t))
        n = max(int(getattr(statistics, "chunks", 0)), 1)
        frequency = getattr(statistics, "document_frequency", {}) or {}
        norm = k1 * (1 - b + b * len(tokens) / max(self.average, 1e-9))
        total = 0.0
        for term in dict.fromkeys(terms):
            tf = max((offered[f] for f in forms(term)), default=0)
            if tf:
                df = min(int(frequency.get(term, 1)), n)
                total += idf(n, df) * tf * (k1 + 1) / (tf + norm)
        return total


def v1_channel(
    kb: KbData,
    links: Overlap,
    lexicon: Lexicon,
    hits: Sequence[tuple[int, float]],
    terms: Sequence[str],
    statistics: Any,
    *,
    source: str,
    limit: int,
) -> list[tuple[int, float]]:
    """(B): the vector channel from V1's hits, as (evidence index, the V1 hit's similarity), best first."""
    per_hit: list[tuple[float, list[int]]] = []
    for i, sim in hits:
        held = [j for j, _ in links.members[i]]
        if source != "v1-all":  # best first by BM25 within the hit; ties: more shared, earlier chunk
            shared = dict(links.members[i])
            held.sort(key=lambda j: (-lexicon.bm25(j, terms, statistics), -shared[j], j))
        per_hit.append((sim, held))
    order: list[tuple[int, float]] = []
    if source in ("v1-all", "v1-best1", "v1-best2"):
        take = {"v1-all": math.inf, "v1-best1": 1, "v1-best2": 2}[source]
        for sim, held in per_hit:
            order += [(j, sim) for j in held[: int(min(take, len(held)))]]
    elif source == "v1-ranked":
        order = [(held[0], sim) for sim, held in per_hit if held]
        order += [(j, sim) for sim, held in per_hit for j in held[1:]]
    else:
        raise ValueError(f"unknown vector source {source!r}")
    seen: set[int] = set()
    out: list[tuple[int, float]] = []
    for j, sim in order:
        if j not in seen:
            seen.add(j)
            out.append((j, sim))
    return out[:limit]


def scored(kb: KbData, picks: Sequence[tuple[int, float]], made: dict[int, Candidate]) -> list[Scored]:
    """The picks as the vector channel's scored candidates (each candidate made once per kb)."""
    out = []
    for j, sim in picks:
        c = made.get(j)
        if c is None:
            c = made[j] = candidate(kb.details[j])
        out.append(Scored(c, sim))
    return out


@dataclass
class Prepared:
    """What the variants need of one knowledge base, computed once per `score`."""

    kb: KbData
    links: Overlap
    lexicon: Lexicon
    neighbours: dict[tuple[int, int], Any]  # every evidence chunk as a passage's neighbour
    made: dict[int, Candidate]
    pooled: np.ndarray | None = None
    pooled_empty: int = 0
    windows: np.ndarray | None = None  # V1's window vectors (dense_windows.py), for v1w-*
    window_links: Overlap | None = None
    channel: np.ndarray | None = None  # evidence-prose and evidence-rows-*: the vector channel's rows
    shared: np.ndarray | None = None  # evidence-rows-*: the vector each row shares (dense_rows.py)


def vector_list(
    p: Prepared,
    query: np.ndarray,
    terms: Sequence[str],
    statistics: Any,
    *,
    source: str,
    hits: int,
    limit: int,
) -> list[Scored]:
    """The vector channel of `source` for one question: (B) V1's top `hits` chunks mapped, or (D)."""
    if source.startswith("evidence-"):
        rows = p.channel if p.channel is not None else p.kb.vectors
        wide = limit * 4 if source.endswith("-best1") else limit
        near = [(j, sim) for j, sim in nearest(rows, query, wide) if np.any(rows[j])]
        if source.endswith("-best1") and p.shared is not None:
            near = thin(near, p.shared, lambda j: p.lexicon.bm25(j, terms, statistics), limit)
        return scored(p.kb, near, p.made)
    if source.startswith("v1w-"):  # V1's windows instead of its whole chunks
        if p.windows is None or p.window_links is None:
            raise ValueError("v1w-* needs the capture's windows (dense_windows.py)")
        found = nearest(p.windows, query, hits)
        plain = source.replace("v1w-", "v1-")
        picks = v1_channel(
            p.kb, p.window_links, p.lexicon, found, terms, statistics, source=plain, limit=limit
        )
        return scored(p.kb, picks, p.made)
    found = nearest(p.kb.v1_vectors, query, hits)
    picks = v1_channel(p.kb, p.links, p.lexicon, found, terms, statistics, source=source, limit=limit)
    return scored(p.kb, picks, p.made)


def v1_answer(p: Prepared, query: np.ndarray, *, pooled: bool, k: int = 10) -> tuple[list[str], list[str]]:
    """V1's top k (files, texts) by its stored vectors, or by the pooled ones of (C)."""
    matrix = p.pooled if pooled and p.pooled is not None else p.kb.v1_vectors
    found = nearest(matrix, query, k)
    return [p.kb.v1_files[i] for i, _ in found], [p.kb.v1_texts[i] for i, _ in found]


def thin(
    near: Sequence[tuple[int, float]],
    group: np.ndarray,
    score: Callable[[int], float],
    limit: int,
) -> list[tuple[int, float]]:
    """`near` with, of the chunks sharing one vector, only the one best by `score` (ties: earlier)."""
    members: dict[int, list[int]] = {}
    for k in map(int, np.flatnonzero(group >= 0)):
        members.setdefault(int(group[k]), []).append(k)
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for j, sim in near:
        g = int(group[j])
        if g < 0:
            out.append((j, sim))
        elif g not in seen:
            seen.add(g)
            out.append((max(members[g], key=lambda k: (score(k), -k)), sim))
    return out[:limit]
