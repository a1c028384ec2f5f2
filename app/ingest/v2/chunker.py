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
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.ingest.types import Block, LoadedDocument
from app.ingest.v2.boilerplate import block_fingerprint
from app.text.chunks import ChunkKind, ChunkPlace, ChunkRecord
from app.text.entities import Entity, EntityExtractor, default_extractor, format_number, parse_number
from app.text.normalize import normalize
from app.text.tokens import TokenCounter, window_texts

# Namespace of V2 chunk ids (a fixed random uuid: ids are stable across releases).
CHUNK_ID_NAMESPACE = uuid.UUID("0f5b7f0e-4a43-4c55-9a1e-2a7d1c3e9b61")
BREADCRUMB_SEPARATOR = " › "
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SPACES = re.compile(r"\s+")
_HEADER_UNIT = (
    r"^(?P<label>.*?)\s*\((?P<unit>[^()]{1,12})\)$",
    r"^(?P<label>.*?)\s*\[(?P<unit>[^\[\]]{1,12})\]$",
)


class ChunkerConfig(BaseModel):
    """Sizes and rules of V2 chunking (tokens are the embedding model's own)."""

    model_config = ConfigDict(frozen=True)

    # the model's input window, special tokens included; no embedded text is longer
    window_tokens: int = Field(256, ge=16)
    # target size of a prose chunk's embedded text (breadcrumb included); at most the window
    chunk_tokens: int = Field(256, ge=16)
    overlap_tokens: int = Field(32, ge=0)
    # tables with at most this many data rows are also kept whole when they fit one chunk
    small_table_rows: int = Field(6, ge=0)
    # footnotes longer than this become one chunk of their own instead of joining every row
    footnote_tokens: int = Field(64, ge=0)
    # a "heading" longer than this is a misdetected paragraph and is indexed as one
    max_heading_chars: int = Field(200, ge=10)
    # the breadcrumb takes at most this share of a chunk; longer headings are shortened in it only
    breadcrumb_share: float = Field(0.4, gt=0.0, lt=1.0)
    caption_pattern: str = r"^(?:table|tab\.|tabelle)\s*[\w.\-]*\s*[:.\-–—]?\s"


@dataclass(slots=True)
class ChunkingStats:
    """What chunking kept and dropped, for the index run's report."""

    blocks: int = 0
    boilerplate_blocks: int = 0
    boilerplate_chars: int = 0
    kept_chars: int = 0
    chunks: int = 0
    table_rows: int = 0
    tables: int = 0
    max_tokens: int = 0
    over_window: int = 0
    boilerplate_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    """The chunks of one document and the statistics of the run that made them."""

    chunks: list[ChunkRecord]
    stats: ChunkingStats


@dataclass(slots=True)
class _Unit:
    """An atomic piece of prose: a sentence, a list item, a definition sentence, a code line run."""

    text: str
    tokens: int
    block: int  # index of the block it came from
    first: bool  # the first unit of its block (a chunk may start here)
    joiner: str  # what joins it to the previous unit of the same block
    term: str | None = None  # the definition's term, repeated when a chunk starts mid-entry


@dataclass(slots=True)
class _Heading:
    text: str
    level: int
    block: Block
    used: bool = False


def split_header_unit(header: str, extractor: EntityExtractor) -> tuple[str, str | None]:
    """("Length", "mm") for "Length (mm)", "Length [mm]" or "Length in mm"; (header, None) otherwise."""
    text = header.strip()
    for pattern in _HEADER_UNIT:
        match = re.match(pattern, text)
        if match:
            unit = extractor.unit_of(match.group("unit"))
            if unit is not None:
                return match.group("label").strip() or text, unit
    match = re.match(r"^(?P<label>.+?),?\s+(?:in|en)\s+(?P<unit>\S{1,12})$", text)
    if match:
        unit = extractor.unit_of(match.group("unit"))
        if unit is not None:
            return match.group("label").strip(), unit
    return text, None


def chunk_id(document_key: str, ordinal: int, kind: str, location: Sequence[object], content: str) -> str:
    """uuid5 of the document key, position, location and a sha256 of the content."""
    digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
    where = json.dumps(list(location), ensure_ascii=True)
    name = "\x1f".join([document_key, str(ordinal), kind, where, digest])
    return str(uuid.uuid5(CHUNK_ID_NAMESPACE, name))


def breadcrumb(title: str, section: Sequence[str], max_chars: int | None = None) -> str:
    """ "Title › Section › Subsection"; each part shortened to `max_chars` when given."""
    parts = [part for part in (title, *section) if part]
    if max_chars is not None:
        parts = [part if len(part) <= max_chars else part[: max_chars - 1].rstrip() + "…" for part in parts]
    return BREADCRUMB_SEPARATOR.join(parts)


class _Chunker:
    def __init__(
        self,
        *,
        title: str,
        document_key: str,
        counter: TokenCounter,
        config: ChunkerConfig,
        extractor: EntityExtractor,
        language: str | None,
    ) -> None:
        self.title = title
        self.key = document_key
        self.counter = counter
        self.config = config
        self.extractor = extractor
        self.language = language
        self.limit = min(config.chunk_tokens, config.window_tokens)
        self.chunks: list[ChunkRecord] = []
        self.stats = ChunkingStats()
        self.headings: list[_Heading] = []
        self.tables = 0
        self._caption = re.compile(config.caption_pattern, re.IGNORECASE)
        self._counts: dict[str, int] = {}
        self._kinds: dict[int, str] = {}
        self._prefix: tuple[tuple[str, ...], str] | None = None

    # --- sizes -------------------------------------------------------------------------------
    def tokens(self, text: str) -> int:
        # breadcrumbs and the final embedded text are counted more than once: remember counts
        count = self._counts.get(text)
        if count is None:
            if len(self._counts) > 4096:
                self._counts.clear()
            count = self._counts[text] = self.counter.count(text)
        return count

    def fits(self, text: str) -> bool:
        return self.tokens(text) + self.counter.special_tokens <= self.limit

    def prefix(self) -> str:
        """The breadcrumb of the current section, shortened until it takes at most its share."""
        section = [h.text for h in self.headings]
        if self._prefix is not None and self._prefix[0] == tuple(section):
            return self._prefix[1]
        allowed = int(self.limit * self.config.breadcrumb_share)
        text = breadcrumb(self.title, section)
        max_chars = 120
        while self.tokens(text) > allowed and max_chars > 8:
            text = breadcrumb(self.title, section, max_chars)
            max_chars //= 2
        self._prefix = (tuple(section), text)
        return text

    # --- emitting ------------------------------------------------------------------------------
    def emit(
        self,
        *,
        kind: ChunkKind,
        block: Block,
        content: str,
        extra_entities: Sequence[Entity] = (),
        extra_search: str = "",
        whole_table: bool = False,
        **place: Any,
    ) -> None:
        prefix = self.prefix()
        embed_text = f"{prefix}\n{content}" if prefix else content
        tokens = self.tokens(embed_text) + self.counter.special_tokens
        section = tuple(h.text for h in self.headings)
        for heading in self.headings:
            heading.used = True
        page = None if block.page is None else block.page + 1
        ordinal = len(self.chunks)
        location = [page, list(section), place.get("table_index"), place.get("row_index")]
        entities = list(self.extractor.extract(content, self.language))
        entities.extend(extra_entities)
        entities.sort(key=lambda e: (e.start, e.end))
        record = ChunkRecord(
            ordinal=ordinal,
            id=chunk_id(self.key, ordinal, kind, location, embed_text),
            place=ChunkPlace(kind=kind, page=page, page_label=block.page_label, section=section, **place),
            content=content,
            embed_text=embed_text,
            search_text=normalize(f"{embed_text}\n{extra_search}"),
            tokens=tokens,
            entities=tuple(entities),
            whole_table=whole_table,
        )
        self.chunks.append(record)
        self.stats.chunks += 1
        self.stats.max_tokens = max(self.stats.max_tokens, tokens)
        if tokens > self.config.window_tokens:
            self.stats.over_window += 1
        if kind == "table_row":
            self.stats.table_rows += 1

    def budget(self) -> int:
        """Tokens left for content after the breadcrumb, the newline and the special tokens."""
        prefix = self.prefix()
        used = self.tokens(prefix + "\n") if prefix else 0
        return max(self.limit - self.counter.special_tokens - used, 8)

    # --- prose ---------------------------------------------------------------------------------
    def units_of(self, index: int, block: Block, budget: int) -> list[_Unit]:
        if block.kind == "code":
            pieces = [line for line in block.text.split("\n")]
            joiner = "\n"
            lead = ""
        else:
            flat = _SPACES.sub(" ", block.text).strip()
            pieces = _SENTENCE_END.split(flat) if flat else []
            joiner = " "
            lead = "- " if block.kind == "list_item" else ""
        term = _SPACES.sub(" ", block.term).strip() if block.kind == "definition" and block.term else None
        if term:
            lead = f"{term}: "
            if not pieces:
                pieces = [""]
        units: list[_Unit] = []
        for position, piece in enumerate(pieces):
            text = (lead + piece) if position == 0 else piece
            if block.kind == "code" and not text.strip() and position == 0:
                continue
            for part in self.cut(text, budget - (self.tokens(f"{term}: ") if term else 0)):
                units.append(
                    _Unit(
                        text=part,
                        tokens=self.tokens(part),
                        block=index,
                        first=not units,
                        joiner=joiner,
                        term=term,
                    )
                )
        return [u for u in units if u.text.strip()]

    def cut(self, text: str, budget: int) -> list[str]:
        """`text` whole when it fits `budget`, else pieces cut on token boundaries."""
        if self.tokens(text) <= budget:
            return [text]
        return window_texts(text, self.counter, budget + self.counter.special_tokens)

    @staticmethod
    def render(units: Sequence[_Unit]) -> str:
        parts: list[str] = []
        for position, unit in enumerate(units):
            if position:
                parts.append(unit.joiner if unit.block == units[position - 1].block else "\n")
            elif not unit.first and unit.term:
                parts.append(f"{unit.term}: ")  # a chunk that starts inside a definition names its term
            parts.append(unit.text)
        return "".join(parts)

    def pack(self, segment: list[tuple[int, Block]]) -> None:
        """Pack the blocks of one section on one page into chunks, with whole-unit overlap."""
        if not segment:
            return
        budget = self.budget()
        block = segment[0][1]
        units = [unit for index, blk in segment for unit in self.units_of(index, blk, budget)]
        if not units:
            return
        current: list[_Unit] = []

        def cost(chunk: list[_Unit]) -> int:
            lead = self.tokens(f"{chunk[0].term}: ") if chunk and not chunk[0].first and chunk[0].term else 0
            return lead + sum(u.tokens for u in chunk)

        for unit in units:
            if not current or cost([*current, unit]) <= budget:
                current.append(unit)
                continue
            # the chunk is full in the middle of a list item or definition: when the entry's start
            # fits the next chunk, the whole entry moves there, so no chunk starts inside it
            carry: list[_Unit] = []
            if not unit.first and self.kind_of(unit) in ("list_item", "definition"):
                carry = [u for u in current if u.block == unit.block]
                if len(carry) == len(current) or not carry[0].first or cost([*carry, unit]) > budget:
                    carry = []
            done = current[: len(current) - len(carry)]
            self.flush_units(done, block)
            overlap = [] if carry else self.overlap(done, unit, budget, cost)
            current = [*overlap, *carry, unit]
        self.flush_units(current, block)

    def overlap(
        self, previous: list[_Unit], following: _Unit, budget: int, cost: Callable[[list[_Unit]], int]
    ) -> list[_Unit]:
        """Trailing units of the previous chunk to repeat: whole, and never a fragment of an entry."""
        limit = self.config.overlap_tokens
        taken: list[_Unit] = []
        for unit in reversed(previous):
            candidate = [unit, *taken]
            if sum(u.tokens for u in candidate) > limit or cost([*candidate, following]) > budget:
                break
            taken = candidate
        # a list item or definition is repeated whole or not at all
        while taken and not taken[0].first and self.kind_of(taken[0]) in ("list_item", "definition"):
            taken = taken[1:]
        return taken

    def kind_of(self, unit: _Unit) -> str:
        return self._kinds.get(unit.block, "paragraph")

    def flush_units(self, units: list[_Unit], block: Block) -> None:
        pending = list(units)
        while pending:
            take = len(pending)
            # token counts of parts add up for word-piece tokenizers; the exact count decides
            while take > 1 and not self.fits(f"{self.prefix()}\n{self.render(pending[:take])}"):
                take -= 1
            content = self.render(pending[:take])
            if take == 1 and not self.fits(f"{self.prefix()}\n{content}"):
                # a tokenizer whose counts do not add up across a join: cut this one unit again
                for piece in self.cut(content, self.budget() - 2):
                    self.emit(kind="prose", block=block, content=piece)
            else:
                self.emit(kind="prose", block=block, content=content)
            pending = pending[take:]

    # --- tables --------------------------------------------------------------------------------
    def table(self, block: Block, caption: str | None) -> None:
        index = self.tables
        self.tables += 1
        self.stats.tables += 1
        caption = caption or (block.title.strip() if block.title and block.title.strip() else None)
        raw_headers = [_SPACES.sub(" ", h).strip() for h in (block.headers or [])]
        split = [split_header_unit(h, self.extractor) for h in raw_headers]
        units = [unit for _, unit in split]
        footnotes = tuple(_SPACES.sub(" ", f).strip() for f in block.footnotes if f.strip())
        notes = "Notes: " + " ".join(footnotes) if footnotes else ""
        notes_inline = bool(notes) and self.tokens(notes) <= self.config.footnote_tokens
        rows = [[_SPACES.sub(" ", cell).strip() for cell in row] for row in (block.rows or [])]
        rows = [row for row in rows if any(row)]
        common: dict[str, Any] = {
            "table_caption": caption,
            "table_index": index,
            "headers": tuple(raw_headers),
            "units": tuple(units),
            "footnotes": footnotes,
        }
        if not rows and not raw_headers:
            # a loader that gave the table as text only: index that text, with the caption
            text = "\n".join(filter(None, [caption, block.text.strip()]))
            for piece in self.cut(text, self.budget()) if text else []:
                self.emit(kind="prose", block=block, content=piece, **common)
            return
        if rows and len(rows) <= self.config.small_table_rows:
            lines = [caption] if caption else []
            if raw_headers:
                lines.append(" | ".join(raw_headers))
            lines.extend(" | ".join(row) for row in rows)
            if notes:
                lines.append(notes)
            whole = "\n".join(lines)
            if self.fits(f"{self.prefix()}\n{whole}"):
                self.emit(kind="prose", block=block, content=whole, whole_table=True, **common)
        if not rows:  # a header row alone: index it as the table's one line of text
            line = " | ".join(raw_headers)
            self.emit(kind="prose", block=block, content=f"{caption}\n{line}" if caption else line, **common)
        for row_index, row in enumerate(rows):
            row_notes = notes if notes_inline else ""
            self.row(block, row_index, row, raw_headers, units, caption, row_notes, common)
        if notes and not notes_inline:
            for piece in self.cut(notes, self.budget()):
                self.emit(kind="prose", block=block, content=piece, **common)

    def row(
        self,
        block: Block,
        row_index: int,
        row: list[str],
        headers: list[str],
        units: list[str | None],
        caption: str | None,
        notes: str,
        common: dict[str, Any],
    ) -> None:
        label = next((cell for cell in row if cell), None)
        head = [caption] if caption else []
        tail = [notes] if notes else []
        # (line, unit of its cell or None, the cell) per non-empty cell: "Length (mm): 12"
        lines: list[tuple[str, str | None, str]] = []
        if headers:
            for column, cell in enumerate(row):
                if not cell:
                    continue
                name = headers[column] if column < len(headers) else ""
                name = name or f"Column {column + 1}"
                unit = units[column] if column < len(units) else None
                lines.append((f"{name}: {cell}", unit, cell))
        else:
            lines.append((" | ".join(row), None, ""))
        # continuation chunks of a long row repeat its first line (the row label) after the caption
        label_line = lines[0][0] if headers and lines else ""
        reserved = self.tokens(label_line) if label_line else 0
        room = max(self.budget() - sum(self.tokens(x) for x in head + tail) - reserved, 8)
        # a row too long for one chunk continues in further chunks that repeat caption and notes;
        # a single cell too long for one is cut on token boundaries (nothing is dropped)
        groups: list[list[tuple[str, str | None, str]]] = [[]]
        used = 0
        for line, unit, cell in lines:
            size = self.tokens(line)
            if size > room:
                for piece in self.cut(line, room):
                    groups.append([(piece, None, "")])
                groups.append([])
                used = 0
                continue
            if groups[-1] and used + size > room:
                groups.append([])
                used = 0
            groups[-1].append((line, unit, cell))
            used += size
        for number, group in enumerate(g for g in groups if g):
            lead = [*head, label_line] if number and label_line and group[0][0] != label_line else head
            body = [*lead, *(line for line, _, _ in group), *tail]
            entities: list[Entity] = []
            offset = sum(len(x) + 1 for x in lead)
            for line, unit, cell in group:
                if unit is not None:
                    entity = self.cell_quantity(cell, unit, offset + len(line) - len(cell))
                    if entity is not None:
                        entities.append(entity)
                offset += len(line) + 1
            self.emit(
                kind="table_row",
                block=block,
                content="\n".join(body),
                extra_entities=entities,
                extra_search=" ".join(e.raw for e in entities),
                row_index=row_index,
                row_label=label,
                row_values=tuple(row),
                **common,
            )

    def cell_quantity(self, cell: str, unit: str, start: int) -> Entity | None:
        """The quantity a cell holds when its header names the unit ("12" under "Length (mm)")."""
        match = re.fullmatch(r"\s*([-−+]?\d+(?:[.,]\d+)*)\s*", cell)
        if not match:
            return None
        value = parse_number(match.group(1), self.language)
        if value is None:
            return None
        return Entity(
            "quantity",
            f"{match.group(1)} {unit}",
            f"{format_number(value)} {unit}",
            start,
            start + len(cell),
            value=value,
            unit=unit,
        )

    # --- the walk ------------------------------------------------------------------------------
    def run(self, blocks: Sequence[Block], repeated: frozenset[str]) -> None:
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
        self._kinds = {index: block.kind for index, block in enumerate(kept)}

        segment: list[tuple[int, Block]] = []
        position = 0
        while position < len(kept):
            block = kept[position]
            if block.kind == "heading":
                self.pack(segment)
                segment = []
                self.open_heading(block)
            elif block.kind == "table":
                self.pack(segment)
                segment = []
                self.table(block, None)
            elif (
                block.kind == "paragraph"
                and position + 1 < len(kept)
                and kept[position + 1].kind == "table"
                and not (kept[position + 1].title or "").strip()
                and self._caption.match(block.text.strip())
                and len(block.text) <= self.config.max_heading_chars
            ):
                # "Table 3: Dimensions" right before an untitled table is that table's caption
                self.pack(segment)
                segment = []
                self.table(kept[position + 1], _SPACES.sub(" ", block.text).strip())
                position += 1
            else:
                if segment and (segment[-1][1].page != block.page):
                    self.pack(segment)
                    segment = []
                segment.append((position, block))
            position += 1
        self.pack(segment)
        while self.headings:
            self.close_heading()

    def open_heading(self, block: Block) -> None:
        level = max(block.level or 1, 1)
        while self.headings and self.headings[-1].level >= level:
            self.close_heading()
        self.headings.append(_Heading(_SPACES.sub(" ", block.text).strip(), level, block))

    def close_heading(self) -> None:
        heading = self.headings[-1]
        if not heading.used:
            # a heading with no text under it: index its words as a chunk of their own
            self.emit(kind="prose", block=heading.block, content=heading.text)
        self.headings.pop()


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
    chunker = _Chunker(
        title=_SPACES.sub(" ", title).strip(),
        document_key=document_key,
        counter=counter,
        config=config,
        extractor=extractor or default_extractor(),
        language=language,
    )
    chunker.run(document.blocks, repeated)
    return ChunkedDocument(chunks=chunker.chunks, stats=chunker.stats)
