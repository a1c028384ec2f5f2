"""Blocks whose normalised text repeats across many documents of one namespace: a site's menu, a footer.

The loaders mark structural boilerplate (`<nav>`, header and footer bars, previous/next links, a
table of contents) in `Block.boilerplate`. This module finds the rest at index time, across
documents: a block is repeated when its fingerprint (sha256 of its normalised text) occurs in at
least `min_documents` documents and in at least `min_share` of the namespace's documents. Only
short blocks qualify (`max_tokens`): menus and footers are short, while a long paragraph repeated
in every manual of a product family is real content. Headings never qualify, because they carry
the section structure ("Parameters" heads a different table in every document).

The fingerprints of one document are computed alone (`document_fingerprints`) so the index can store
them per document and recount when documents come and go; `repeated_fingerprints` is the count.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from app.evidence.settings import BoilerplateSettings
from app.ingest.types import Block
from app.text.normalize import normalize


def block_fingerprint(block: Block) -> str | None:
    """sha256 hex of the block's normalised text (and term), or None when nothing is left."""
    text = normalize(f"{block.term or ''} {block.text}")
    if not text:
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def document_fingerprints(blocks: Sequence[Block], policy: BoilerplateSettings) -> frozenset[str]:
    """Fingerprints of the blocks of one document that could count as repeated boilerplate."""
    found: set[str] = set()
    for block in blocks:
        if block.boilerplate is not None or block.kind not in policy.kinds:
            continue
        if len(normalize(f"{block.term or ''} {block.text}").split()) > policy.max_tokens:
            continue
        fingerprint = block_fingerprint(block)
        if fingerprint is not None:
            found.add(fingerprint)
    return frozenset(found)


def repeated_fingerprints(
    per_document: Iterable[frozenset[str]], policy: BoilerplateSettings
) -> frozenset[str]:
    """Fingerprints present in enough documents to be boilerplate (see the module docstring)."""
    counts: Counter[str] = Counter()
    documents = 0
    for fingerprints in per_document:
        documents += 1
        counts.update(fingerprints)
    needed = max(policy.min_documents, math.ceil(policy.min_share * documents))
    return frozenset(fp for fp, seen in counts.items() if seen >= needed)
