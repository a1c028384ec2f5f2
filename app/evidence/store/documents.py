"""Stored V2 documents: one parsed version of one file of one owner, with its chunks, entities and
postings, shared by every run that links it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

import asyncpg
import numpy as np

from app.evidence.store.calls import named_insert
from app.evidence.store.channels import label_key
from app.store.db import rows_affected
from app.text.chunk_records import ChunkRecord
from app.text.entities import language_of_tokens
from app.text.stems import posting_keys

DocumentSource = Literal["original", "derivative", "v1_chunks"]

# a stored term is at most this long (the lexical channel cuts query terms the same way, in SQL)
MAX_TERM_CHARS = 200
# chunks per COPY statement (with their entities and postings) when a document is written
COPY_BATCH_CHUNKS = 500


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk ready to store: the chunker's record and its vector, when it has one."""

    chunk: ChunkRecord
    embedding: np.ndarray | None = None

    @property
    def embed_digest(self) -> str:
        """sha256 of the embedded text: a vector is reusable for the same text and model."""
        return text_digest(self.chunk.embed_text)

    @property
    def terms(self) -> list[str]:
        """The tokens of `search_text` (the lexical channel stores their stem keys)."""
        return self.chunk.search_text.split()


@dataclass(frozen=True)
class DocumentRow:
    """One parsed version of one file of one owner."""

    file_id: str
    owner: str
    checksum: str
    extractor_version: str
    embedding_model: str
    source: DocumentSource
    filename: str
    title: str
    language: str | None = None
    document_number: str | None = None
    revision: str | None = None
    publication_date: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    fingerprints: frozenset[str] = frozenset()
    repeated_removed: frozenset[str] = frozenset()
    embedding_error: str | None = None
    # the sha256 of the stored original the catalogue named when this was made (None: no version)
    version_sha256: str | None = None


@dataclass(frozen=True)
class ReusableDocument:
    """A stored document that a new run may link instead of parsing and embedding again."""

    document_id: int
    fingerprints: frozenset[str]
    repeated_removed: frozenset[str]
    chunk_count: int
    vectors_missing: int
    source: DocumentSource
    version_sha256: str | None = None


def text_digest(text: str) -> str:
    """sha256 hex of a text (surrogates kept), the key vectors are reused by."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --- statements ----------------------------------------------------------------------------------


REUSABLE_DOCUMENT = """
    SELECT document_id, fingerprints, repeated_removed, chunk_count, vectors_missing, source, version_sha256
    FROM ragoverlay_v2_documents
    WHERE collection_id = $1 AND owner = $2 AND file_id = $3 AND checksum = $4
      AND extractor_version = $5 AND embedding_model = $6
    ORDER BY vectors_missing, document_id DESC
"""


@dataclass(frozen=True, slots=True)
class DocumentValues:
    """A `ragoverlay_v2_documents` row as inserted: one field per column, bound by its name."""

    collection_id: uuid.UUID
    file_id: str
    owner: str
    checksum: str
    extractor_version: str
    embedding_model: str
    source: DocumentSource
    filename: str
    title: str
    language: str | None
    document_number: str | None
    revision: str | None
    publication_date: str | None
    metadata: str  # JSON
    fingerprints: list[str]
    repeated_removed: list[str]
    chunk_count: int
    term_total: int
    vectors_missing: int
    embedding_error: str | None
    version_sha256: str | None
    title_key: str | None
    filename_key: str | None
    number_key: str | None


DOCUMENT_INSERT = named_insert("ragoverlay_v2_documents", DocumentValues)
INSERT_DOCUMENT = f"{DOCUMENT_INSERT.sql} RETURNING document_id"

CHUNK_COPY_COLUMNS = (
    "document_id", "ordinal", "chunk_id", "collection_id", "file_id", "owner", "kind", "page", "page_label",
    "section", "table_caption", "table_index", "row_index", "row_label", "headers", "row_values", "units",
    "footnotes", "whole_table", "content", "embed_text", "embed_digest", "tokens", "search_text",
    "term_count", "dims", "embedding", "row_label_key",
)  # fmt: skip

ENTITY_COPY_COLUMNS = (
    "document_id", "ordinal", "position", "collection_id", "file_id", "owner", "kind", "raw", "normalized",
    "value", "unit",
)  # fmt: skip

POSTING_COPY_COLUMNS = ("document_id", "ordinal", "term", "tf", "term_count")

# Documents that no running or active run links (a failed or abandoned run keeps its file list,
# pointing at nothing once pruned).
PRUNE_DOCUMENTS = """
    DELETE FROM ragoverlay_v2_documents d
    WHERE d.collection_id = $1
      AND NOT EXISTS (SELECT 1 FROM ragoverlay_v2_run_files rf
                      JOIN ragoverlay_v2_runs r ON r.run_id = rf.run_id
                      WHERE rf.document_id = d.document_id AND r.status IN ('running', 'active'))
"""


# --- documents -----------------------------------------------------------------------------------


async def reusable_documents(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    *,
    owner: str,
    file_id: str,
    checksum: str,
    extractor_version: str,
    embedding_model: str,
) -> list[ReusableDocument]:
    """Stored documents of this file with the same bytes, extractor and model (most complete first)."""
    rows = await conn.fetch(
        REUSABLE_DOCUMENT, collection_id, owner, file_id, checksum, extractor_version, embedding_model
    )
    return [
        ReusableDocument(
            document_id=int(r["document_id"]),
            fingerprints=frozenset(r["fingerprints"] or ()),
            repeated_removed=frozenset(r["repeated_removed"] or ()),
            chunk_count=int(r["chunk_count"]),
            vectors_missing=int(r["vectors_missing"]),
            source=r["source"],
            version_sha256=r["version_sha256"],
        )
        for r in rows
    ]


def _chunk_record(
    document_id: int, collection_id: uuid.UUID, document: DocumentRow, row: ChunkRow
) -> tuple[Any, ...]:
    chunk, place, vector = row.chunk, row.chunk.place, row.embedding
    return (
        document_id,
        chunk.ordinal,
        uuid.UUID(chunk.id),
        collection_id,
        document.file_id,
        document.owner,
        place.kind,
        place.page,
        place.page_label,
        list(place.section),
        place.table_caption,
        place.table_index,
        place.row_index,
        place.row_label,
        list(place.headers),
        list(place.row_values),
        list(place.units),
        list(place.footnotes),
        chunk.whole_table,
        chunk.content,
        chunk.embed_text,
        row.embed_digest,
        chunk.tokens,
        chunk.search_text,
        len(row.terms),
        int(vector.shape[0]) if vector is not None else None,
        np.asarray(vector, dtype=np.float32) if vector is not None else None,
        _key(place.row_label),
    )


def _key(text: str | None) -> str | None:
    """The exact channel's match key of a name (None for no name, or one without any token)."""
    return (label_key(text) or None) if text else None


def _document_values(
    collection_id: uuid.UUID, document: DocumentRow, chunks: Sequence[ChunkRow]
) -> DocumentValues:
    """The row INSERT_DOCUMENT stores for a document of these chunks."""
    return DocumentValues(
        collection_id=collection_id,
        file_id=document.file_id,
        owner=document.owner,
        checksum=document.checksum,
        extractor_version=document.extractor_version,
        embedding_model=document.embedding_model,
        source=document.source,
        filename=document.filename,
        title=document.title,
        language=document.language,
        document_number=document.document_number,
        revision=document.revision,
        publication_date=document.publication_date,
        metadata=json.dumps(dict(document.metadata), ensure_ascii=False, default=str),
        fingerprints=sorted(document.fingerprints),
        repeated_removed=sorted(document.repeated_removed),
        chunk_count=len(chunks),
        term_total=sum(len(c.terms) for c in chunks),
        vectors_missing=sum(1 for c in chunks if c.embedding is None),
        embedding_error=document.embedding_error,
        version_sha256=document.version_sha256,
        title_key=_key(document.title),
        filename_key=_key(PurePosixPath(document.filename).stem or document.filename),
        number_key=_key(document.document_number),
    )


def _entity_records(
    document_id: int, collection_id: uuid.UUID, document: DocumentRow, chunks: Sequence[ChunkRow]
) -> list[tuple[Any, ...]]:
    """The entity rows of the chunks, in ENTITY_COPY_COLUMNS order."""
    return [
        (
            document_id,
            row.chunk.ordinal,
            position,
            collection_id,
            document.file_id,
            document.owner,
            entity.kind,
            entity.raw,
            entity.normalized,
            entity.value,
            entity.unit,
        )
        for row in chunks
        for position, entity in enumerate(row.chunk.entities)
    ]


def _posting_records(
    document_id: int, chunks: Sequence[ChunkRow], language: str | None, extractor_version: str
) -> list[tuple[int, int, str, int, int]]:
    """The lexical channel's postings (migration 0013): one per chunk and distinct key, each cut to
    MAX_TERM_CHARS; the keys are the terms, their stems or their compounds' words as the run's
    extractor version says (app/text/stems.py `posting_keys`); the length is the chunk's terms."""
    postings: list[tuple[int, int, str, int, int]] = []
    for row in chunks:
        terms = row.terms
        # a chunk in another language than its document's (an English chapter of a German manual)
        # is keyed by its own: German stems and compounds only where the text is German
        own = language_of_tokens(terms) or language
        keys = Counter(key[:MAX_TERM_CHARS] for key in posting_keys(terms, own, extractor_version))
        postings.extend((document_id, row.chunk.ordinal, key, tf, len(terms)) for key, tf in keys.items())
    return postings


async def insert_document(
    conn: asyncpg.Connection, collection_id: uuid.UUID, document: DocumentRow, chunks: Sequence[ChunkRow]
) -> int:
    """Store a document with its chunks, entities and postings; returns its id.

    Run it in a transaction together with `link_file`, so a run never points at half a document.
    """
    values = _document_values(collection_id, document, chunks)
    document_id = int(await conn.fetchval(INSERT_DOCUMENT, *DOCUMENT_INSERT.bind(values)))
    # in pieces of COPY_BATCH_CHUNKS chunks: each COPY is one statement whose cost (the HNSW and GIN
    # index inserts of its rows) stays bounded whatever the document's size; a 14,000-chunk manual
    # written in one statement per table ran past DB_STATEMENT_TIMEOUT_MS
    for start in range(0, len(chunks), COPY_BATCH_CHUNKS):
        piece = chunks[start : start + COPY_BATCH_CHUNKS]
        await conn.copy_records_to_table(
            "ragoverlay_v2_chunks",
            columns=list(CHUNK_COPY_COLUMNS),
            records=[_chunk_record(document_id, collection_id, document, c) for c in piece],
        )
        entities = _entity_records(document_id, collection_id, document, piece)
        if entities:
            await conn.copy_records_to_table(
                "ragoverlay_v2_entities", columns=list(ENTITY_COPY_COLUMNS), records=entities
            )
        await conn.copy_records_to_table(
            "ragoverlay_v2_postings",
            columns=list(POSTING_COPY_COLUMNS),
            records=_posting_records(document_id, piece, document.language, document.extractor_version),
        )
    return document_id


async def prune_documents(conn: asyncpg.Connection, collection_id: uuid.UUID) -> int:
    """Delete documents that no running or active run links; returns how many."""
    return rows_affected(await conn.execute(PRUNE_DOCUMENTS, collection_id))
