"""The full-text "context" of one file (`GET /documents/{id}/context`), rebuilt from its chunks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# An overlap shorter than this is more likely a coincidence (a repeated word) than the splitter's.
MIN_OVERLAP_CHARS = 8


@dataclass(frozen=True)
class ContextChunk:
    """A chunk's text and its 0-based page (None outside paged formats)."""

    text: str
    page: int | None


def overlap_length(previous: str, current: str, max_overlap: int) -> int:
    """Length of the longest suffix of `previous` that is a prefix of `current` (≤ max_overlap)."""
    limit = min(len(previous), len(current), max_overlap)
    if limit < MIN_OVERLAP_CHARS:
        return 0
    # Every overlap long enough begins with `current`'s first MIN_OVERLAP_CHARS characters: test only
    # where those occur in `previous`'s last `limit` characters, the earliest (longest) first. Trying
    # every length took ~0.2 ms a pair, and evidence passages compare a dozen pairs per answer.
    probe = current[:MIN_OVERLAP_CHARS]
    end = len(previous)
    at = previous.find(probe, end - limit)
    while at >= 0:
        if current.startswith(previous[at:]):
            return end - at
        at = previous.find(probe, at + 1)
    return 0


def build_context(filename: str, chunks: Sequence[ContextChunk], *, max_overlap: int) -> str:
    """File name on the first line, then the text in chunk order with `# PAGE n` (1-based) headings.

    Chunk overlaps introduced by the splitter are removed so the model reads each passage once.
    **Decision**: pages print 1-based and the first page is labelled too (rag_api prints its
    0-based index and skips page 0).
    """
    parts: list[str] = [filename, "\n"]
    last_page: int | None = None
    previous = ""
    for chunk in chunks:
        text = chunk.text
        if chunk.page is not None and chunk.page != last_page:
            parts.append(f"\n# PAGE {chunk.page + 1}\n\n")
            last_page = chunk.page
            previous = ""
        elif previous:
            cut = overlap_length(previous, text, max_overlap)
            if cut:
                text = text[cut:]
            else:
                parts.append("\n")
        parts.append(text)
        previous = chunk.text
    return "".join(parts).strip()
