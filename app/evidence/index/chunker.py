"""Structure-aware chunking of a loaded document for the V2 index.

    chunk_document(doc, title=..., document_key=..., counter=...) -> ChunkedDocument

- Prose is packed inside one section and one page; the overlap (whole sentences, list items or
  definition entries taken from the end of the previous chunk) never crosses a heading or a page.
  A chunk starts inside a definition entry or list item only when that entry alone is longer than a
  chunk; a definition's later pieces repeat its term.
- Every embedded text starts with the breadcrumb "Title › Section › Subsection"; `section` keeps the
  headings as data.
- Every table row is one `table_row` chunk: caption, "header: cell" lines, footnotes; the unit a
  header names ("Length (mm)") is attached to its cells. A caption is never separated from its
  table (a "Table 3: ..." paragraph right before an untitled table becomes its caption). A small
  table is also kept whole, as one prose chunk carrying the table's fields.
- Every embedded text fits the model: sizes are counted with its tokenizer (`TokenCounter`), a unit
  too long for a chunk is cut on token boundaries, and nothing is dropped.
- Boilerplate (marked by the loaders, or repeated across documents) never reaches a chunk.
- Ids are uuid5 of the document key, ordinal, kind, location and a hash of the content: the same
  bytes (and extractor) give the same ids. Pages are 1-based here (V2's convention).

This module walks the blocks (boilerplate out, headings opened and closed, prose segments and
tables handed on); `prose.py` packs prose, `table_rows.py` makes the table chunks, and
`chunk_writer.py` holds what they share (sizes, breadcrumb, ids, the record of one chunk).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.evidence.index.boilerplate import block_fingerprint
from app.evidence.index.chunk_writer import ChunkerConfig, ChunkingStats, ChunkWriter, Heading
from app.evidence.index.prose import pack
from app.evidence.index.table_rows import emit_table
from app.ingest.types import Block, LoadedDocument
from app.text.chunk_records import ChunkRecord
from app.text.entities import EntityExtractor, default_extractor
from app.text.tokens import TokenCounter

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    """The chunks of one document and the statistics of the run that made them."""

    chunks: list[ChunkRecord]
    stats: ChunkingStats


class _Walk:
    """The blocks in reading order: boilerplate out, headings opened and closed, content handed on."""

    def __init__(self, writer: ChunkWriter) -> None:
        self.writer = writer
        self.config = writer.config
        self.stats = writer.stats
        self._caption = re.compile(writer.config.caption_pattern, re.IGNORECASE)
        self._kinds: dict[int, str] = {}

    def keep(self, blocks: Sequence[Block], repeated: frozenset[str]) -> list[Block]:
        """The blocks that are content (boilerplate counted and left out), misdetected headings as text."""
        kept: list[Block] = []
        for block in blocks:
            self.stats.blocks += 1
            mark = block.boilerplate
            if mark is None and repeated and block.kind != "heading" and block_fingerprint(block) in repeated:
                mark = "repeated"
            if mark is not None:
                self.stats.boilerplate_blocks += 1
                self.stats.boilerplate_chars += len(block.text) + len(block.term or "")
                self.stats.boilerplate_by_kind[mark] = self.stats.boilerplate_by_kind.get(mark, 0) + 1
                continue
            self.stats.kept_chars += len(block.text) + len(block.term or "")
            if block.kind == "heading" and len(block.text) > self.config.max_heading_chars:
                block = Block(kind="paragraph", text=block.text, page=block.page, page_label=block.page_label)
            kept.append(block)
        return kept

    def run(self, blocks: Sequence[Block], repeated: frozenset[str]) -> None:
        """Chunk the blocks into the writer."""
        kept = self.keep(blocks, repeated)
        self._kinds = {index: block.kind for index, block in enumerate(kept)}
        segment: list[tuple[int, Block]] = []
        position = 0
        while position < len(kept):
            block = kept[position]
            if block.kind == "heading":
                pack(self.writer, segment, self._kinds)
                segment = []
                self.open_heading(block)
            elif block.kind == "table":
                pack(self.writer, segment, self._kinds)
                segment = []
                emit_table(self.writer, block, None)
            elif (
                block.kind == "paragraph"
                and position + 1 < len(kept)
                and kept[position + 1].kind == "table"
                and not (kept[position + 1].title or "").strip()
                and self._caption.match(block.text.strip())
                and len(block.text) <= self.config.max_heading_chars
            ):
                # "Table 3: Dimensions" right before an untitled table is that table's caption
                pack(self.writer, segment, self._kinds)
                segment = []
                emit_table(self.writer, kept[position + 1], _SPACES.sub(" ", block.text).strip())
                position += 1
            else:
                if segment and (segment[-1][1].page != block.page):
                    pack(self.writer, segment, self._kinds)
                    segment = []
                segment.append((position, block))
            position += 1
        pack(self.writer, segment, self._kinds)
        while self.writer.headings:
            self.close_heading()

    def open_heading(self, block: Block) -> None:
        """Close the headings at this level or deeper, then open this one."""
        level = max(block.level or 1, 1)
        headings = self.writer.headings
        while headings and headings[-1].level >= level:
            self.close_heading()
        headings.append(Heading(_SPACES.sub(" ", block.text).strip(), level, block))

    def close_heading(self) -> None:
        """Close the innermost heading; one with nothing under it becomes a chunk of its own."""
        heading = self.writer.headings[-1]
        if not heading.used:
            # a heading with no text under it: index its words as a chunk of their own
            self.writer.emit(kind="prose", block=heading.block, content=heading.text)
        self.writer.headings.pop()


def chunk_document(
    document: LoadedDocument,
    *,
    title: str,
    document_key: str,
    counter: TokenCounter,
    config: ChunkerConfig | None = None,
    extractor: EntityExtractor | None = None,
    language: str | None = None,
    repeated: frozenset[str] = frozenset(),
) -> ChunkedDocument:
    """Chunk one document's blocks for V2 (see the module docstring)."""
    config = config or ChunkerConfig()
    writer = ChunkWriter(
        title=_SPACES.sub(" ", title).strip(),
        document_key=document_key,
        counter=counter,
        config=config,
        extractor=extractor or default_extractor(),
        language=language,
    )
    _Walk(writer).run(document.blocks, repeated)
    return ChunkedDocument(chunks=writer.chunks, stats=writer.stats)
