"""Variants of (D) that give table rows and V1 chunks vectors without embedding anything more.

(D) embeds the evidence chunks that are not table rows (a small table's whole-table chunk is prose,
with its `table_index`) and pools V1's vectors from them. Strictly, no row then has a vector, so a
V1 chunk holding rows but no prose chunk has nothing to pool: `dense.pool(rows=False)` still pooled
the rows' (captured) vectors there. The pools here never read a row's own vector:

    prose-strict      V1 from its prose chunks only; one holding none gets a zero vector
    prose-strict-own  ... one holding none keeps its own embedded vector (embedded on its own, the
                      only V1 chunks embedded: their count is what (D1) adds to (D)'s cost)
    prose-table-own   (D3) also each row a V1 chunk holds, weighted by its shared shingles as a
                      prose chunk is, with the vector of its table's whole-table chunk (small tables)
    prose-context-own (D3) ... rows of a table without one take the prose chunk nearest before the
                      table in its file (what introduces it)
    partial-own       (D3) every prose chunk sharing any shingle with the V1 chunk, weighted by the
                      shingles shared (no containment threshold), plus rows as prose-context-own

and the vector channel's rows (`row_vectors`):

    none   (D)  rows have no vector
    v1     (D1) a row takes the pooled vector of the V1 chunk holding most of it
    table  (D2) a row of a table with a whole-table chunk takes that chunk's vector; others as v1

Rows sharing one vector tie in the channel (a V1 chunk's 30 rows at one similarity push 30 prose
chunks out of its 50). `-best1`: of the rows sharing a vector, the channel keeps only the one best
by BM25 of the question (`dense.Lexicon`), as v1-best1 keeps one chunk per V1 hit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.text.normalize import normalize
from benchmarks.quality.natural import dense

POOLS = ("prose-strict", "prose-strict-own", "prose-table-own", "prose-context-own", "partial-own")
ROW_SOURCES = {
    "evidence-prose": "none",
    "evidence-rows-v1": "v1",
    "evidence-rows-table": "table",
    "evidence-rows-v1-best1": "v1",
    "evidence-rows-table-best1": "table",
}


@dataclass
class Tables:
    """Per evidence chunk: its table's whole-table chunk and the prose chunk before its table (or -1)."""

    whole: list[int]
    context: list[int]


def tables(details: Sequence[dense.Chunk], files: Sequence[str]) -> Tables:
    """Which whole-table chunk (and which introducing prose chunk) each evidence chunk's table has.

    `details` in capture order (by document, then ordinal); a whole-table chunk cut in pieces counts
    by its first. A row's table is (file, table_index)."""
    whole_of: dict[tuple[str, int], int] = {}
    first_row: dict[tuple[str, int], int] = {}
    for j, d in enumerate(details):
        t = d.place.table_index
        if t is None:
            continue
        if d.place.kind == "table_row":
            first_row.setdefault((files[j], t), j)
        else:
            whole_of.setdefault((files[j], t), j)
    context_of: dict[tuple[str, int], int] = {}
    for key, j in {**first_row, **whole_of}.items():  # the earliest chunk of the table, then back
        start = min(j, first_row.get(key, j), whole_of.get(key, j))
        k = start - 1
        while k >= 0 and files[k] == key[0] and details[k].place.table_index is not None:
            k -= 1
        context_of[key] = k if k >= 0 and files[k] == key[0] else -1
    whole = [-1] * len(details)
    context = [-1] * len(details)
    for j, d in enumerate(details):
        t = d.place.table_index
        if t is not None and d.place.kind == "table_row":
            whole[j] = whole_of.get((files[j], t), -1)
            context[j] = whole[j] if whole[j] >= 0 else context_of.get((files[j], t), -1)
    return Tables(whole, context)


def partial(kb: dense.KbData) -> list[list[tuple[int, int]]]:
    """Per V1 chunk every evidence chunk of its file (and page) sharing any shingle, with the count."""
    by_file: dict[str, dict[tuple[str, ...], list[int]]] = {}
    for i, (file_id, text) in enumerate(zip(kb.v1_files, kb.v1_texts, strict=True)):
        grams = by_file.setdefault(file_id, {})
        for g in dense.shingles(normalize(text).split()):
            grams.setdefault(g, []).append(i)
    out: list[list[tuple[int, int]]] = [[] for _ in kb.v1_texts]
    for j, d in enumerate(kb.details):
        counts: Counter[int] = Counter()
        grams = by_file.get(d.file_id, {})
        for g in dense.shingles(dense.match_tokens(d)):
            counts.update(grams.get(g, ()))
        for i, n in counts.items():
            v1_page, page = kb.v1_pages[i], d.place.page
            if v1_page is None or page is None or page == v1_page + 1:
                out[i].append((j, n))
    return out


def pool_strict(
    kb: dense.KbData, links: dense.Overlap, mode: str, found: Tables | None = None
) -> tuple[np.ndarray, int]:
    """V1's vectors by `mode` (module docstring); and how many V1 chunks need their own embedding."""
    kinds = [d.place.kind for d in kb.details]
    if found is None:
        found = tables(kb.details, [d.file_id for d in kb.details])
    members = partial(kb) if mode == "partial-own" else links.members
    source = {"prose-table-own": found.whole, "prose-context-own": found.context}.get(
        mode, found.context if mode == "partial-own" else None
    )
    own = kb.v1_vectors if mode.endswith("-own") else None
    return pool_prose(kb.vectors, kinds, members, own, source)


def pool_prose(
    vectors: np.ndarray,
    kinds: Sequence[str],
    members: Sequence[Sequence[tuple[int, int]]],
    own: np.ndarray | None,
    rows_from: Sequence[int] | None = None,
) -> tuple[np.ndarray, int]:
    """Each V1 chunk's vector from the prose chunks it holds, weighted by shared shingles (a row counts
    only through `rows_from`: the chunk whose vector it borrows, -1 none). A V1 chunk left with nothing
    takes its row of `own` (its own embedding; None: zero). Returns the vectors and that count."""
    out = np.zeros((len(members), vectors.shape[1]), dtype=np.float64)
    for i, held in enumerate(members):
        for j, n in held:
            k = j if kinds[j] != "table_row" else (rows_from[j] if rows_from is not None else -1)
            if k >= 0:
                out[i] += vectors[k].astype(np.float64) * n
    empty = ~np.any(out, axis=1)
    result = dense.unit_rows(out)
    if own is not None:
        result[empty] = own[empty]
    return result, int(empty.sum())


def without_prose(kinds: Sequence[str], links: dense.Overlap) -> list[int]:
    """The V1 chunks holding no prose chunk: under prose-strict-own the only V1 chunks embedded."""
    return [i for i, held in enumerate(links.members) if all(kinds[j] == "table_row" for j, _ in held)]


def holders(kinds: Sequence[str], links: dense.Overlap) -> dict[int, int]:
    """Each table row's V1 chunk: of those holding it, the one sharing the most shingles (ties: first)."""
    best: dict[int, tuple[int, int]] = {}
    for i, held in enumerate(links.members):
        for j, n in held:
            if kinds[j] == "table_row" and (j not in best or n > best[j][0]):
                best[j] = (n, i)
    return {j: i for j, (_, i) in best.items()}


def row_vectors(
    kb: dense.KbData,
    links: dense.Overlap,
    pooled: np.ndarray | None,
    source: str,
    found: Tables | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The vector channel's matrix for `source` (ROW_SOURCES): prose chunks their own vectors, rows by
    policy; and per chunk the vector it shares (-1: its own or none; V1 chunk i, or whole-table chunk
    j as len(V1) + j)."""
    policy = ROW_SOURCES[source]
    kinds = [d.place.kind for d in kb.details]
    rows = np.array([k == "table_row" for k in kinds])
    out = kb.vectors * (~rows)[:, None].astype(np.float32)
    group = np.full(len(kb.details), -1)
    if policy == "none":
        return out, group
    if pooled is None:
        raise SystemExit(f"--vector-source {source} gives rows V1's pooled vectors: add --v1-source pooled")
    holder = holders(kinds, links)
    if policy == "table" and found is None:
        found = tables(kb.details, [d.file_id for d in kb.details])
    for j in map(int, np.flatnonzero(rows)):
        if policy == "table" and found is not None and found.whole[j] >= 0:
            out[j] = kb.vectors[found.whole[j]]
            group[j] = len(links.members) + found.whole[j]
        elif j in holder:
            out[j] = pooled[holder[j]]
            group[j] = holder[j]
    return out, group


def prepare(
    kb: dense.KbData, *, pool: str | None = None, windows: Any = None, source: str = ""
) -> dense.Prepared:
    """The overlap of V1 and evidence chunks, BM25 inside them, the neighbours, the pooled vectors."""
    from app.evidence.query.passages import Neighbour
    from app.text.chunk_records import ChunkPlace

    links = dense.overlap(kb)
    neighbours = {
        (d.document_id, d.ordinal): Neighbour(
            d.content, ChunkPlace(kind=d.place.kind, page=d.place.page, section=d.place.section)
        )
        for d in kb.details
    }
    out = dense.Prepared(kb, links, dense.Lexicon.of(kb), neighbours, {})
    if pool in POOLS:  # (D1)..(D3): no row's own vector is read
        out.pooled, out.pooled_empty = pool_strict(kb, links, pool)
    elif pool is not None:
        out.pooled, out.pooled_empty = dense.pooled_vectors(kb, links, rows=pool.startswith("rows"))
        if pool.endswith("-own"):  # a V1 chunk holding no evidence chunk is embedded on its own
            empty = ~np.any(out.pooled, axis=1)
            out.pooled[empty] = kb.v1_vectors[empty]
    if windows is not None:
        out.windows = windows.vectors
        out.window_links = dense.link(
            [(kb.v1_files[o], kb.v1_pages[o], t) for o, t in zip(windows.owner, windows.texts, strict=True)],
            [(d.file_id, d) for d in kb.details],
        )
    if source in ROW_SOURCES:
        out.channel, out.shared = row_vectors(kb, links, out.pooled, source)
    return out
