"""Table rows that share one vector in the vector channel: one of them, the one the words point to.

A table row is not embedded on its own: it takes the vector of the V1 chunk holding it
(`app/evidence/index/dense.py`), so every row of that chunk scores the same in the vector channel
and, unthinned, a table's rows fill its list (13.7 of 50 places on average on the natural
questions' dev split, up to 39 in one group). The vector channel keeps one row of each group (same
document, same similarity): the one the lexical channel scores best, else the first; prose chunks
and rows with a vector of their own pass untouched. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.evidence.query.records import Scored


def thin_shared_vectors(hits: Sequence[Scored], lexical: Mapping[str, float]) -> list[Scored]:
    """`hits` (the vector channel's, best first) with one table row per shared vector.

    `lexical`: the lexical channel's score of each chunk it found, by chunk id (0 for the others).
    """
    groups: dict[tuple[int | None, float], list[int]] = {}
    for index, hit in enumerate(hits):
        if hit.candidate.place.kind == "table_row":
            groups.setdefault((hit.candidate.document_id, hit.score), []).append(index)
    drop: set[int] = set()
    for members in groups.values():
        if len(members) > 1:
            keep = max(members, key=lambda i: (lexical.get(hits[i].candidate.chunk_id, 0.0), -i))
            drop.update(i for i in members if i != keep)
    return [hit for index, hit in enumerate(hits) if index not in drop]
