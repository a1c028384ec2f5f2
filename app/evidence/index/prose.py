"""Prose packing for the V2 chunker: the blocks of one section on one page become chunks.

    pack(writer, segment, kinds)

A block is cut into units (sentences, a list item's or a definition's sentences, code lines); units
are packed up to the writer's budget. The overlap repeats whole trailing units of the previous chunk
and never a fragment of a list item or definition entry; a chunk starts inside an entry only when the
entry alone is longer than a chunk, and then repeats the definition's term.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.evidence.index.chunk_writer import ChunkWriter
from app.ingest.types import Block

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SPACES = re.compile(r"\s+")
# block kinds whose entries are repeated whole or not at all
_ENTRIES = ("list_item", "definition")


@dataclass(slots=True)
class Unit:
    """An atomic piece of prose: a sentence, a list item, a definition sentence, a code line run."""

    text: str
    tokens: int
    block: int  # index of the block it came from
    first: bool  # the first unit of its block (a chunk may start here)
    joiner: str  # what joins it to the previous unit of the same block
    term: str | None = None  # the definition's term, repeated when a chunk starts mid-entry


def units_of(writer: ChunkWriter, index: int, block: Block, budget: int) -> list[Unit]:
    """The units of one block, each cut to fit `budget`."""
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
    units: list[Unit] = []
    for position, piece in enumerate(pieces):
        text = (lead + piece) if position == 0 else piece
        if block.kind == "code" and not text.strip() and position == 0:
            continue
        for part in writer.cut(text, budget - (writer.tokens(f"{term}: ") if term else 0)):
            units.append(
                Unit(
                    text=part,
                    tokens=writer.tokens(part),
                    block=index,
                    first=not units,
                    joiner=joiner,
                    term=term,
                )
            )
    return [u for u in units if u.text.strip()]


def render(units: Sequence[Unit]) -> str:
    """The chunk text of consecutive units."""
    parts: list[str] = []
    for position, unit in enumerate(units):
        if position:
            parts.append(unit.joiner if unit.block == units[position - 1].block else "\n")
        elif not unit.first and unit.term:
            parts.append(f"{unit.term}: ")  # a chunk that starts inside a definition names its term
        parts.append(unit.text)
    return "".join(parts)


def pack(writer: ChunkWriter, segment: list[tuple[int, Block]], kinds: Mapping[int, str]) -> None:
    """Pack the blocks of one section on one page into chunks, with whole-unit overlap.

    `segment` holds (index, block) pairs; `kinds` gives the kind of the block at each index.
    """
    if not segment:
        return
    budget = writer.budget()
    block = segment[0][1]
    units = [unit for index, blk in segment for unit in units_of(writer, index, blk, budget)]
    if not units:
        return
    current: list[Unit] = []

    def cost(chunk: list[Unit]) -> int:
        lead = writer.tokens(f"{chunk[0].term}: ") if chunk and not chunk[0].first and chunk[0].term else 0
        return lead + sum(u.tokens for u in chunk)

    for unit in units:
        if not current or cost([*current, unit]) <= budget:
            current.append(unit)
            continue
        # the chunk is full in the middle of a list item or definition: when the entry's start
        # fits the next chunk, the whole entry moves there, so no chunk starts inside it
        carry: list[Unit] = []
        if not unit.first and kinds.get(unit.block, "paragraph") in _ENTRIES:
            carry = [u for u in current if u.block == unit.block]
            if len(carry) == len(current) or not carry[0].first or cost([*carry, unit]) > budget:
                carry = []
        done = current[: len(current) - len(carry)]
        flush(writer, done, block)
        taken = [] if carry else overlap(writer, done, unit, budget, cost, kinds)
        current = [*taken, *carry, unit]
    flush(writer, current, block)


def overlap(
    writer: ChunkWriter,
    previous: list[Unit],
    following: Unit,
    budget: int,
    cost: Callable[[list[Unit]], int],
    kinds: Mapping[int, str],
) -> list[Unit]:
    """Trailing units of the previous chunk to repeat: whole, and never a fragment of an entry."""
    limit = writer.config.overlap_tokens
    taken: list[Unit] = []
    for unit in reversed(previous):
        candidate = [unit, *taken]
        if sum(u.tokens for u in candidate) > limit or cost([*candidate, following]) > budget:
            break
        taken = candidate
    # a list item or definition is repeated whole or not at all
    while taken and not taken[0].first and kinds.get(taken[0].block, "paragraph") in _ENTRIES:
        taken = taken[1:]
    return taken


def flush(writer: ChunkWriter, units: list[Unit], block: Block) -> None:
    """Emit `units` as one chunk, or as several when the exact count says they do not fit."""
    pending = list(units)
    while pending:
        take = len(pending)
        # token counts of parts add up for word-piece tokenizers; the exact count decides
        while take > 1 and not writer.fits(f"{writer.prefix()}\n{render(pending[:take])}"):
            take -= 1
        content = render(pending[:take])
        if take == 1 and not writer.fits(f"{writer.prefix()}\n{content}"):
            # a tokenizer whose counts do not add up across a join: cut this one unit again
            for piece in writer.cut(content, writer.budget() - 2):
                writer.emit(kind="prose", block=block, content=piece)
        else:
            writer.emit(kind="prose", block=block, content=content)
        pending = pending[take:]
