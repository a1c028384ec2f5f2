"""The dense variants of the natural replay (benchmarks/quality/natural/dense.py): matching, pooling, (B)."""

from __future__ import annotations

import numpy as np

from app.evidence.query.statistics import Statistics
from app.evidence.store.channels import ChunkDetail
from app.text.chunk_records import ChunkPlace
from app.text.normalize import normalize
from benchmarks.quality.natural import dense, dense_rows


def _detail(
    ordinal: int, content: str, *, file_id: str = "f", place: ChunkPlace | None = None
) -> ChunkDetail:
    return ChunkDetail(
        document_id=1,
        ordinal=ordinal,
        chunk_id=f"c{ordinal}",
        file_id=file_id,
        place=place or ChunkPlace(),
        content=content,
        search_text=normalize(content),
        entity_keys=frozenset(),
        filename="f.html",
        title="",
        language=None,
        publication_date=None,
        document_number=None,
        source="original",
        metadata={},
    )


def _kb(details: list[ChunkDetail], v1: list[tuple[str, int | None, str]]) -> dense.KbData:
    return dense.KbData(
        details=details,
        vectors=dense.unit_rows(np.eye(len(details), 4, dtype=np.float32)),
        v1_files=[f for f, _, _ in v1],
        v1_texts=[t for _, _, t in v1],
        v1_pages=[p for _, p, _ in v1],
        v1_vectors=dense.unit_rows(np.eye(len(v1), 4, dtype=np.float32)),
    )


def test_evidence_chunks_go_to_the_v1_chunks_holding_them() -> None:
    row = ChunkPlace(kind="table_row", row_values=("ls", "list directory contents"))
    details = [
        _detail(0, "alpha beta gamma delta"),
        _detail(1, "Name: ls\nWhat: list directory contents", place=row),
        _detail(2, "epsilon zeta eta theta"),
        _detail(3, "alpha beta gamma delta", file_id="other"),
    ]
    v1 = [("f", None, "Alpha beta, gamma delta. ls list directory contents"), ("f", None, "epsilon zeta eta")]
    links = dense.overlap(_kb(details, v1))
    # chunk 2 shares 1 of its 2 shingles with V1 chunk 1 (0.5: held); chunk 3 is another file's
    assert links.members == [[(0, 2), (1, 2)], [(2, 1)]]
    assert links.unmapped_evidence == 1
    assert links.empty_v1 == 0


def test_pages_must_agree_v1_counting_from_0_and_evidence_from_1() -> None:
    details = [
        _detail(0, "one two three", place=ChunkPlace(page=1)),
        _detail(1, "one two three", place=ChunkPlace(page=3)),
    ]
    links = dense.overlap(_kb(details, [("f", 0, "one two three")]))
    assert links.members == [[(0, 1)]]
    assert links.unmapped_evidence == 1


def test_pooled_vector_is_the_shingle_weighted_mean() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    links = dense.Overlap(members=[[(0, 3), (1, 1)], []], unmapped_evidence=0, empty_v1=1)
    pooled, empty = dense.pool(vectors, ["prose", "table_row"], links)
    # (3·[1,0] + 1·[0,1]) normalised: [3, 1] / sqrt(10)
    assert np.allclose(pooled[0], [3 / np.sqrt(10), 1 / np.sqrt(10)])
    assert empty == 1
    prose_only, _ = dense.pool(vectors, ["prose", "table_row"], links, rows=False)
    assert np.allclose(prose_only[0], [1.0, 0.0])


def test_v1_hits_map_to_their_best_evidence_chunks_by_the_questions_words() -> None:
    details = [
        _detail(0, "apt is a package tool"),
        _detail(1, "mount the swap file"),
        _detail(2, "other words"),
    ]
    kb = _kb(details, [("f", None, "apt is a package tool mount the swap file"), ("f", None, "other words")])
    p = dense_rows.prepare(kb)
    stats = Statistics(chunks=3, document_frequency={"swap": 1})
    hits = [(0, 0.8), (1, 0.5)]
    best = dense.v1_channel(kb, p.links, p.lexicon, hits, ["swap"], stats, source="v1-best1", limit=10)
    assert best == [(1, 0.8), (2, 0.5)]
    every = dense.v1_channel(kb, p.links, p.lexicon, hits, ["swap"], stats, source="v1-all", limit=10)
    assert every == [(0, 0.8), (1, 0.8), (2, 0.5)]
    ranked = dense.v1_channel(kb, p.links, p.lexicon, hits, ["swap"], stats, source="v1-ranked", limit=10)
    assert ranked == [(1, 0.8), (2, 0.5), (0, 0.8)]
    assert dense.v1_channel(kb, p.links, p.lexicon, hits, ["swap"], stats, source="v1-ranked", limit=2) == [
        (1, 0.8),
        (2, 0.5),
    ]
