"""One embedding pass for both indexes: V1 chunks linked to the evidence chunks they hold, and V1
vectors pooled from theirs (app/evidence/index/dense.py), without a database."""

from __future__ import annotations

import numpy as np

from app.evidence.index.dense import inherit, link, pool
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


def test_a_table_row_inherits_the_vector_of_the_v1_chunk_holding_most_of_it() -> None:
    first, second = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    # per V1 chunk, (row, shingles shared): row 0 is held by the first two, more by the second; row 1
    # by the first only; row 2 by none; row 3 by a V1 chunk without a vector (embed it on its own)
    members = [[(0, 2), (1, 4)], [(0, 5)], [(3, 9)]]
    inherited = inherit(members, [first, second, None], 4)
    assert inherited[0] is second and inherited[1] is first
    assert inherited[2] is None and inherited[3] is None


def test_a_tie_between_two_v1_chunks_goes_to_the_first() -> None:
    a, b = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    assert inherit([[(0, 3)], [(0, 3)]], [a, b], 1)[0] is a


def test_rows_linked_and_inherited_end_to_end_take_their_own_tables_vector() -> None:
    v1 = [V1Chunk(f"{PUMP}. Model K 28 2.8 12", 0), V1Chunk(f"{VALVE}. Model K 40 4.0 19", 0)]
    rows = [
        chunk(0, "Model: K 40\nPower (kW): 4.0\nWeight (kg): 19", page=1, row=("K 40", "4.0", "19")),
        chunk(1, "Model: K 28\nPower (kW): 2.8\nWeight (kg): 12", page=1, row=("K 28", "2.8", "12")),
        chunk(2, "Model: Z 99\nPower (kW): 9.9\nWeight (kg): 99", page=1, row=("Z 99", "9.9", "99")),
    ]
    a, b = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    assert inherit(link(v1, rows), [a, b], 3) == [b, a, None]
