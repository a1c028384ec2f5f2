"""Typed records of the V2 query path, from channel hits to ranked evidence.

    channels -> {name: [Scored(candidate, score), ...]}   each list in its channel's rank order
    fuse(...) -> [Fused]          reciprocal rank fusion, de-duplicated, capped, thresholded
    rerank_window(...) -> [Fused] the window reordered (never grown) with `rerank` set
    build_evidence(...) -> [EvidenceItem]   the contract's result shape

Pages are 1-based everywhere in V2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.text.chunk_records import ChunkPlace

# Channel names in the order provenance is reported.
CHANNELS = ("exact", "lexical", "vector")


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """What a result shows of the document a chunk comes from; one object shared by its chunks."""

    filename: str = ""
    title: str | None = None
    language: str | None = None
    publication_date: str | None = None
    source_type: str | None = None  # the file name's suffix ("pdf")
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One chunk as a channel returns it: its place, content, normalised search text and document."""

    chunk_id: str
    file_id: str
    content: str
    search_text: str
    place: ChunkPlace = field(default_factory=ChunkPlace)
    document: DocumentInfo = field(default_factory=DocumentInfo)
    # normalised entity keys of the chunk ("k 28", "12 mm", "iso 9001"), as the index stores them
    entity_keys: frozenset[str] = frozenset()
    # where the store holds it (None for a candidate made elsewhere): its neighbours' keys
    document_id: int | None = None
    ordinal: int | None = None


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate with its channel's own score (BM25, cosine similarity, exact-match weight 0..1)."""

    candidate: Candidate
    score: float = 0.0
    # how the channel matched it: "bm25" / "trigram" (lexical); "row_label", "title", "filename",
    # "document_number" or an entity's kind (exact); None for the vector channel
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Fused:
    """A candidate after fusion: its fused score, the channels that found it and their ranks."""

    candidate: Candidate
    score: float  # the fused score in 0..1: the fusion value over the best it can give
    channels: tuple[str, ...]
    ranks: Mapping[str, int]
    exact: float = 0.0  # the exact channel's weight for it, 0 when that channel did not find it
    # the vector channel's cosine similarity for it, None when that channel did not return it
    dense: float | None = None
    rerank: float | None = None  # the reranker's score in 0..1, once reranked

    @property
    def final_score(self) -> float:
        """The score the item is judged by: the reranker's once reranked, else the fused one."""
        return self.rerank if self.rerank is not None else self.score
