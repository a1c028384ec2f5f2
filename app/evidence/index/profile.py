"""How this service builds V2 documents: the token counter, the window, the tuning, their version."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from app.clients.embeddings import model_identity
from app.clients.embeddings.local import local_model_counter
from app.config import Settings
from app.evidence.index.chunk_writer import ChunkerConfig
from app.evidence.settings import BoilerplateSettings
from app.ingest.contextual import SENTENCE_CHARS
from app.text.entities import EntityConfig, EntityExtractor
from app.text.stems import COMPOUNDS_MARKER, STEMS_MARKER
from app.text.tokens import TokenCounter

# Raise when chunking, entity extraction or the loaders change what an index holds: a new
# extractor version makes the next run parse and embed again instead of linking old documents.
# 2: umlauts written out, ß kept (app/text/normalize.py); 3: not released;
# 4: PDF headings from the outline or typography, running headers and navigation pages out, a
# table whose rules frame only some of its columns read as text
EXTRACTOR_RELEASE = "4"
# Room kept in every chunk for contextual chunking's sentence, so that the embedded text still fits
# the model's window: SENTENCE_CHARS characters are about 60-80 word pieces of English or German.
CONTEXT_RESERVE_TOKENS = 80


class CharCounter:
    """Characters as tokens: the conservative measure for HTTP providers, whose tokenizer we lack.

    A text of n characters is never more than n word pieces for WordPiece models, and a few scripts
    aside (some CJK characters and emoji take 2-3 byte-level BPE tokens) never more than n BPE tokens.
    """

    special_tokens = 0

    def count(self, text: str) -> int:
        """Characters of `text`."""
        return len(text)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """One span per character."""
        return [(i, i + 1) for i in range(len(text))]


@dataclass(frozen=True)
class IndexProfile:
    """How this service builds V2 documents: the counter, the window, the tuning, and their version."""

    counter: TokenCounter
    counter_name: str
    window: int  # the model's input window, in the counter's units (special tokens included)
    chunking: ChunkerConfig
    boilerplate: BoilerplateSettings
    extractor: EntityExtractor
    extractor_version: str
    embedding_model: str

    def describe(self) -> dict[str, Any]:
        """What a run records about how it was built."""
        return {
            "counter": self.counter_name,
            "window": self.window,
            "chunk_tokens": self.chunking.chunk_tokens,
            "overlap_tokens": self.chunking.overlap_tokens,
            "boilerplate_min_documents": self.boilerplate.min_documents,
            "boilerplate_min_share": self.boilerplate.min_share,
        }


def build_profile(
    settings: Settings, counter: TokenCounter | None = None, window: int | None = None
) -> IndexProfile:
    """The index profile of `settings`: the local model's tokenizer, or characters for HTTP providers."""
    index = settings.v2.index
    if counter is not None and window is not None:
        name = type(counter).__name__
        chunk_tokens = min(index.chunk_tokens, window)
        overlap = min(index.overlap_tokens, chunk_tokens // 2)
    elif settings.provider == "local":
        counter, window = local_model_counter()
        name = f"tokenizer:{settings.model}"
        chunk_tokens = min(index.chunk_tokens, window)
        overlap = min(index.overlap_tokens, chunk_tokens // 2)
    else:
        counter, window, name = CharCounter(), index.http_window_chars, "characters"
        # characters, not tokens: the chunk is as long as the window allows, overlaps an eighth
        chunk_tokens, overlap = window, window // 8
    if settings.contextual_chunking_enabled:
        # the situating sentence and its line break go in front of the embedded text
        reserve = SENTENCE_CHARS + 1 if isinstance(counter, CharCounter) else CONTEXT_RESERVE_TOKENS
        chunk_tokens = max(chunk_tokens - reserve, chunk_tokens // 2)
        overlap = min(overlap, chunk_tokens // 2)
    entities = EntityConfig()
    chunking = ChunkerConfig().model_copy(
        update={"window_tokens": window, "chunk_tokens": chunk_tokens, "overlap_tokens": overlap}
    )
    fingerprint = json.dumps(
        {
            "release": EXTRACTOR_RELEASE,
            "stems": index.stems,
            # only when on: a release that adds the setting does not reindex the runs without it
            **({"compounds": True} if index.compounds else {}),
            # a chunk's lexical keys follow its own language (else its document's)
            "postings_language": "chunk",
            "counter": name,
            "window": window,
            "chunking": chunking.model_dump(mode="json"),
            "entities": entities.model_dump(mode="json"),
            "boilerplate": index.boilerplate.model_dump(mode="json"),
        },
        sort_keys=True,
    )
    # the marker tells a query how the run's lexical channel holds its words (app/text/stems.py)
    marker = (STEMS_MARKER if index.stems else "") + (COMPOUNDS_MARKER if index.compounds else "")
    version = f"v2.{EXTRACTOR_RELEASE}{marker}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:12]}"
    return IndexProfile(
        counter=counter,
        counter_name=name,
        window=window,
        chunking=chunking,
        boilerplate=index.boilerplate,
        extractor=EntityExtractor(entities),
        extractor_version=version,
        embedding_model=model_identity(settings),
    )
