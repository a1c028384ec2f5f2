"""One embedding pass for both indexes: which evidence chunks a V1 chunk holds, and vectors shared.

    links = link(v1_chunks, evidence_chunks)        # per V1 chunk: (evidence index, shared shingles)
    vectors = pool(evidence_vectors, links)         # a V1 chunk's vector from its prose chunks'
    rows = inherit(links, v1_vectors, n)            # a table row's vector: its V1 chunk's

An upload of a namespace evidence search serves embeds its evidence prose chunks (and small tables
kept whole) once; each V1 chunk's vector is the normalised mean of the vectors of the prose chunks
it holds, weighted by the words they share, and a V1 chunk holding none (a table only, text the
evidence chunker left out) is embedded on its own. Each table row then takes the vector of the V1
chunk that holds it: rows are not embedded at all (they were half of the evidence tokens on manual
pages), and the vector channel keeps one row of each such group (`thin_shared_vectors`). Measured
on the natural questions (dev split chose it, test reported): ingestion CPU 1.19x V1 alone against
2.63x with evidence chunks embedded on their own; see docs/v2.md.

A V1 chunk holds an evidence chunk of the same file and page (V1's pages count from 0, evidence's
from 1) whose word 3-shingles (after `normalize`) it shares at least `MIN_CONTAINMENT` of; an
evidence chunk no V1 chunk holds that much of goes to the one holding most of it (at least
`FALLBACK_SHARE`). A table row is compared by its cells in order, as V1's text holds them. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from app.ingest.derived import V1Chunk
from app.text.chunk_records import ChunkRecord
from app.text.normalize import normalize

# V1 chunks take vectors pooled from evidence prose (off: every V1 chunk embedded on its own, and
# evidence embeds its rows too, as before this representation)
ONE_PASS = True
SHINGLE = 3
MIN_CONTAINMENT = 0.5
FALLBACK_SHARE = 0.2


def match_tokens(chunk: ChunkRecord) -> list[str]:
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


def link(v1: Sequence[V1Chunk], evidence: Sequence[ChunkRecord]) -> list[list[tuple[int, int]]]:
    """Per V1 chunk, the evidence chunks it holds: (evidence index, shingles they share)."""
    index: dict[tuple[str, ...], list[int]] = {}
    for i, v1_chunk in enumerate(v1):
        for gram in shingles(normalize(v1_chunk.text).split()):
            index.setdefault(gram, []).append(i)
    members: list[list[tuple[int, int]]] = [[] for _ in v1]
    for j, chunk in enumerate(evidence):
        own = shingles(match_tokens(chunk))
        if not own:
            continue
        counts: Counter[int] = Counter()
        for gram in own:
            counts.update(index.get(gram, ()))
        page = chunk.place.page
        hits = [(i, n) for i, n in counts.items() if _pages_agree(v1[i].page, page)]
        held = [(i, n) for i, n in hits if n / len(own) >= MIN_CONTAINMENT]
        if not held and hits:
            i, n = max(hits, key=lambda hit: (hit[1], -hit[0]))
            held = [(i, n)] if n / len(own) >= FALLBACK_SHARE else []
        for i, n in held:
            members[i].append((j, n))
    return members


def pool(
    vectors: Sequence[np.ndarray | None], members: Sequence[Sequence[tuple[int, int]]]
) -> list[np.ndarray | None]:
    """Each V1 chunk's unit vector from the vectors of the evidence chunks it holds, weighted by the
    shingles they share; None for a V1 chunk holding no evidence chunk with a vector (embed it)."""
    out: list[np.ndarray | None] = []
    for held in members:
        use = [(v, n) for j, n in held if (v := vectors[j]) is not None]
        if not use:
            out.append(None)
            continue
        total = np.zeros(use[0][0].shape[0], dtype=np.float64)
        for vector, weight in use:
            total += np.asarray(vector, dtype=np.float64) * float(weight)
        norm = float(np.linalg.norm(total))
        out.append((total / norm).astype(np.float32) if norm > 0 else None)
    return out


def inherit(
    members: Sequence[Sequence[tuple[int, int]]], v1_vectors: Sequence[np.ndarray | None], count: int
) -> list[np.ndarray | None]:
    """For each of `count` evidence chunks, the vector of the V1 chunk holding most of it (None: held
    by none, or that chunk has no vector)."""
    best: dict[int, tuple[int, int]] = {}  # evidence index -> (shared shingles, V1 index)
    for i, held in enumerate(members):
        for j, shared in held:
            if j not in best or shared > best[j][0]:
                best[j] = (shared, i)
    return [v1_vectors[best[j][1]] if j in best else None for j in range(count)]
