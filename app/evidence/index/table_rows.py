"""Tables for the V2 chunker: every data row one `table_row` chunk, small tables also whole.

    emit_table(writer, block, caption)

A row chunk holds the caption, one "header: cell" line per non-empty cell and the table's notes
when they are short; a cell under a header that names a unit ("Length (mm)") becomes a quantity
entity. A row too long for one chunk continues in further chunks that repeat the caption, the
row's label line and the notes; a cell too long for one is cut on token boundaries. Long notes
become chunks of their own.
"""

from __future__ import annotations

import re
from typing import Any

from app.evidence.index.chunk_writer import ChunkWriter
from app.ingest.types import Block
from app.text.entities import Entity, format_number, parse_number, split_header_unit

_SPACES = re.compile(r"\s+")
# (line, the unit of its cell or None, the cell): "Length (mm): 12"
Line = tuple[str, str | None, str]


def emit_table(writer: ChunkWriter, block: Block, caption: str | None) -> None:
    """The chunks of one table block; `caption` when a paragraph before it gave one."""
    index = writer.tables
    writer.tables += 1
    writer.stats.tables += 1
    caption = caption or (block.title.strip() if block.title and block.title.strip() else None)
    raw_headers = [_SPACES.sub(" ", h).strip() for h in (block.headers or [])]
    split = [split_header_unit(h, writer.extractor) for h in raw_headers]
    units = [unit for _, unit in split]
    footnotes = tuple(_SPACES.sub(" ", f).strip() for f in block.footnotes if f.strip())
    notes = "Notes: " + " ".join(footnotes) if footnotes else ""
    notes_inline = bool(notes) and writer.tokens(notes) <= writer.config.footnote_tokens
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
        for piece in writer.cut(text, writer.budget()) if text else []:
            writer.emit(kind="prose", block=block, content=piece, **common)
        return
    if rows and len(rows) <= writer.config.small_table_rows:
        lines = [caption] if caption else []
        if raw_headers:
            lines.append(" | ".join(raw_headers))
        lines.extend(" | ".join(row) for row in rows)
        if notes:
            lines.append(notes)
        whole = "\n".join(lines)
        if writer.fits(f"{writer.prefix()}\n{whole}"):
            writer.emit(kind="prose", block=block, content=whole, whole_table=True, **common)
    if not rows:  # a header row alone: index it as the table's one line of text
        line = " | ".join(raw_headers)
        writer.emit(kind="prose", block=block, content=f"{caption}\n{line}" if caption else line, **common)
    for row_index, row in enumerate(rows):
        row_notes = notes if notes_inline else ""
        emit_row(writer, block, row_index, row, raw_headers, units, caption, row_notes, common)
    if notes and not notes_inline:
        for piece in writer.cut(notes, writer.budget()):
            writer.emit(kind="prose", block=block, content=piece, **common)


def emit_row(
    writer: ChunkWriter,
    block: Block,
    row_index: int,
    row: list[str],
    headers: list[str],
    units: list[str | None],
    caption: str | None,
    notes: str,
    common: dict[str, Any],
) -> None:
    """The chunk (or chunks, when it is long) of one data row."""
    label = next((cell for cell in row if cell), None)
    head = [caption] if caption else []
    tail = [notes] if notes else []
    lines: list[Line] = []
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
    reserved = writer.tokens(label_line) if label_line else 0
    room = max(writer.budget() - sum(writer.tokens(x) for x in head + tail) - reserved, 8)
    for number, group in enumerate(g for g in _groups(writer, lines, room) if g):
        lead = [*head, label_line] if number and label_line and group[0][0] != label_line else head
        body = [*lead, *(line for line, _, _ in group), *tail]
        entities: list[Entity] = []
        offset = sum(len(x) + 1 for x in lead)
        for line, unit, cell in group:
            if unit is not None:
                entity = cell_quantity(writer, cell, unit, offset + len(line) - len(cell))
                if entity is not None:
                    entities.append(entity)
            offset += len(line) + 1
        writer.emit(
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


def _groups(writer: ChunkWriter, lines: list[Line], room: int) -> list[list[Line]]:
    """The row's lines in groups of at most `room` tokens, a line longer than that cut alone."""
    # a row too long for one chunk continues in further chunks that repeat caption and notes;
    # a single cell too long for one is cut on token boundaries (nothing is dropped)
    groups: list[list[Line]] = [[]]
    used = 0
    for line, unit, cell in lines:
        size = writer.tokens(line)
        if size > room:
            for piece in writer.cut(line, room):
                groups.append([(piece, None, "")])
            groups.append([])
            used = 0
            continue
        if groups[-1] and used + size > room:
            groups.append([])
            used = 0
        groups[-1].append((line, unit, cell))
        used += size
    return groups


def cell_quantity(writer: ChunkWriter, cell: str, unit: str, start: int) -> Entity | None:
    """The quantity a cell holds when its header names the unit ("12" under "Length (mm)")."""
    match = re.fullmatch(r"\s*([-−+]?\d+(?:[.,]\d+)*)\s*", cell)
    if not match:
        return None
    value = parse_number(match.group(1), writer.language)
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
