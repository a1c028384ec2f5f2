"""The V2 chunker's whole output for one mixed document, pinned field by field (ids included).

Prose across pages and sections, overlap, list items, a definition longer than a chunk, code, a
caption paragraph before an untitled table, small and large tables, units from headers, inline and
separate footnotes, a row longer than a chunk, a table given as text only, a header row alone, a
heading with nothing under it, an overlong heading, entities, boilerplate and a repeated block.
The expected output is `golden/chunker_mixed.json`: a change of chunking (or of chunk ids, which
decide which vectors a new run reuses) shows up as a diff of that file, to be made on purpose.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from app.evidence.index.boilerplate import block_fingerprint
from app.evidence.index.chunk_writer import ChunkerConfig
from app.evidence.index.chunker import chunk_document
from app.ingest.types import Block, LoadedDocument
from app.text.tokens import SimpleTokenCounter

GOLDEN = Path(__file__).with_name("golden") / "chunker_mixed.json"
PLACE = (
    "kind", "page", "page_label", "section", "table_caption", "table_index", "row_index", "row_label",
    "headers", "row_values", "units", "footnotes",
)  # fmt: skip


def mixed_blocks() -> list[Block]:
    """One document with every structure the chunker treats on its own."""
    prose = " ".join(f"Sentence {i} tells the reader about pump part {i}." for i in range(9))
    definition = " ".join(f"The flow rate clause {i} is measured in l/min at 20 °C." for i in range(6))
    long_cells = [f"value {i} " * 8 for i in range(5)]
    return [
        Block("list_item", "Home", 0, boilerplate="nav"),
        Block("heading", "Pump manual", 0, level=1, page_label="i"),
        Block("paragraph", prose, 0, page_label="i"),
        Block("definition", definition, 0, term="Flow rate", page_label="i"),
        Block("list_item", "Check the valve.", 0, level=1, page_label="i"),
        Block("list_item", "Clean the K 28 filter every 12 months.", 0, level=1, page_label="i"),
        Block("code", "pump --start\n\npump --status --verbose", 0, title="sh", page_label="i"),
        Block("paragraph", "Page two continues the introduction; see ISO 9001 and DIN 1234.", 1),
        Block("paragraph", "© Example site menu", 1),
        Block("heading", "Sizes", 1, level=2),
        Block("paragraph", "Table 3: Sizes of the K series", 1),
        Block(
            "table",
            "K 25 | 12 | 3,5\nK 28 | 14 |",
            1,
            rows=[["K 25", "12", "3,5"], ["K 28", "14", ""]],
            headers=["Type", "Length (mm)", "Weight [kg]"],
            footnotes=("Measured at 20 °C.",),
        ),
        Block(
            "table",
            "many rows",
            1,
            rows=[[f"R{i}", str(i * 10)] for i in range(5)],
            headers=["Row", "Speed, in rpm"],
            title="Speeds",
            footnotes=(" ".join(f"note{i}" for i in range(20)),),
        ),
        Block(
            "table", "long row", 2, rows=[["L1", *long_cells]], headers=["Key", *[f"h{i}" for i in range(5)]]
        ),
        Block("table", "a | 1\nb | 2", 2, title="Text only"),
        Block("table", "", 2, rows=[], headers=["Only", "Headers"], title="Header row"),
        Block("heading", "Empty section", 2, level=1),
        Block("heading", "Maintenance", 3, level=1, page_label="7"),
        Block("heading", "Dates", 3, level=2, page_label="7"),
        Block(
            "paragraph", "Revised on 2024-05-01; the K 28 weighs 4 kg and draws 2.5 kW.", 3, page_label="7"
        ),
        Block("heading", "Long " * 50, 3, level=1, page_label="7"),
    ]


def serialise() -> list[dict[str, Any]]:
    """Every field of every chunk, as JSON-ready values."""
    blocks = mixed_blocks()
    document = LoadedDocument(sections=[], blocks=blocks, kind="html", content_type="text/html")
    config = ChunkerConfig(
        chunk_tokens=60, window_tokens=64, overlap_tokens=16, small_table_rows=3, footnote_tokens=12
    )
    result = chunk_document(
        document,
        title="Pump manual",
        document_key="golden-doc",
        counter=SimpleTokenCounter(),
        config=config,
        language="en",
        repeated=frozenset({block_fingerprint(blocks[8])}),
    )
    out = []
    for c in result.chunks:
        item: dict[str, Any] = {"ordinal": c.ordinal, "id": c.id}
        item.update({name: getattr(c.place, name) for name in PLACE})
        item.update(
            content=c.content,
            embed_text=c.embed_text,
            search_text=c.search_text,
            tokens=c.tokens,
            whole_table=c.whole_table,
            entities=[[e.kind, e.raw, e.normalized, e.start, e.end, e.value, e.unit] for e in c.entities],
        )
        out.append(json.loads(json.dumps(item)))  # tuples as lists, as the file holds them
    stats = result.stats
    out.append({"stats": {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}})
    return out


def test_a_mixed_document_chunks_exactly_as_pinned() -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = serialise()
    assert len(got) == len(expected)
    for position, (chunk, pinned) in enumerate(zip(got, expected, strict=True)):
        assert chunk == pinned, position
