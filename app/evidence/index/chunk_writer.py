"""What every kind of V2 chunk shares: sizes in the model's tokens, the breadcrumb, ids, emitting.

`ChunkWriter` holds one document's chunking state (the open headings, the chunks so far, the
statistics) and turns content into a `ChunkRecord` (`emit`); prose packing (`prose.py`) and table
rows (`table_rows.py`) decide what the content is, and the walk (`chunker.py`) which of them runs.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.ingest.types import Block
from app.text.chunk_records import ChunkKind, ChunkPlace, ChunkRecord
from app.text.entities import Entity, EntityExtractor
from app.text.normalize import normalize
from app.text.tokens import TokenCounter, window_texts

# Namespace of V2 chunk ids (a fixed random uuid: ids are stable across releases).
CHUNK_ID_NAMESPACE = uuid.UUID("0f5b7f0e-4a43-4c55-9a1e-2a7d1c3e9b61")
BREADCRUMB_SEPARATOR = " › "


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


@dataclass(slots=True)
class Heading:
    """An open heading: its text and level, the block it came from, whether a chunk sits under it."""

    text: str
    level: int
    block: Block
    used: bool = False


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


class ChunkWriter:
    """One document's chunking state, and the sizes and records every kind of chunk shares."""

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
        self.headings: list[Heading] = []
        self.tables = 0
        self._counts: dict[str, int] = {}
        self._prefix: tuple[tuple[str, ...], str] | None = None

    # --- sizes -------------------------------------------------------------------------------
    def tokens(self, text: str) -> int:
        """The model's token count of `text` (special tokens not included)."""
        # breadcrumbs and the final embedded text are counted more than once: remember counts
        count = self._counts.get(text)
        if count is None:
            if len(self._counts) > 4096:
                self._counts.clear()
            count = self._counts[text] = self.counter.count(text)
        return count

    def fits(self, text: str) -> bool:
        """`text` with the special tokens fits one chunk."""
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

    def budget(self) -> int:
        """Tokens left for content after the breadcrumb, the newline and the special tokens."""
        prefix = self.prefix()
        used = self.tokens(prefix + "\n") if prefix else 0
        return max(self.limit - self.counter.special_tokens - used, 8)

    def cut(self, text: str, budget: int) -> list[str]:
        """`text` whole when it fits `budget`, else pieces cut on token boundaries."""
        if self.tokens(text) <= budget:
            return [text]
        return window_texts(text, self.counter, budget + self.counter.special_tokens)

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
        """Append one chunk of `content` under the open headings; `place` names its table fields."""
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
