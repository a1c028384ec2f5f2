"""One embedding pass for both indexes: V1 chunks linked to the evidence chunks they hold, and V1
vectors pooled from theirs (app/evidence/index/dense.py), without a database."""

from __future__ import annotations

import numpy as np

from app.evidence.index.dense import link, pool
from app.ingest.derived import V1Chunk
from app.text.chunk_records import ChunkPlace, ChunkRecord
from app.text.normalize import normalize

PUMP = "The pump P7 runs at seventy litres per minute when the inlet valve is fully open"
VALVE = "Close the outlet valve slowly so that the pressure in the stage drops evenly"


def chunk(ordinal: int, content: str, *, page: int | None = None, row: tuple[str, ...] = ()) -> ChunkRecord:
    kind = "table_row" if row else "prose"
    place = ChunkPlace(kind=kind, page=page, row_values=row)
    return ChunkRecord(ordinal, f"id-{ordinal}", place, content, content, content.lower(), 10)


def test_a_v1_chunk_holds_the_evidence_chunks_of_its_text_on_its_page() -> None:
    v1 = [V1Chunk(f"{PUMP}. {VALVE}.", 0), V1Chunk(f"Model K 28 2.8 12 {PUMP}", 1)]
    evidence = [
        chunk(0, PUMP, page=1),  # in both V1 chunks' text, but only the first is on its page (0 -> 1)
        chunk(1, VALVE, page=1),
        chunk(2, "Model: K 28\nPower (kW): 2.8\nWeight (kg): 12", page=2, row=("K 28", "2.8", "12")),
        chunk(3, "a sentence that appears in no V1 chunk at all anywhere", page=1),
    ]
    members = link(v1, evidence)
    # (evidence index, 3-shingles shared): the row is matched by its cells in order, as V1 holds them
    assert [sorted(j for j, _ in held) for held in members] == [[0, 1], [2]]
    # all of the pump sentence's shingles: its words after normalisation, less two
    assert dict(members[0])[0] == len(normalize(PUMP).split()) - 2


def test_pooled_vectors_weigh_each_held_chunk_by_the_words_it_shares() -> None:
    a, b = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    members = [[(0, 3), (1, 1)], [(2, 5)], []]
    pooled = pool([a, b, None], members)
    # (3 * a + 1 * b) / |3, 1| = (0.9487, 0.3162); a chunk holding only vector-less chunks, or none: embed it
    np.testing.assert_allclose(pooled[0], [3 / np.sqrt(10), 1 / np.sqrt(10)], rtol=1e-6)
    assert pooled[1] is None and pooled[2] is None
