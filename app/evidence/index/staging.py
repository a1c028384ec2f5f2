"""Staging one file into a V2 index run: its survey (repeated-block fingerprints), then link, or parse,
chunk, embed and store.

Per file: the original is parsed in the bounded worker (`parse_in_worker`), its boilerplate
fingerprints are counted against the run's other files, then it is chunked to fit the embedding
model (its own tokenizer for the local model; characters against RAG_V2__INDEX__HTTP_WINDOW_CHARS for HTTP
providers), embedded and stored. A document already stored with the same bytes, extractor version
and model is linked instead, and vectors of unchanged texts are reused, unless the run was started
with `force` (then every file is parsed and embedded again). When the provider fails, the chunks are
stored without vectors (the lexical channels still find them) and the document records it;
`reembed_missing` (the self-healing sweep, app/evidence/index/embedding.py) fills them in later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from app.clients.blobs import BlobNotFound
from app.errors import NoExtractableText, RagError, UpstreamUnavailable
from app.evidence.index.boilerplate import document_fingerprints, repeated_fingerprints
from app.evidence.index.chunk_writer import ChunkingStats
from app.evidence.index.chunker import ChunkedDocument, chunk_document
from app.evidence.index.context import V2Context
from app.evidence.index.dense import ONE_PASS
from app.evidence.index.embedding import embed_rows, inherit_rows, situate_chunks
from app.evidence.index.lifecycle import check_profile, forced
from app.evidence.index.metadata import DocumentMetadata, document_metadata
from app.evidence.index.profile import IndexProfile
from app.evidence.index.sources import (
    Derivative,
    Source,
    clean_document,
    parse_key,
    parse_source,
    resolve_source,
    v1_chunk_vectors,
    v1_source,
)
from app.evidence.settings import BoilerplateSettings
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store
from app.ingest.parse_cache import parse_cache
from app.ingest.types import LoadedDocument

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileOutcome:
    """What staging one file did."""

    file_id: str
    source: document_store.DocumentSource
    linked: bool
    document_id: int
    chunks: int
    table_rows: int = 0
    entities: int = 0
    embedded: int = 0
    reused: int = 0
    vectors_missing: int = 0
    pages: int | None = None
    kept_chars: int = 0
    boilerplate_chars: int = 0
    boilerplate_blocks: int = 0
    max_tokens: int = 0
    over_window: int = 0
    seconds: float = 0.0


RunFileNotFound = run_store.RunFileGone


async def index_file(
    ctx: V2Context, run_id: int, file_id: str, *, derivative: Derivative | None = None
) -> FileOutcome:
    """Stage one expected file into a running (or active) run: link, or parse, chunk, embed, store.

    Failures are recorded on the run's file (state `failed`, with the reason) and raised.
    """
    async with ctx.file_lock(run_id, file_id):
        async with ctx.pool.acquire() as conn:
            run = await run_store.require_run(conn, ctx.info.collection_id, run_id)
            if run.status not in ("running", "active"):
                raise run_store.RunStateError(
                    f"Index run {run_id} is {run.status}; files cannot be staged into it"
                )
            if await run_store.run_file(conn, run_id, file_id) is None:
                raise RunFileNotFound(f"File {file_id} is not one of the files of index run {run_id}")
            await run_store.start_file(conn, run_id, file_id)
        try:
            return await _stage_file(ctx, run, file_id, derivative)
        except RagError as exc:
            await _record_failure(ctx, run_id, file_id, exc.detail)
            raise
        except run_store.RunError as exc:
            await _record_failure(ctx, run_id, file_id, exc.detail)
            raise
        except Exception:
            await _record_failure(ctx, run_id, file_id, "internal error while staging (see the service log)")
            raise


async def _record_failure(ctx: V2Context, run_id: int, file_id: str, reason: str) -> None:
    logger.warning("V2 run %d: staging %s failed: %s", run_id, file_id, reason)
    with contextlib.suppress(Exception):
        async with ctx.pool.acquire() as conn:
            await run_store.fail_file(conn, run_id, file_id, reason)


def repeated_blocks(
    policy: BoilerplateSettings, others: Iterable[frozenset[str]], own: frozenset[str]
) -> frozenset[str]:
    return repeated_fingerprints([*others, own], policy)


async def _stage_file(
    ctx: V2Context,
    run: run_store.RunRecord,
    file_id: str,
    derivative: Derivative | None,
) -> FileOutcome:
    """Link the file's unchanged stored document, or parse, chunk, embed and store a new one."""
    started = time.perf_counter()
    profile = ctx.profile
    check_profile(ctx, run)
    force = forced(run)
    source = await resolve_source(ctx, run, file_id, derivative)
    others, candidates = await fingerprints_and_candidates(ctx, run, file_id, source.checksum, force=force)
    unchanged = unchanged_document(profile.boilerplate, candidates, others.values())
    if unchanged is not None:
        await release_survey_parse(ctx, source)
        return await _link_unchanged(ctx, run, file_id, unchanged, started)
    # the survey's parse of these bytes, when this process or one sharing DATA_DIR surveyed them
    source, parsed = await _parse_or_rebuild(ctx, run, file_id, source)
    await release_survey_parse(ctx, source)
    document = clean_document(parsed)
    for warning in document.warnings:
        logger.info("V2 file %s: %s", file_id, warning)
    fingerprints = document_fingerprints(document.blocks, profile.boilerplate)
    repeated = repeated_blocks(profile.boilerplate, others.values(), fingerprints)
    chunked, meta = await asyncio.to_thread(chunk_file, profile, document, source, repeated)
    # a file that is only navigation pages (a Sphinx index, a contents file) is staged without
    # chunks: it holds nothing to cite, and failing it would leave the run short of a stored file
    navigation = sum(chunked.stats.boilerplate_by_kind.get(kind, 0) for kind in ("toc", "index"))
    if not chunked.chunks and not navigation:
        raise NoExtractableText()
    chunks = await situate_chunks(ctx, run.run_id, file_id, meta.title or source.filename, chunked.chunks)
    # one pass: table rows take the vector of the stored V1 chunk holding them (else their own)
    rows, embedded, reused, error = await embed_rows(
        ctx, run, file_id, source.checksum, chunks, reuse=not force, rows_later=ONE_PASS
    )
    if ONE_PASS and error is None:
        rows, own = await inherit_rows(ctx, rows, *await v1_chunk_vectors(ctx, run.namespace, file_id))
        embedded += own
    missing = sum(1 for row in rows if row.embedding is None)
    stats = chunked.stats
    row = document_row(profile, run, file_id, source, document, meta, stats, fingerprints, repeated, error)
    document_id = await _store_document(ctx, run, file_id, source, row, rows)
    outcome = FileOutcome(
        file_id=file_id,
        source=source.source,
        linked=False,
        document_id=document_id,
        chunks=len(rows),
        table_rows=stats.table_rows,
        entities=sum(len(r.chunk.entities) for r in rows),
        embedded=embedded,
        reused=reused,
        vectors_missing=missing,
        pages=document.page_count,
        kept_chars=stats.kept_chars,
        boilerplate_chars=stats.boilerplate_chars,
        boilerplate_blocks=stats.boilerplate_blocks,
        max_tokens=stats.max_tokens,
        over_window=stats.over_window,
        seconds=time.perf_counter() - started,
    )
    log_staged(run, outcome)
    return outcome


async def fingerprints_and_candidates(
    ctx: V2Context, run: run_store.RunRecord, file_id: str, checksum: str, *, force: bool
) -> tuple[dict[str, frozenset[str]], list[document_store.ReusableDocument]]:
    """The fingerprints of the run's other files, and the stored documents of these bytes (unless forced)."""
    profile = ctx.profile
    async with ctx.pool.acquire() as conn:
        others = await run_store.run_fingerprints(conn, run.run_id)
        others.pop(file_id, None)
        candidates = (
            []
            if force
            else await document_store.reusable_documents(
                conn,
                ctx.info.collection_id,
                owner=run.namespace,
                file_id=file_id,
                checksum=checksum,
                extractor_version=profile.extractor_version,
                embedding_model=profile.embedding_model,
            )
        )
    return others, candidates


def unchanged_document(
    policy: BoilerplateSettings,
    candidates: Iterable[document_store.ReusableDocument],
    others: Collection[frozenset[str]],
) -> document_store.ReusableDocument | None:
    """The first stored document that staging the file again would rebuild exactly (it is linked instead)."""
    for candidate in candidates:
        if candidate.vectors_missing:
            continue  # built while the provider was down: rebuild it (its vectors are reused)
        repeated = repeated_blocks(policy, others, candidate.fingerprints)
        if repeated & candidate.fingerprints == candidate.repeated_removed:
            # the same bytes, extractor and model, and the same blocks removed: the very same chunks
            return candidate
    return None


async def _link_unchanged(
    ctx: V2Context,
    run: run_store.RunRecord,
    file_id: str,
    candidate: document_store.ReusableDocument,
    started: float,
) -> FileOutcome:
    """Point the run's file at a stored document (`started`: when staging began, perf_counter)."""
    async with ctx.pool.acquire() as conn, conn.transaction():
        await run_store.require_current_version(
            conn, ctx.info.collection_id, run.namespace, file_id, candidate.version_sha256
        )
        await run_store.link_file(
            conn,
            run.run_id,
            file_id,
            document_id=candidate.document_id,
            source=candidate.source,
            linked=True,
            chunks=candidate.chunk_count,
            fingerprints=candidate.fingerprints,
        )
    return FileOutcome(
        file_id,
        candidate.source,
        True,
        candidate.document_id,
        candidate.chunk_count,
        vectors_missing=candidate.vectors_missing,
        seconds=time.perf_counter() - started,
    )


async def release_survey_parse(ctx: V2Context, source: Source) -> None:
    """The stage step has the document: the parse the survey held for it goes (one it kept stays)."""
    await asyncio.to_thread(parse_cache(ctx.settings.data_dir).release, parse_key(ctx, source))


async def _parse_or_rebuild(
    ctx: V2Context, run: run_store.RunRecord, file_id: str, source: Source
) -> tuple[Source, LoadedDocument]:
    """The source parsed, with the source it came from (the V1 chunks when the original is lost)."""
    tmp_dir = ctx.settings.data_dir.resolve() / "tmp"
    try:
        return source, await parse_source(ctx, source, tmp_dir)
    except BlobNotFound:
        # the catalogue names an original the store lost: rebuild from V1 chunks instead
        logger.warning("V2: the original of %s is missing from the blob store; using its V1 chunks", file_id)
        version = source.version_sha256
        source = dataclasses.replace(
            await v1_source(ctx, run.namespace, file_id, source.filename), version_sha256=version
        )
        return source, await parse_source(ctx, source, tmp_dir)


def document_row(
    profile: IndexProfile,
    run: run_store.RunRecord,
    file_id: str,
    source: Source,
    document: LoadedDocument,
    meta: DocumentMetadata,
    stats: ChunkingStats,
    fingerprints: frozenset[str],
    repeated: frozenset[str],
    error: str | None,
) -> document_store.DocumentRow:
    """The stored document of a parsed and chunked file (`error`: why its vectors are missing)."""
    return document_store.DocumentRow(
        file_id=file_id,
        owner=run.namespace,
        checksum=source.checksum,
        extractor_version=profile.extractor_version,
        embedding_model=profile.embedding_model,
        source=source.source,
        filename=source.filename,
        title=meta.title,
        language=meta.language,
        document_number=meta.document_number,
        revision=meta.revision,
        publication_date=meta.publication_date,
        metadata={
            "kind": document.kind,
            "content_type": document.content_type,
            "page_count": document.page_count,
            "unreadable_pages": [p + 1 for p in document.unreadable_pages],
            # 1-based page -> OCR's mean confidence (0..1), for the pages whose text OCR read
            "ocr_pages": {str(p + 1): c for p, c in sorted(document.ocr_pages.items())},
            "warnings": document.warnings[:20],
            "stats": {
                "blocks": stats.blocks,
                "boilerplate_blocks": stats.boilerplate_blocks,
                "boilerplate_chars": stats.boilerplate_chars,
                "boilerplate_by_kind": stats.boilerplate_by_kind,
                "kept_chars": stats.kept_chars,
                "tables": stats.tables,
                "table_rows": stats.table_rows,
                "max_tokens": stats.max_tokens,
                "over_window": stats.over_window,
                "window": profile.window,
                "counter": profile.counter_name,
            },
        },
        fingerprints=fingerprints,
        repeated_removed=repeated & fingerprints,
        embedding_error=error,
        version_sha256=source.version_sha256,
    )


async def _store_document(
    ctx: V2Context,
    run: run_store.RunRecord,
    file_id: str,
    source: Source,
    row: document_store.DocumentRow,
    rows: list[document_store.ChunkRow],
) -> int:
    """Store the document and point the run's file at it in one transaction; returns its id.

    The run records the dimension of its first vector, and the context is told of it (its index).
    """
    async with ctx.pool.acquire() as conn, conn.transaction():
        # made from the version the catalogue still names? (a re-upload meanwhile staged its own)
        await run_store.require_current_version(
            conn, ctx.info.collection_id, run.namespace, file_id, row.version_sha256
        )
        document_id = await document_store.insert_document(conn, ctx.info.collection_id, row, rows)
        # the checkpoints its embedding kept (a text past the window left its windows' to the prune)
        await ctx.checkpoints.consume(conn, [r.chunk.embed_text for r in rows if r.embedding is not None])
        await run_store.link_file(
            conn,
            run.run_id,
            file_id,
            document_id=document_id,
            source=source.source,
            linked=False,
            chunks=len(rows),
            fingerprints=row.fingerprints,
        )
        dims = next((int(r.embedding.shape[0]) for r in rows if r.embedding is not None), None)
        if dims is not None:
            await run_store.set_run_dimension(conn, run.run_id, dims)
    if dims is not None and ctx.on_dimension is not None:
        ctx.on_dimension(dims)
    return document_id


def log_staged(run: run_store.RunRecord, outcome: FileOutcome) -> None:
    logger.info(
        "V2 run %d: staged %s (%s): %d chunks, %d table rows, %d embedded, %d reused, %d without vector, "
        "%.0f ms",
        run.run_id,
        outcome.file_id,
        outcome.source,
        outcome.chunks,
        outcome.table_rows,
        outcome.embedded,
        outcome.reused,
        outcome.vectors_missing,
        outcome.seconds * 1000,
    )


def chunk_file(
    profile: IndexProfile, document: LoadedDocument, source: Source, repeated: frozenset[str]
) -> tuple[ChunkedDocument, DocumentMetadata]:
    """Metadata and chunks of one document (CPU work: run in a thread)."""
    meta = document_metadata(document, source.filename, extractor=profile.extractor)
    chunked = chunk_document(
        document,
        title=meta.title,
        document_key=f"{source.checksum}:{profile.extractor_version}",
        counter=profile.counter,
        config=profile.chunking,
        extractor=profile.extractor,
        language=meta.language,
        repeated=repeated,
    )
    return chunked, meta


async def survey_file(ctx: V2Context, run_id: int, file_id: str) -> bool:
    """Record one file's repeated-block fingerprints on a running run, before any file is chunked.

    The parsed document is held in the parse cache until the file's stage step. False when there was
    nothing to do (the run is not running, the file is staged or surveyed already) or the file
    cannot be read (its stage step records why). Raises when the blob store or the database is away.
    """
    async with ctx.pool.acquire() as conn:
        run = await run_store.require_run(conn, ctx.info.collection_id, run_id)
        entry = await run_store.run_file(conn, run_id, file_id)
    if run.status != "running" or entry is None or entry.state == "staged" or entry.surveyed:
        return False
    try:
        check_profile(ctx, run)
        source = await resolve_source(ctx, run, file_id, None)
        reusable: list[document_store.ReusableDocument] = []
        if not forced(run):
            async with ctx.pool.acquire() as conn:
                reusable = await document_store.reusable_documents(
                    conn,
                    ctx.info.collection_id,
                    owner=run.namespace,
                    file_id=file_id,
                    checksum=source.checksum,
                    extractor_version=run.extractor_version,
                    embedding_model=run.embedding_model,
                )
        if reusable:
            fingerprints = reusable[0].fingerprints
        else:
            tmp_dir = ctx.settings.data_dir.resolve() / "tmp"
            # held under the bytes' key for the stage step, which reads it by the same key
            try:
                raw = await parse_source(ctx, source, tmp_dir, hold=True)
            except BlobNotFound:
                # the store lost the original: staging will use the V1 chunks, so does the survey
                source = await v1_source(ctx, run.namespace, file_id, source.filename)
                raw = await parse_source(ctx, source, tmp_dir, hold=True)
            fingerprints = document_fingerprints(clean_document(raw).blocks, ctx.profile.boilerplate)
    except UpstreamUnavailable:
        raise  # the blob store is away: the survey runs again
    except (RagError, run_store.RunError) as exc:
        logger.info("V2 run %d: %s cannot be read (%s)", run_id, file_id, exc.detail)
        return False
    async with ctx.pool.acquire() as conn:
        await run_store.set_fingerprints(conn, run_id, file_id, fingerprints)
    return True
