"""Namespaces' vectors held in memory: V1's exact scan as one matrix product instead of a table scan.

Pure values and NumPy, no database. What a search may see is never decided here: the database
names the visible files and their revisions (`ragoverlay_visible_vector_files`), this cache scores
the rows of exactly those files, and the candidates go back to the database, which checks them
against the scope once more and orders them by the exact distance (`ragoverlay_rank_candidates`).

Held per namespace (owner) and dimension as one contiguous float32 matrix of the compact copy's
unit-length halfvec values, renormalised (so a dot product is the cosine the copy's exact scan
ranks by), plus each file's revision and row range. A file whose revision the database reports
differently is loaded again; a namespace's matrix is rebuilt when any of its files changes. Least
recently used namespaces leave when the byte budget is full; a namespace larger than the budget is
never held (its searches keep the database's exact scan).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.store.memory_search import PackedVectors, VisibleRevision

# uuid bytes and the row's file index, per row, on top of the matrix itself
ROW_OVERHEAD_BYTES = 20
# scoring the whole namespace and masking beats gathering its visible rows above this share
_FULL_SCAN_SHARE = 0.5


@dataclass(frozen=True)
class FileVectors:
    """One file's rows of one dimension as the database returned them (`ragoverlay_scope_vectors`)."""

    owner: str
    file_id: str
    revision: int
    ids: np.ndarray  # (n, 16) uint8: the rows' uuids
    vectors: np.ndarray  # (n, dims) float32, unit length

    @classmethod
    def decode(cls, row: PackedVectors, dims: int) -> FileVectors:
        """Decode a row of `ragoverlay_scope_vectors`: its ids and its concatenated `halfvec_send` values."""
        return cls.decode_all([row], dims)[0]

    @classmethod
    def decode_all(cls, rows: Sequence[PackedVectors], dims: int) -> list[FileVectors]:
        """Decode many files at once (one conversion for all their rows: a cold namespace is 1,000s)."""
        row_bytes = 4 + 2 * dims  # uint16 dimension, uint16 reserved, big-endian half floats
        for row in rows:
            if len(row.ids) % 16 or len(row.packed) != row.rows * row_bytes:
                size = len(row.packed)
                raise ValueError(
                    f"file {row.file_id!r}: {size} vector bytes for {row.rows} rows of {dims} dims"
                )
        total = sum(row.rows for row in rows)
        raw = np.frombuffer(b"".join(row.packed for row in rows), dtype=np.uint8).reshape(total, row_bytes)
        if total and not np.all(raw[:, :2].view(">u2")[:, 0] == dims):
            raise ValueError(f"a vector of another dimension than {dims}")
        # to little-endian halves as integers first: converting big-endian halves directly is slower
        halves = np.ascontiguousarray(raw[:, 4:]).view(">u2").astype("<u2").view("<f2")
        vectors = halves.astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        ids = np.frombuffer(b"".join(row.ids for row in rows), dtype=np.uint8).reshape(total, 16)
        out = []
        at = 0
        for row in rows:
            n = row.rows
            out.append(cls(row.owner, row.file_id, row.revision, ids[at : at + n], vectors[at : at + n]))
            at += n
        return out


@dataclass(frozen=True)
class Block:
    """One namespace's rows of one dimension: a contiguous matrix and each file's row range."""

    files: dict[str, tuple[int, int, int, int]]  # file id -> (revision, first row, rows, index in names)
    ids: np.ndarray  # (n, 16) uint8
    matrix: np.ndarray  # (n, dims) float32
    row_files: np.ndarray  # (n,) int32: each row's file, an index into `names`
    names: tuple[str, ...]  # file ids in row order

    @property
    def nbytes(self) -> int:
        """Memory the block holds (matrix, ids and bookkeeping)."""
        return int(self.matrix.nbytes) + len(self.ids) * ROW_OVERHEAD_BYTES

    @classmethod
    def build(cls, dims: int, previous: Block | None, loaded: Iterable[FileVectors]) -> Block:
        """`previous` with the files of `loaded` replaced or added (a new block; blocks never change)."""
        fresh = {f.file_id: f for f in loaded}
        parts: list[tuple[str, int, np.ndarray, np.ndarray]] = []
        if previous is not None:
            for file_id, (revision, start, count, _) in previous.files.items():
                if file_id not in fresh:
                    rows = slice(start, start + count)
                    parts.append((file_id, revision, previous.ids[rows], previous.matrix[rows]))
        parts.extend((f.file_id, f.revision, f.ids, f.vectors) for f in fresh.values())
        files: dict[str, tuple[int, int, int, int]] = {}
        at = 0
        for ordinal, (file_id, revision, ids, _) in enumerate(parts):
            files[file_id] = (revision, at, len(ids), ordinal)
            at += len(ids)
        if parts:
            ids = np.concatenate([p[2].reshape(-1, 16) for p in parts])
            matrix = np.concatenate([p[3].reshape(-1, dims) for p in parts]).astype(np.float32, copy=False)
        else:
            ids = np.empty((0, 16), dtype=np.uint8)
            matrix = np.empty((0, dims), dtype=np.float32)
        counts = [len(p[2]) for p in parts]
        row_files = np.repeat(np.arange(len(parts), dtype=np.int32), counts)
        names = tuple(p[0] for p in parts)
        return cls(files, ids, np.ascontiguousarray(matrix), row_files, names)


@dataclass(frozen=True)
class Nearest:
    """The memory scan's answer: candidate ids, their files, and how many rows it scored."""

    ids: list[uuid.UUID]
    file_ids: list[str]
    visible_rows: int


class VectorCache:
    """Blocks by (owner, dimension), least recently used first, within `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[tuple[str, int], Block] = OrderedDict()
        self._bytes = 0
        self.loads = 0  # files taken in since start

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def missing(self, visible: Iterable[VisibleRevision], dims: int) -> list[VisibleRevision]:
        """The visible files not held at the revision the database reported."""
        out = []
        for f in visible:
            block = self._blocks.get((f.owner, dims))
            held = block.files.get(f.file_id) if block is not None else None
            if held is None or held[0] != f.revision:
                out.append(f)
        return out

    def rank_held(
        self,
        file_ids: Sequence[str],
        owners: Iterable[str],
        dims: int,
        query: np.ndarray,
        n: int,
        granted: Iterable[tuple[str, str]] = (),
    ) -> tuple[Nearest, list[int]] | None:
        """Rank the listed files held under `owners` (and the (owner, file) `granted`): a guess.

        Returns the ranking and the revisions it ranked, for the database to confirm that the
        scope shows exactly those file versions (`ragoverlay_memory_answer`); None when nothing
        listed is held. No per-file object is made: 1,000 files cost two dict lookups each.
        """
        wanted: dict[str, list[str]] = {owner: list(file_ids) for owner in owners}
        for owner, file_id in granted:
            wanted.setdefault(owner, []).append(file_id)
        parts: list[tuple[Block, list[tuple[int, int, int, int]]]] = []
        revisions: list[int] = []
        for owner, listed in wanted.items():
            block = self._blocks.get((owner, dims))
            if block is None:
                continue
            spans = [span for span in map(block.files.get, listed) if span is not None]
            if spans:
                self._blocks.move_to_end((owner, dims))
                parts.append((block, spans))
                revisions.extend(span[0] for span in spans)
        if not parts:
            return None
        return _rank(parts, query, n), revisions

    def update(self, dims: int, loaded: Sequence[FileVectors]) -> int:
        """Take in freshly loaded files (their namespaces' blocks are rebuilt); the blocks evicted."""
        by_owner: dict[str, list[FileVectors]] = {}
        for f in loaded:
            by_owner.setdefault(f.owner, []).append(f)
        self.loads += len(loaded)
        for owner, files in by_owner.items():
            key = (owner, dims)
            block = Block.build(dims, self._blocks.get(key), files)
            self._drop(key)
            if block.nbytes > self.max_bytes:
                continue  # never held: this namespace's searches stay in the database
            self._blocks[key] = block
            self._bytes += block.nbytes
        evicted = 0
        while self._bytes > self.max_bytes and self._blocks:
            self._drop(next(iter(self._blocks)))
            evicted += 1
        return evicted

    def _drop(self, key: tuple[str, int]) -> None:
        block = self._blocks.pop(key, None)
        if block is not None:
            self._bytes -= block.nbytes

    def nearest(
        self, visible: Sequence[VisibleRevision], dims: int, query: np.ndarray, n: int
    ) -> Nearest | None:
        """The `n` visible rows nearest to `query` (unit length); None when any visible file is not held."""
        by_owner: dict[str, list[VisibleRevision]] = {}
        for f in visible:
            by_owner.setdefault(f.owner, []).append(f)
        parts: list[tuple[Block, list[tuple[int, int, int, int]]]] = []
        for owner, files in by_owner.items():
            block = self._blocks.get((owner, dims))
            if block is None:
                return None
            self._blocks.move_to_end((owner, dims))
            held_files = block.files
            spans = []
            for f in files:
                held = held_files.get(f.file_id)
                if held is None or held[0] != f.revision:
                    return None
                spans.append(held)
            parts.append((block, spans))
        return _rank(parts, query, n)


def _rank(
    parts: Sequence[tuple[Block, Sequence[tuple[int, int, int, int]]]], query: np.ndarray, n: int
) -> Nearest:
    """The `n` rows nearest to `query` among the given files (spans) of each block."""
    scores: list[np.ndarray] = []
    where: list[tuple[Block, np.ndarray | None]] = []
    for block, spans in parts:
        block_scores, rows = _score(block, spans, query)
        scores.append(block_scores)
        where.append((block, rows))
    total = sum(len(s) for s in scores)
    if total == 0 or n <= 0:
        return Nearest([], [], total)
    return _top(scores, where, n, total)


def _score(
    block: Block, spans: Sequence[tuple[int, int, int, int]], query: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Similarities of a block's visible rows, and those rows' positions (None: all of them, in order)."""
    rows_total = len(block.ids)
    visible_rows = sum(span[2] for span in spans)
    if visible_rows == rows_total:
        return block.matrix @ query, None
    if visible_rows == 0:
        return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.intp)
    # which rows: a mask over the block's files, spread over their rows (no per-file Python work)
    shown = np.zeros(len(block.names), dtype=bool)
    shown[[span[3] for span in spans]] = True
    rows = np.flatnonzero(shown[block.row_files])
    if visible_rows >= _FULL_SCAN_SHARE * rows_total:
        return (block.matrix @ query)[rows], rows
    return block.matrix[rows] @ query, rows


def _top(
    scores: list[np.ndarray], where: list[tuple[Block, np.ndarray | None]], n: int, total: int
) -> Nearest:
    """The `n` best rows over all blocks, best first, with their ids and files."""
    joined = np.concatenate(scores) if len(scores) > 1 else scores[0]
    n = min(n, total)
    best = np.argpartition(-joined, n - 1)[:n] if n < total else np.arange(total)
    best = best[np.argsort(-joined[best], kind="stable")]
    bounds = np.cumsum([len(s) for s in scores])
    ids: list[uuid.UUID] = []
    file_ids: set[str] = set()
    for position in best.tolist():
        which = int(np.searchsorted(bounds, position, side="right"))
        block, rows = where[which]
        local = position - (int(bounds[which - 1]) if which else 0)
        row = int(rows[local]) if rows is not None else local
        ids.append(uuid.UUID(bytes=block.ids[row].tobytes()))
        file_ids.add(block.names[int(block.row_files[row])])
    return Nearest(ids, sorted(file_ids), total)
