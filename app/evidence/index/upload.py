"""A new upload's evidence document, made from the upload's own parse and stored in its own commit.

    work = await prepare_upload(ctx, draft)          # chunk and embed, before the upload commits
    await work.write(conn)                           # inside the transaction that stores V1's chunks
    await work.written(ok=True)                      # after it: the index task, activation, pruning

One parse feeds both indexes: ingestion hands over the document it parsed for V1 (no second fetch
of the original, no second parse), and the evidence document of every open run of the namespace
(running backfills and the active run) is written in the same transaction as the file's V1 chunks,
so a re-upload replaces both at once and `/query_v2` never cites the replaced version. Evidence
vectors are embedded through the upload's checkpoints (a stopped attempt resumes).

When the upload cannot be staged here (the namespace has no open run yet, a run was built with
another extractor or model, or staging failed), the work is `deferred`: after the commit it queues
the file's staging job exactly as before (`V2Jobs.note_upload`), and until that job has run,
`/query_v2` says the file is missing (`degraded`), never citing a replaced version.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg
import numpy as np

from app.clients.embeddings import reporting_batches
from app.errors import NoExtractableText, RagError
from app.evidence.index.backfill import complete_run
from app.evidence.index.boilerplate import document_fingerprints
from app.evidence.index.chunk_writer import ChunkingStats
from app.evidence.index.context import V2Context
from app.evidence.index.dense import ONE_PASS, link, pool
from app.evidence.index.embedding import embed_rows, inherit_rows, situate_chunks
from app.evidence.index.lifecycle import ProfileMismatch, check_profile, forced
from app.evidence.index.sources import Source, clean_document
from app.evidence.index.staging import (
    FileOutcome,
    chunk_file,
    document_row,
    fingerprints_and_candidates,
    log_staged,
    repeated_blocks,
    unchanged_document,
)
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store
from app.ingest.derived import StageReport, UploadDraft, V1Chunk
from app.ingest.types import LoadedDocument

logger = logging.getLogger(__name__)


@dataclass
class _Staged:
    """One evidence document for some of the upload's runs: new (`row`) or linked (`reuse`)."""

    runs: list[run_store.RunRecord]
    outcome: FileOutcome
    row: document_store.DocumentRow | None = None
    rows: list[document_store.ChunkRow] = field(default_factory=list)
    reuse: document_store.ReusableDocument | None = None
    document_id: int | None = None


@dataclass
class EvidenceUpload:
    """The evidence side of one upload, written in its commit (or `deferred` to a staging job)."""

    ctx: V2Context
    file_id: str
    owner: str
    uploader: str
    staged: list[_Staged] = field(default_factory=list)
    deferred: str | None = None  # why the file's staging job does it instead
    # queues that job: (file id, owner, uploader) -> its id (None: it could not be queued)
    queue_job: Callable[[str, str, str], Awaitable[int | None]] | None = None
    written_ok: bool = False
    job_id: int | None = None

    @property
    def chunks(self) -> int:
        """Evidence chunks the upload stored (over its distinct documents)."""
        return sum(s.outcome.chunks for s in self.staged)

    def summary(self) -> dict[str, object]:
        """What the upload's job result says of evidence search."""
        if self.deferred is not None or not self.written_ok:
            reason = self.deferred or "staging failed"
            return {
                "searchable": False,
                "queued": self.job_id is not None,
                "job_id": self.job_id,
                "reason": reason,
            }
        return {
            "searchable": True,
            "runs": sorted(r.run_id for s in self.staged for r in s.runs),
            "chunks": self.chunks,
            "embedded": sum(s.outcome.embedded for s in self.staged),
            "reused": sum(s.outcome.reused for s in self.staged),
        }

    async def v1_embedded(self, chunks: Sequence[V1Chunk], vectors: Sequence[np.ndarray]) -> None:
        """The upload's V1 vectors are known: each table row takes the one of the V1 chunk holding it."""
        if self.deferred is not None:
            return
        for staged in self.staged:
            if staged.row is None or not staged.rows:
                continue
            staged.rows, embedded = await inherit_rows(self.ctx, staged.rows, chunks, vectors)
            if embedded:
                staged.outcome = dataclasses.replace(
                    staged.outcome, embedded=staged.outcome.embedded + embedded
                )
            missing = sum(1 for r in staged.rows if r.embedding is None)
            staged.outcome = dataclasses.replace(staged.outcome, vectors_missing=missing)

    def v1_vectors(self, chunks: Sequence[V1Chunk]) -> list[np.ndarray | None]:
        """V1's chunks' vectors pooled from the evidence vectors embedded for this upload (one pass).

        From the first document made for it (the runs' documents differ only in the repeated blocks
        they leave out); None for a V1 chunk holding none of its embedded chunks (embed it).
        """
        made = next((s for s in self.staged if s.row is not None and s.rows), None)
        if not ONE_PASS or self.deferred is not None or made is None:
            return [None] * len(chunks)
        members = link(chunks, [r.chunk for r in made.rows])
        return pool([r.embedding for r in made.rows], members)

    async def write(self, conn: asyncpg.Connection) -> None:
        """Store the documents and point the runs' file at them, inside the upload's transaction."""
        if self.deferred is not None:
            return
        collection = self.ctx.info.collection_id
        for staged in self.staged:
            if staged.reuse is not None:
                staged.document_id = staged.reuse.document_id
                fingerprints, source, linked = staged.reuse.fingerprints, staged.reuse.source, True
            else:
                assert staged.row is not None
                staged.document_id = await document_store.insert_document(
                    conn, collection, staged.row, staged.rows
                )
                fingerprints, source, linked = staged.row.fingerprints, staged.row.source, False
                embedded = [r.chunk.embed_text for r in staged.rows if r.embedding is not None]
                await self.ctx.checkpoints.consume(conn, embedded)
            for run in staged.runs:
                await run_store.add_run_file(conn, run.run_id, self.file_id)
                await run_store.link_file(
                    conn,
                    run.run_id,
                    self.file_id,
                    document_id=staged.document_id,
                    source=source,
                    linked=linked,
                    chunks=staged.outcome.chunks,
                    fingerprints=fingerprints,
                )
                dims = _dimension(staged)
                if dims is not None:
                    await run_store.set_run_dimension(conn, run.run_id, dims)

    async def written(self, *, ok: bool) -> None:
        """After the upload's commit (`ok`: the evidence part committed with it); never raises."""
        self.written_ok = ok and self.deferred is None
        try:
            if not self.written_ok:
                if self.deferred is None:
                    self.deferred = "staging with the upload failed"
                if self.queue_job is not None:
                    self.job_id = await self.queue_job(self.file_id, self.owner, self.uploader)
                return
            await self._after_commit()
        except Exception as exc:  # the upload has succeeded; a reindex catches up
            logger.error("V2: after storing %s: %s", self.file_id, type(exc).__name__)

    async def _after_commit(self) -> None:
        ctx = self.ctx
        for staged in self.staged:
            dims = _dimension(staged)
            if dims is not None and ctx.on_dimension is not None:
                ctx.on_dimension(dims)
            for run in staged.runs:
                log_staged(run, staged.outcome)
                if run.status == "running":
                    await complete_run(ctx, run.run_id)
        async with ctx.pool.acquire() as conn:
            await document_store.prune_documents(conn, ctx.info.collection_id)  # the replaced version


def _dimension(staged: _Staged) -> int | None:
    return next((int(r.embedding.shape[0]) for r in staged.rows if r.embedding is not None), None)


async def prepare_upload(
    ctx: V2Context,
    draft: UploadDraft,
    *,
    report: StageReport | None = None,
    queue_job: Callable[[str, str, str], Awaitable[int | None]] | None = None,
) -> EvidenceUpload:
    """The evidence documents of an upload for every open run of its namespace, ready to write.

    Never raises for the upload's sake: what cannot be staged here is `deferred` to the file's
    staging job (the upload itself goes on).
    """
    work = EvidenceUpload(ctx, draft.file_id, draft.owner, draft.uploader, queue_job=queue_job)
    try:
        async with ctx.pool.acquire() as conn:
            runs = await run_store.open_runs(conn, ctx.info.collection_id, draft.owner)
        if not runs:
            work.deferred = "the namespace has no index run yet (its first backfill is queued)"
            return work
        fitting = []
        for run in runs:
            try:
                check_profile(ctx, run)
            except ProfileMismatch:
                continue  # another extractor or model: only its own staging job can say so on the run
            fitting.append(run)
        if len(fitting) < len(runs):
            work.deferred = "a run of the namespace was built with another extractor or model"
            return work
        source = Source(
            "original",
            draft.filename,
            draft.sha256,
            draft.content_type,
            blob_key=draft.blob_key,
            version_sha256=draft.sha256,
        )
        document = clean_document(draft.document)
        for run in fitting:
            await _stage_run(ctx, work, run, source, document, report)
    except NoExtractableText:
        work.deferred = "no text to index"
    except (RagError, run_store.RunError, OSError, asyncpg.PostgresError) as exc:
        logger.warning("V2: staging %s with its upload failed (%s); its job stages it", draft.file_id, exc)
        work.deferred = "staging with the upload failed"
    return work


async def _stage_run(
    ctx: V2Context,
    work: EvidenceUpload,
    run: run_store.RunRecord,
    source: Source,
    document: LoadedDocument,
    report: StageReport | None,
) -> None:
    """Add `run` to the document of the same chunking, or chunk (and embed) one for it."""
    started = time.perf_counter()
    profile = ctx.profile
    others, candidates = await fingerprints_and_candidates(
        ctx, run, work.file_id, source.checksum, force=forced(run)
    )
    unchanged = unchanged_document(profile.boilerplate, candidates, others.values())
    if unchanged is not None:
        outcome = FileOutcome(
            work.file_id, unchanged.source, True, unchanged.document_id, unchanged.chunk_count,
            vectors_missing=unchanged.vectors_missing, seconds=time.perf_counter() - started,
        )  # fmt: skip
        work.staged.append(_Staged([run], outcome, reuse=unchanged))
        return
    fingerprints = document_fingerprints(document.blocks, profile.boilerplate)
    repeated = repeated_blocks(profile.boilerplate, others.values(), fingerprints)
    for staged in work.staged:
        # the same blocks removed for this run as for one already prepared: the very same chunks
        if staged.row is not None and staged.row.repeated_removed == repeated & fingerprints:
            staged.runs.append(run)
            return
    if report is not None:
        report("evidence: chunking", 0, None)
    chunked, meta = await asyncio.to_thread(chunk_file, profile, document, source, repeated)
    navigation = sum(chunked.stats.boilerplate_by_kind.get(kind, 0) for kind in ("toc", "index"))
    if not chunked.chunks and not navigation:
        raise NoExtractableText()
    title = meta.title or source.filename
    chunks = await situate_chunks(ctx, run.run_id, work.file_id, title, chunked.chunks)
    done = 0

    def embedded_batch(count: int, of: int) -> None:
        nonlocal done
        done += count
        if report is not None:
            # texts sent (those reused count at the end): the chunks of this document, roughly
            report("evidence: embedding", min(done, len(chunks)), len(chunks))

    if report is not None:
        report("evidence: embedding", 0, len(chunks))
    with reporting_batches(embedded_batch):
        # one pass: table rows take their V1 chunk's vector once V1's are known (`v1_embedded`)
        rows, embedded, reused, error = await embed_rows(
            ctx, run, work.file_id, source.checksum, chunks, reuse=not forced(run), rows_later=ONE_PASS
        )
    stats: ChunkingStats = chunked.stats
    row = document_row(
        profile, run, work.file_id, source, document, meta, stats, fingerprints, repeated, error
    )
    outcome = _outcome(work.file_id, source, document, rows, stats, embedded, reused, started)
    work.staged.append(_Staged([run], outcome, row=row, rows=rows))


def _outcome(
    file_id: str,
    source: Source,
    document: LoadedDocument,
    rows: list[document_store.ChunkRow],
    stats: ChunkingStats,
    embedded: int,
    reused: int,
    started: float,
) -> FileOutcome:
    """What staging a new document for the upload did (its id is known once written)."""
    return FileOutcome(
        file_id=file_id,
        source=source.source,
        linked=False,
        document_id=0,
        chunks=len(rows),
        table_rows=stats.table_rows,
        entities=sum(len(r.chunk.entities) for r in rows),
        embedded=embedded,
        reused=reused,
        vectors_missing=sum(1 for r in rows if r.embedding is None),
        pages=document.page_count,
        kept_chars=stats.kept_chars,
        boilerplate_chars=stats.boilerplate_chars,
        boilerplate_blocks=stats.boilerplate_blocks,
        max_tokens=stats.max_tokens,
        over_window=stats.over_window,
        seconds=time.perf_counter() - started,
    )
