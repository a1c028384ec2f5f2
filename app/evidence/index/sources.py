"""Where a V2 document's text comes from, and parsing it: the stored original, an uploaded
derivative, or the text rebuilt from the file's V1 chunks (a file uploaded to rag_api, no original).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.errors import NotFound
from app.evidence.index.context import V2Context
from app.evidence.store import documents as document_store
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.ingest.chunking import clean_text
from app.ingest.derived import V1Chunk
from app.ingest.loaders import safe_basename
from app.ingest.parse_cache import ParseCache, parse_and_keep, parse_cache, recall
from app.ingest.types import Block, LoadedDocument
from app.search.context import overlap_length
from app.store import chunks as v1_store
from app.store.scope import Scope

# Files staged before this many are re-read to count repeated blocks (below it no block can repeat
# often enough, see BoilerplateSettings.min_documents).
_V1_MAX_CHUNKS = 200_000


@dataclass(frozen=True)
class Derivative:
    """An uploaded text or Markdown file that stands in for a file's original."""

    path: Path
    filename: str
    content_type: str | None
    sha256: str


@dataclass
class Source:
    """Where a document's text comes from, and its checksum."""

    source: document_store.DocumentSource
    filename: str
    checksum: str
    content_type: str | None = None
    blob_key: str | None = None
    path: Path | None = None  # a derivative, or the rebuilt V1 text
    v1_text: str | None = None
    # the version of the file it stands for: the catalogue's sha256 of the stored original (None: none)
    version_sha256: str | None = None


def _scope(ctx: V2Context, namespace: str, file_id: str) -> Scope:
    return Scope.of(ctx.info.collection_id, [namespace], file_ids=[file_id])


async def resolve_source(
    ctx: V2Context, run: run_store.RunRecord, file_id: str, derivative: Derivative | None
) -> Source:
    async with ctx.pool.acquire() as conn:
        entry = await read_store.catalogue_file(conn, _scope(ctx, run.namespace, file_id), file_id)
    version = entry.sha256 if entry is not None else None
    if derivative is not None:
        return Source(
            "derivative",
            safe_basename(derivative.filename),
            derivative.sha256,
            derivative.content_type,
            path=derivative.path,
            version_sha256=version,
        )
    if entry is not None and entry.blob_key and entry.sha256:
        return Source(
            "original",
            entry.filename,
            entry.sha256,
            entry.content_type,
            blob_key=entry.blob_key,
            version_sha256=entry.sha256,
        )
    source = await v1_source(ctx, run.namespace, file_id, entry.filename if entry else None)
    return dataclasses.replace(source, version_sha256=version)


async def v1_source(ctx: V2Context, namespace: str, file_id: str, filename: str | None) -> Source:
    """The file's text rebuilt from its stored V1 chunks (a file uploaded to rag_api, no original)."""
    async with ctx.pool.acquire() as conn:
        rows = await v1_store.documents(conn, _scope(ctx, namespace, file_id), limit=_V1_MAX_CHUNKS)
    if not rows:
        raise NotFound(f"File {file_id} has neither a stored original nor V1 chunks in namespace {namespace}")
    text = rebuild_v1_text(
        [(r.text, _page(r.metadata.get("page"))) for r in rows], ctx.settings.chunk_overlap
    )
    name = filename or str(rows[0].metadata.get("source") or file_id)
    checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Source("v1_chunks", safe_basename(name), checksum, "text/plain", v1_text=text)


async def v1_chunk_vectors(
    ctx: V2Context, namespace: str, file_id: str
) -> tuple[list[V1Chunk], list[np.ndarray | None]]:
    """The file's stored V1 chunks (text, 0-based page) and their vectors by this service's model
    (None: stored by another model, or without a vector): what its evidence table rows take theirs from."""
    async with ctx.pool.acquire() as conn:
        rows = await v1_store.documents(conn, _scope(ctx, namespace, file_id), limit=_V1_MAX_CHUNKS)
        known = await v1_store.existing_vectors(
            conn, ctx.info, file_id=file_id, owner=namespace, model=ctx.profile.embedding_model
        )
    chunks = [V1Chunk(r.text, _page(r.metadata.get("page"))) for r in rows]
    return chunks, [known.get(str(r.metadata.get("digest") or "")) for r in rows]


def _page(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# pages with more chunks than this keep the order they were read in (the chaining is quadratic)
MAX_CHAINED_CHUNKS = 64


def in_reading_order(
    chunks: Sequence[tuple[str, int | None]], max_overlap: int
) -> list[tuple[str, int | None]]:
    """The chunks page by page, each page's chunks chained by their overlaps.

    rag_api's rows carry random uuids, so they come back in physical order, which is insertion order
    only until the table has free space from earlier deletes: a new row may land before an older
    one. The splitter's overlaps say the real order: a chunk follows the one whose end it starts with.
    """
    pages: dict[int | None, list[str]] = {}
    for text, page in chunks:
        pages.setdefault(page, []).append(text)
    out: list[tuple[str, int | None]] = []
    for page, texts in pages.items():
        out.extend((text, page) for text in _chained(texts, max_overlap))
    return out


def _chained(texts: list[str], max_overlap: int) -> list[str]:
    n = len(texts)
    if n < 2 or n > MAX_CHAINED_CHUNKS:
        return texts
    follows: dict[int, int] = {}  # chunk -> the chunk that continues it
    continued: set[int] = set()
    for i in range(n):
        for j in range(n):
            if i != j and j not in continued and overlap_length(texts[i], texts[j], max_overlap):
                follows[i] = j
                continued.add(j)
                break
    order: list[int] = []
    for start in [k for k in range(n) if k not in continued] + list(range(n)):
        at: int | None = start
        while at is not None and at not in order:
            order.append(at)
            at = follows.get(at)
    return [texts[i] for i in order]


def rebuild_v1_text(chunks: Sequence[tuple[str, int | None]], max_overlap: int) -> str:
    """V1 chunks (text, 0-based page) in order as one text: overlaps removed, a form feed per page.

    Pages keep their numbers (a page without chunks stays an empty page), so the V2 chunks of a PDF
    rebuilt this way carry the original's pages.
    """
    chunks = in_reading_order(chunks, max_overlap)
    pages: dict[int, list[str]] = {}
    previous = ""
    current_page: int | None = None
    for text, page in chunks:
        key = page if page is not None else 0
        if key != current_page:
            previous = ""
            current_page = key
        part = text
        if previous:
            cut = overlap_length(previous, text, max_overlap)
            part = text[cut:] if cut else "\n" + text
        pages.setdefault(key, []).append(part)
        previous = text
    if not pages:
        return ""
    if all(page is None for _, page in chunks):
        return "".join(pages[0])
    return "\f".join("".join(pages.get(n, [])) for n in range(max(pages) + 1))


def clean_document(document: LoadedDocument) -> LoadedDocument:
    """The document with NUL and lone surrogates removed from every text (PostgreSQL refuses them)."""

    def block(b: Block) -> Block:
        return dataclasses.replace(
            b,
            text=clean_text(b.text),
            term=clean_text(b.term) if b.term is not None else None,
            title=clean_text(b.title) if b.title is not None else None,
            page_label=clean_text(b.page_label) if b.page_label is not None else None,
            headers=[clean_text(h) for h in b.headers] if b.headers is not None else None,
            rows=[[clean_text(c) for c in row] for row in b.rows] if b.rows is not None else None,
            footnotes=tuple(clean_text(f) for f in b.footnotes),
        )

    return dataclasses.replace(
        document,
        blocks=[block(b) for b in document.blocks],
        title=clean_text(document.title) if document.title is not None else None,
        properties={clean_text(k): clean_text(v) for k, v in document.properties.items()},
    )


def _parsed_as(ctx: V2Context, source: Source) -> tuple[str, str | None, bool]:
    """The name, content type and PDF_EXTRACT_IMAGES the source is parsed with (V1 text: plain text)."""
    if source.v1_text is not None:
        return Path(source.filename).stem + ".txt", "text/plain", False
    return source.filename, source.content_type, ctx.settings.pdf_extract_images


def parse_key(ctx: V2Context, source: Source) -> str:
    """The source's key in the parse cache: its checksum and everything that shapes its parse."""
    name, content_type, images = _parsed_as(ctx, source)
    return ParseCache.key(source.checksum, name, content_type, ctx.limits, images)


async def parse_source(
    ctx: V2Context, source: Source, tmp_dir: Path, *, hold: bool = False
) -> LoadedDocument:
    """The source parsed in the bounded worker (downloading an original to a temporary file first),
    or its parse from the parse cache; `hold`: cache it for the file's stage step whatever it cost."""
    cache = parse_cache(ctx.settings.data_dir)
    name, content_type, images = _parsed_as(ctx, source)
    key = parse_key(ctx, source)
    # the upload's own parse (V1's ingest of the same bytes) or the survey's: no second parse or OCR
    kept = await recall(cache, key, source.filename)
    if kept is not None:
        return kept

    async def parse(path: Path) -> LoadedDocument:
        return await parse_and_keep(
            cache, key, path, name, content_type, limits=ctx.limits, pdf_extract_images=images, hold=hold
        )

    if source.path is not None:
        return await parse(source.path)
    await asyncio.to_thread(tmp_dir.mkdir, parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix="v2-", suffix=Path(name).suffix[:16], dir=tmp_dir)
    os.close(handle)
    path = Path(temp_name)
    try:
        if source.v1_text is not None:
            await asyncio.to_thread(path.write_text, source.v1_text, "utf-8")
        else:
            assert source.blob_key is not None
            await ctx.blobs.download(source.blob_key, path)
        return await parse(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.unlink)
