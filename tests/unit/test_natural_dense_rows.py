"""Variants of (D) giving table rows and V1 chunks vectors without more embedding (dense_rows.py)."""

from __future__ import annotations

import numpy as np

from app.text.chunk_records import ChunkPlace
from benchmarks.quality.natural import dense, dense_rows


class _Chunk:
    def __init__(self, place: ChunkPlace) -> None:
        self.place = place
        self.content = ""


def test_a_v1_chunk_pools_its_prose_only_and_one_holding_none_keeps_its_own_vector() -> None:
    vectors = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    kinds = ["prose", "table_row", "table_row"]
    members = [[(0, 3), (1, 5)], [(2, 4)], []]
    own = dense.unit_rows(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], dtype=np.float32))
    pooled, embedded = dense_rows.pool_prose(vectors, kinds, members, own)
    assert np.allclose(pooled[0], [1.0, 0.0, 0.0])  # the row's own vector is never read
    assert np.allclose(pooled[1:], own[1:]) and embedded == 2
    zero, _ = dense_rows.pool_prose(vectors, kinds, members, None)
    assert not np.any(zero[1:])
    # a row counts through the chunk it borrows from (here the prose chunk 0)
    borrowed, _ = dense_rows.pool_prose(vectors, kinds, members, own, rows_from=[-1, 0, -1])
    assert np.allclose(borrowed[0], [1.0, 0.0, 0.0]) and np.allclose(borrowed[1], own[1])


def test_a_row_belongs_to_the_v1_chunk_sharing_most_of_it() -> None:
    links = dense.Overlap(members=[[(0, 4), (1, 2)], [(1, 3), (2, 1)]], unmapped_evidence=0, empty_v1=0)
    kinds = ["prose", "table_row", "table_row"]
    assert dense_rows.holders(kinds, links) == {1: 1, 2: 1}
    assert dense_rows.without_prose(kinds, links) == [1]


def test_a_rows_table_gives_its_whole_chunk_and_the_prose_before_it() -> None:
    row = ChunkPlace(kind="table_row", table_index=0)
    chunks = [
        _Chunk(ChunkPlace()),
        _Chunk(ChunkPlace(table_index=0)),  # the small table whole
        _Chunk(row),
        _Chunk(ChunkPlace(kind="table_row", table_index=1)),  # a large table: no whole chunk
        _Chunk(ChunkPlace()),
    ]
    found = dense_rows.tables(chunks, ["f"] * 5)
    assert found.whole == [-1, -1, 1, -1, -1]
    assert found.context == [-1, -1, 1, 0, -1]  # table 1 skips table 0's chunks back to the prose


def test_rows_sharing_one_vector_leave_the_channel_one_best_row() -> None:
    group = np.array([-1, 7, 7, 7, -1])
    near = [(1, 0.9), (2, 0.9), (3, 0.9), (0, 0.8), (4, 0.7)]
    score = {1: 0.0, 2: 2.0, 3: 1.0}
    assert dense.thin(near, group, lambda j: score.get(j, 0.0), 3) == [(2, 0.9), (0, 0.8), (4, 0.7)]
