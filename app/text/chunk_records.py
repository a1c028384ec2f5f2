"""The records of one V2 chunk that the index, the store and the query path share.

    ChunkPlace    where a chunk sits in its file (page, section path, table, row) and, for a table
                  row, its cells with the table's headers, units and footnotes
    ChunkRecord   one chunk as the chunker makes it and the store keeps it: its place, display
                  content, embedded text, normalised search text and entities

The chunker builds a place once; the store's rows, the query path's candidates and the evidence
builder carry that same object instead of copying its fields. The file is not part of a place: the
chunker does not know it, and the store keeps it once per document. Pages are 1-based (V2's
convention).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.text.entities import Entity

ChunkKind = Literal["prose", "table_row"]


@dataclass(frozen=True, slots=True)
class ChunkPlace:
    """Where a chunk sits in its file, and the table row it is when `kind` is "table_row"."""

    kind: ChunkKind = "prose"
    page: int | None = None  # 1-based page in the file
    page_label: str | None = None  # the printed label, when the document defines one
    section: tuple[str, ...] = ()  # the headings above it, outermost first
    table_caption: str | None = None
    table_index: int | None = None  # 0-based among the document's tables
    row_index: int | None = None  # 0-based among the table's data rows
    row_label: str | None = None  # the row's first non-empty cell
    headers: tuple[str, ...] = ()
    row_values: tuple[str, ...] = ()
    units: tuple[str | None, ...] = ()  # per column, the unit its header names
    footnotes: tuple[str, ...] = ()

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> ChunkPlace:
        """The place of a stored chunk, from a row whose columns are named like these fields."""
        return cls(
            kind=row["kind"],
            page=row["page"],
            page_label=row["page_label"],
            section=tuple(row["section"]),
            table_caption=row["table_caption"],
            table_index=row["table_index"],
            row_index=row["row_index"],
            row_label=row["row_label"],
            headers=tuple(row["headers"]),
            row_values=tuple(row["row_values"]),
            units=tuple(row["units"]),
            footnotes=tuple(row["footnotes"]),
        )


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One V2 chunk: its place, display content, embedded text, normalised search text and entities."""

    ordinal: int
    id: str
    place: ChunkPlace
    content: str
    embed_text: str
    search_text: str
    tokens: int
    entities: tuple[Entity, ...] = ()
    whole_table: bool = False  # a small table kept whole as one prose chunk (its rows are chunks too)
