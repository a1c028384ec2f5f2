"""What the lexical channel's statistics say about the visible part of a run, and what they weigh.

`Statistics` holds the visible chunks and each question term's document frequency, keyed by the
question's own terms: a run that indexes stems (`app.text.stems.lexical_key`) is asked for stem keys,
and `lexical_statistics` maps their counts back to the terms the refusal and the ranking read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.evidence.query.records import Scored
from app.text.normalize import normalize
from app.text.vocabulary import known


@dataclass(frozen=True)
class Statistics:
    """What the refusal decision reads about the visible part of the run (0 chunks: unknown)."""

    chunks: int = 0
    document_frequency: Mapping[str, int] = field(default_factory=dict)


def lexical_statistics(
    chunks: int, keys: Mapping[str, Sequence[str]], frequency: Mapping[str, int]
) -> Statistics:
    """Statistics keyed by the question's terms (`keys`: term -> the keys asked for it; a chunk holds
    a word under one of them, its document's language's)."""
    return Statistics(chunks, {term: sum(frequency.get(k, 0) for k in ks) for term, ks in keys.items()})


def discount_common_labels(hits: Sequence[Scored], stats: Statistics, rare_share: float) -> list[Scored]:
    """Exact hits on a one-word row label weighed by how rare that word is in the visible set.

    A glossary table's row labelled "open" is not an identifier: the word is in a tenth of the
    chunks, and a question using it in passing must not get that row as a top exact match. Up to
    `rare_share` of the chunks a word counts fully; above it the weight falls with the log of its
    share, to 0 for a word every chunk holds. Re-sorted by the new weights (stable).
    """
    n = stats.chunks
    out: list[Scored] = []
    for hit in hits:
        label = normalize(hit.candidate.place.row_label or "")
        df = stats.document_frequency.get(label, 0) if label and " " not in label else 0
        if df > 0 and n > 1 and df / n > rare_share:
            factor = max(0.0, math.log(n / df) / math.log(1 / rare_share)) if rare_share < 1 else 0.0
            hit = Scored(hit.candidate, hit.score * min(factor, 1.0), hit.detail)
        out.append(hit)
    return sorted(out, key=lambda hit: -hit.score)


def discount_word_labels(hits: Sequence[Scored], weight: float) -> list[Scored]:
    """Exact hits on a row labelled with one ordinary English or German word, times `weight`.

    A glossary table's rows ("Open", "Speichern") match a question that uses the word in passing:
    such a label names a term, not a thing only this row holds, as a code ("K28") or a name no
    dictionary knows ("unpaper") does. Re-sorted by the new weights (stable).
    """
    if weight >= 1.0:
        return list(hits)
    out: list[Scored] = []
    for hit in hits:
        label = normalize(hit.candidate.place.row_label or "")
        if hit.candidate.place.kind == "table_row" and label.isalpha() and known(label):
            hit = Scored(hit.candidate, hit.score * weight, hit.detail)
        out.append(hit)
    return sorted(out, key=lambda hit: -hit.score)
