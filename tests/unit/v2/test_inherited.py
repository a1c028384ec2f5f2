"""The vector channel keeps one table row of each group sharing one inherited vector
(app/evidence/query/inherited.py), without a database."""

from __future__ import annotations

import dataclasses

from app.evidence.query.inherited import thin_shared_vectors
from app.evidence.query.records import Candidate, Scored
from tests.unit.v2.helpers import cand


def row(chunk_id: str, document_id: int = 1) -> Candidate:
    return dataclasses.replace(cand(chunk_id, kind="table_row"), document_id=document_id)


def prose(chunk_id: str, document_id: int = 1) -> Candidate:
    return dataclasses.replace(cand(chunk_id, kind="prose"), document_id=document_id)


def ids(hits: list[Scored]) -> list[str]:
    return [h.candidate.chunk_id for h in hits]


def test_rows_sharing_a_vector_keep_the_one_the_words_point_to_in_its_place() -> None:
    hits = [Scored(row("r1"), 0.8), Scored(row("r2"), 0.8), Scored(prose("p"), 0.7), Scored(row("r3"), 0.8)]
    out = thin_shared_vectors(hits, {"r3": 4.2, "r1": 1.0})
    # the kept row keeps its own place in the list; the prose chunk is untouched
    assert ids(out) == ["p", "r3"]


def test_without_lexical_scores_the_first_row_of_a_group_stays() -> None:
    hits = [Scored(row("r1"), 0.8), Scored(row("r2"), 0.8), Scored(row("r3"), 0.6)]
    assert ids(thin_shared_vectors(hits, {})) == ["r1", "r3"]


def test_rows_of_other_documents_or_scores_and_prose_of_one_score_are_not_a_group() -> None:
    hits = [
        Scored(row("r1", 1), 0.8),
        Scored(row("r2", 2), 0.8),  # another document: another table
        Scored(row("r3", 1), 0.79),  # a vector of its own
        Scored(prose("p1"), 0.5),
        Scored(prose("p2"), 0.5),  # prose chunks are embedded each on their own: never thinned
    ]
    assert ids(thin_shared_vectors(hits, {})) == ["r1", "r2", "r3", "p1", "p2"]
