"""Embedding V2 chunks: texts longer than the window by their pooled windows, vectors of unchanged
texts reused, chunks stored without a vector when the provider fails, and the sweep that fills those in.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.clients.embeddings import Embedder
from app.errors import UpstreamUnavailable
from app.evidence.index.context import V2Context
from app.evidence.index.dense import inherit, link
from app.evidence.index.profile import IndexProfile
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.ingest.checkpointed import CheckpointedEmbedding
from app.ingest.contextual import log_situated, with_context
from app.ingest.derived import V1Chunk
from app.text.chunk_records import ChunkRecord
from app.text.normalize import normalize
from app.text.tokens import pool_windows, window_texts, window_weights

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pieces:
    """What the model is given for some texts: each text, or its windows when it is longer than one."""

    texts: list[str]
    spans: list[tuple[int, int, list[float] | None]]  # per text: its pieces [start, end), window weights


def plan_pieces(profile: IndexProfile, texts: Sequence[str]) -> Pieces:
    """Each text as one piece, or as its windows (weighted by their tokens) when past the window."""
    pieces: list[str] = []
    spans: list[tuple[int, int, list[float] | None]] = []
    for text in texts:
        if profile.counter.count(text) + profile.counter.special_tokens <= profile.window:
            spans.append((len(pieces), len(pieces) + 1, None))
            pieces.append(text)
            continue
        windows = window_texts(text, profile.counter, profile.window) or [text]
        spans.append((len(pieces), len(pieces) + len(windows), window_weights(windows, profile.counter)))
        pieces.extend(windows)
    return Pieces(pieces, spans)


async def embed_texts(
    embedder: Embedder,
    profile: IndexProfile,
    texts: Sequence[str],
    checkpoints: CheckpointedEmbedding | None = None,
) -> list[np.ndarray]:
    """One unit vector per text; a text longer than the window is embedded by its pooled windows.

    The chunker keeps every V2 text inside the window, so pooling is the safety net that makes sure
    no text is ever cut silently by the model. With `checkpoints`, each batch is kept as soon as it
    is embedded (a staging that stops loses none of it).
    """
    plan = plan_pieces(profile, texts)
    pieces, spans = plan.texts, plan.spans
    vectors: np.ndarray | None = None
    if pieces and checkpoints is not None:
        vectors, _ = await checkpoints.embed(embedder, pieces)
    elif pieces:
        vectors = np.asarray(await embedder.embed_documents(pieces), dtype=np.float32)
    out: list[np.ndarray] = []
    for start, end, weights in spans:
        assert vectors is not None
        if weights is None:
            vector = vectors[start]
            out.append((vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32))
        else:
            out.append(pool_windows(vectors[start:end], weights))
    return out


async def situate_chunks(
    ctx: V2Context, run_id: int, file_id: str, title: str, chunks: Sequence[ChunkRecord]
) -> list[ChunkRecord]:
    """The chunks with their situating sentence before the embedded and the lexical text (content unchanged).

    Without contextual chunking, or for a chunk the endpoint gave no sentence, the chunk as it was.
    Its id stays the one of its own text: the same file gives the same ids whatever was written.
    """
    if ctx.contextualizer is None or not chunks:
        return list(chunks)
    done = await ctx.contextualizer.situate(title, [c.content for c in chunks])
    log_situated(f"V2 run {run_id}, file {file_id}", done)
    counter = ctx.profile.counter
    out: list[ChunkRecord] = []
    for chunk, sentence in zip(chunks, done.sentences, strict=True):
        if sentence is None:
            out.append(chunk)
            continue
        embed_text = with_context(sentence, chunk.embed_text)
        out.append(
            dataclasses.replace(
                chunk,
                embed_text=embed_text,
                search_text=f"{normalize(sentence)} {chunk.search_text}".strip(),
                tokens=counter.count(embed_text) + counter.special_tokens,
            )
        )
    return out


async def embed_rows(
    ctx: V2Context,
    run: run_store.RunRecord,
    file_id: str,
    checksum: str,
    chunks: Sequence[ChunkRecord],
    *,
    reuse: bool = True,
    rows_later: bool = False,
) -> tuple[list[document_store.ChunkRow], int, int, str | None]:
    """Rows with vectors (reused by text digest, else embedded); without vectors if the provider fails.

    `rows_later`: table rows are left without a vector: they take their V1 chunk's (`inherit_rows`).
    """
    profile = ctx.profile
    # a digest of None (a table row left for later) is never reused nor embedded here
    digests: list[str | None] = [
        None if rows_later and c.place.kind == "table_row" else document_store.text_digest(c.embed_text)
        for c in chunks
    ]
    known: dict[str, np.ndarray] = {}
    if reuse:
        async with ctx.pool.acquire() as conn:
            known = await vector_store.reusable_vectors(
                conn,
                ctx.info.collection_id,
                embedding_model=profile.embedding_model,
                checksum=checksum,
                owner=run.namespace,
                file_id=file_id,
                digests=[d for d in digests if d is not None],
            )
    missing: dict[str, str] = {}
    for digest, chunk in zip(digests, chunks, strict=True):
        if digest is not None and digest not in known:
            missing.setdefault(digest, chunk.embed_text)
    fresh: dict[str, np.ndarray] = {}
    error: str | None = None
    if missing:
        try:
            vectors = await embed_texts(ctx.embedder, profile, list(missing.values()), ctx.checkpoints)
            fresh = dict(zip(missing, vectors, strict=True))
        except UpstreamUnavailable as exc:
            # stored without vectors: the lexical channels find them, the sweep embeds them later
            error = exc.detail
            logger.warning(
                "V2 run %d: embedding %s failed (%s); stored without vectors", run.run_id, file_id, exc.detail
            )
    dims = {v.shape[0] for v in fresh.values()}
    if dims and any(v.shape[0] not in dims for v in known.values()):
        known = {}  # a model that changed its dimension under the same name: never mix
    rows = [
        document_store.ChunkRow(c, None if d is None else fresh.get(d, known.get(d)))
        for c, d in zip(chunks, digests, strict=True)
    ]
    reused = sum(1 for d in digests if d is not None and d in known)
    embedded = len(fresh)
    return rows, embedded, reused, error


async def inherit_rows(
    ctx: V2Context,
    rows: Sequence[document_store.ChunkRow],
    v1: Sequence[V1Chunk],
    v1_vectors: Sequence[np.ndarray | None],
) -> tuple[list[document_store.ChunkRow], int]:
    """Table rows without a vector take the vector of the V1 chunk holding them; a row no V1 chunk
    holds (or whose V1 chunk has no vector) is embedded on its own. Returns the rows and how many
    were embedded (a provider failure leaves them without a vector, as `embed_rows` does)."""
    chunks = [r.chunk for r in rows]
    inherited = inherit(link(v1, chunks), v1_vectors, len(rows))
    out = [
        dataclasses.replace(r, embedding=inherited[j])
        if r.embedding is None and r.chunk.place.kind == "table_row" and inherited[j] is not None
        else r
        for j, r in enumerate(rows)
    ]
    left = [j for j, r in enumerate(out) if r.embedding is None and r.chunk.place.kind == "table_row"]
    if not left:
        return out, 0
    try:
        vectors = await embed_texts(
            ctx.embedder, ctx.profile, [out[j].chunk.embed_text for j in left], ctx.checkpoints
        )
    except UpstreamUnavailable as exc:
        logger.warning(
            "V2: embedding %d table rows failed (%s); stored without vectors", len(left), exc.detail
        )
        return out, 0
    for j, vector in zip(left, vectors, strict=True):
        out[j] = dataclasses.replace(out[j], embedding=vector)
    return out, len(left)


# --- the re-embed sweep's work -----------------------------------------------------------------


@dataclass(frozen=True)
class Reembedded:
    """What one `reembed_missing` call did: chunks listed, vectors stored, chunks skipped, the last key."""

    listed: int
    stored: int
    skipped: int
    last: tuple[int, int] | None  # (document_id, ordinal) of the last chunk listed: the next call's `after`


async def reembed_missing(
    ctx: V2Context, *, limit: int = 256, after: tuple[int, int] | None = None
) -> Reembedded:
    """Embed up to `limit` chunks stored without a vector by this service's model, in key order.

    A chunk whose document already holds vectors of another dimension is skipped (a model that
    changed its dimension under the same name: never mix them in one document).
    """
    profile = ctx.profile
    async with ctx.pool.acquire() as conn:
        todo = await vector_store.chunks_missing_vectors(
            conn, ctx.info.collection_id, embedding_model=profile.embedding_model, limit=limit, after=after
        )
    if not todo:
        return Reembedded(0, 0, 0, None)
    vectors = await embed_texts(ctx.embedder, profile, [item.embed_text for item in todo])
    fitting = [
        (item.document_id, item.ordinal, vector)
        for item, vector in zip(todo, vectors, strict=True)
        if item.dims is None or item.dims == int(vector.shape[0])
    ]
    async with ctx.pool.acquire() as conn:
        done = await vector_store.set_chunk_vectors(conn, fitting)
    if fitting and ctx.on_dimension is not None:
        ctx.on_dimension(int(fitting[0][2].shape[0]))
    last = todo[-1]
    return Reembedded(len(todo), done, len(todo) - len(fitting), (last.document_id, last.ordinal))
