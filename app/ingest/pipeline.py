"""Ingestion: load → chunk → embed → store, all-or-nothing per file.

Nothing is visible until the final transaction commits: the original goes to the blob store under
its SHA-256 first (idempotent), then one transaction swaps the file's chunks and catalogue row.
Any failure before that leaves the previous version intact and searchable. Chunks whose text did
not change keep their vectors (same digest, same model: no second embedding call).

One parse feeds every index: a `DerivedIndex` (evidence search, `app/ingest/derived.py`) that
wants the upload's owner prepares its part from the same parsed document, before the V1 chunks are
embedded, and writes it inside the same transaction (under a savepoint: its failure never fails the
upload). Ingestion reports its own results: every `StoredListener` (V1's search statistics) hears of
each stored file once the commit is done, and every derived index deletes its rows of deleted files
in the delete's transaction. No caller of `ingest` or `delete` has anything left to tell anyone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import numpy as np

from app import metrics
from app.clients.blobs import BlobStore, blob_key
from app.clients.embeddings import Embedder, KnowsStoredDimensions, model_identity, reporting_batches
from app.config import Settings
from app.errors import ConfigError, NoExtractableText, PayloadTooLarge, RagError
from app.ingest.checkpointed import CHECKPOINT_BATCH, CheckpointedEmbedding
from app.ingest.chunking import clean_text, md5_digest, split_sections
from app.ingest.contextual import Contextualizer, log_situated, with_context
from app.ingest.derived import DerivedIndex, DerivedWork, UploadDraft, V1Chunk
from app.ingest.limits import ParseLimits
from app.ingest.loaders import safe_basename
from app.ingest.parse_cache import parse_cache, parse_remembered
from app.ingest.progress import IngestProgress, Report
from app.ingest.types import Chunk, LoadedDocument, Section
from app.ingest.worker import start_worker_server
from app.store import chunks as store
from app.store.db import StoreInfo
from app.store.ids import uuid7_batch
from app.store.scope import Scope

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedOutcome:
    """What an ingest stored: counts, and the catalogue row (for the search statistics)."""

    file_id: str
    filename: str
    chunk_count: int
    embedded: int
    reused: int
    record: store.FileRecord
    # 1-based pages whose text OCR read, and pages that show a picture but gave no text
    ocr_pages: tuple[int, ...] = ()
    empty_pages: tuple[int, ...] = ()
    known_type: bool = True
    # what each derived index (by name) did with the upload: searchable now, or queued, and why
    derived: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Parsed:
    """What an ingest keeps of the parsed document once it is chunked."""

    content_type: str
    pages: tuple[tuple[int, ...], tuple[int, ...]]  # OCR-read pages, pages left without text


@dataclass(frozen=True)
class SourceFile:
    """A file on local disk to ingest, with what we know about it."""

    path: Path
    filename: str
    content_type: str | None
    size: int
    sha256: str


def chunk_metadata(chunk: Chunk, *, file_id: str, owner: str, source: str, text: str) -> dict[str, Any]:
    """rag_api's metadata for one chunk: file_id, user_id, digest, then the loader's keys."""
    meta: dict[str, Any] = {"file_id": file_id, "user_id": owner, "digest": md5_digest(text)}
    meta["source"] = source
    if chunk.page is not None:
        meta["page"] = chunk.page
    for key, value in chunk.metadata.items():
        # the loader may not override identity keys: they are what authorisation reads
        if key not in ("file_id", "user_id", "digest"):
            meta.setdefault(key, value)
    return meta


class StoredListener(Protocol):
    """Told of every file an ingest stored, after its commit (it must never raise: the upload succeeded)."""

    async def file_stored(self, record: store.FileRecord) -> None:
        """`record` is the catalogue row the ingest committed."""


class IngestService:
    """Turns uploaded files into stored, searchable chunks."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        info: StoreInfo,
        embedder: Embedder,
        blobs: BlobStore,
        *,
        listeners: Sequence[StoredListener] = (),
        derived: Sequence[DerivedIndex] = (),
        contextualizer: Contextualizer | None = None,
    ) -> None:
        if settings.contextual_chunking_enabled and contextualizer is None:
            # the model identity promises situated chunks: embedding them raw would break that promise
            raise ConfigError("CONTEXTUAL_CHUNKING_ENABLED=true, but ingestion was built without it")
        self.settings = settings
        self.pool = pool
        self.info = info
        self.embedder = embedder
        self.blobs = blobs
        self.model_id = model_identity(settings)
        # vectors of an upload that has not committed yet, kept batch by batch for its next attempt
        self.checkpoints = CheckpointedEmbedding(
            pool, info.collection_id, self.model_id, batch=settings.embedding_batch_size or CHECKPOINT_BATCH
        )
        # Parsing runs in a worker process per upload (memory and time limits); chunking is CPU
        # work in threads. The semaphore bounds whole ingests so a burst of uploads cannot hold
        # dozens of parsed documents in memory at once.
        self._executor = ThreadPoolExecutor(
            max_workers=settings.ingest_concurrency, thread_name_prefix="ingest"
        )
        self._slots = asyncio.Semaphore(settings.ingest_concurrency)
        self._limits = ParseLimits.from_settings(settings)
        self._parsed = parse_cache(settings.data_dir)
        self.listeners = tuple(listeners)  # told of every stored file, after its commit
        self.derived = tuple(derived)  # prepared with each upload of an owner they want, written in it
        # CONTEXTUAL_CHUNKING_ENABLED: a sentence situating each new chunk goes before its embedded text
        self.contextualizer = contextualizer
        start_worker_server()

    def close(self) -> None:
        """Stop the parsing threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def load(self, source: SourceFile) -> LoadedDocument:
        """Parse a file into text sections and blocks, in a worker process bounded by PARSE_* limits."""
        return await parse_remembered(
            self._parsed,
            source.sha256,
            source.path,
            source.filename,
            source.content_type,
            limits=self._limits,
            pdf_extract_images=self.settings.pdf_extract_images,
        )

    async def extract_text(self, source: SourceFile) -> str:
        """The file's text, as `/text` returns it; nothing is stored."""
        async with self._slots:
            doc = await self.load(source)
        return clean_text(doc.text)

    async def ingest(
        self,
        source: SourceFile,
        *,
        file_id: str,
        owner: str,
        uploader: str,
        storage_metadata: Mapping[str, Any] | None = None,
        progress: Report | None = None,
    ) -> EmbedOutcome:
        """Store `source` as file `file_id` of `owner`, replacing any previous version atomically.

        `progress` (a job's) is told each stage and the chunks embedded so far; without it, an ingest
        longer than LOG_EVERY_S logs where it is.
        """
        started = time.perf_counter()
        tracker = IngestProgress(f"Ingest of file {file_id}", report=progress)
        tracker.stage("waiting for an ingest slot")
        name = safe_basename(source.filename)
        derived = [index for index in self.derived if index.wants(owner)]
        async with tracker.logged(enabled=progress is None), self._slots:
            texts, metas, parsed, document = await self._parse_and_chunk(
                source, tracker, file_id=file_id, owner=owner, source_name=name, keep=bool(derived)
            )
            works: list[tuple[DerivedIndex, DerivedWork]] = []
            if document is not None:
                draft = UploadDraft(file_id, owner, uploader, name, source.content_type, source.sha256,
                                    blob_key(source.sha256), document)  # fmt: skip
                works = await self._prepare_derived(derived, draft, tracker)
                del draft, document  # its blocks are as much text again: not held while V1 embeds
            loaded_at = time.perf_counter()
            tracker.stage("embedding", 0, len(texts))
            # one embedding pass: V1 chunks made of what a derived index embedded are not embedded again
            v1_chunks = _v1_chunks(texts, metas) if works else []
            provided = self._provided_vectors(works, v1_chunks)
            vectors, embedded, reused, spent = await self._vectors_for(
                file_id, owner, texts, metas, tracker, title=name, provided=provided
            )
            for _, work in works:
                await work.v1_embedded(v1_chunks, list(vectors))
            embedded_at = time.perf_counter()
            tracker.stage("storing", len(texts), len(texts))
            content_type = source.content_type or parsed.content_type
            dim = int(vectors.shape[1]) if len(texts) else self.embedder.dimensions
            record = _file_record(
                source, file_id, owner, uploader, name, content_type, len(texts), self.model_id, dim
            )
            record = dataclasses.replace(record, ocr_pages=parsed.pages[0], empty_pages=parsed.pages[1])
            if storage_metadata:
                record = dataclasses.replace(record, storage_metadata=dict(storage_metadata))
            ids = uuid7_batch(len(texts))
            chunks = [store.NewChunk(ids[i], vectors[i], texts[i], metas[i]) for i in range(len(texts))]
            written = await self._store(record, chunks, source.path, spent, [w for _, w in works])
        for (_, work), ok in zip(works, written, strict=True):
            await work.written(ok=ok)
        for listener in self.listeners:
            await listener.file_stored(record)
        done = time.perf_counter()
        metrics.observe_ingest(loaded_at - started, embedded_at - loaded_at, done - embedded_at)
        logger.info(
            "Ingested file %s: %d chunks (%d embedded, %d reused), load %.0f ms, embed %.0f ms, "
            "total %.0f ms",
            *(file_id, len(chunks), embedded, reused),
            *((loaded_at - started) * 1000, (embedded_at - loaded_at) * 1000, (done - started) * 1000),
        )
        derived_states = {index.name: work.summary() for index, work in works}
        return EmbedOutcome(
            file_id,
            source.filename,
            len(chunks),
            embedded,
            reused,
            record,
            *parsed.pages,
            derived=derived_states,
        )

    async def _store(
        self,
        record: store.FileRecord,
        chunks: list[store.NewChunk],
        path: Path,
        spent: Sequence[str],
        derived: Sequence[DerivedWork],
    ) -> list[bool]:
        """Keep the original, commit the file's rows (and the derived parts), note what it changed."""
        key, content_type = record.blob_key or blob_key(record.sha256 or ""), record.content_type or ""
        await self.blobs.put_file(key, path, content_type=content_type)
        previous, written = await self._commit(record, chunks, key, path, content_type, spent, derived)
        if record.embedding_dim:
            self._note_dimension(record.embedding_dim)
        if previous:
            await self._remove_if_unreferenced(previous)
        return written

    def _provided_vectors(
        self, works: Sequence[tuple[DerivedIndex, DerivedWork]], chunks: list[V1Chunk]
    ) -> list[np.ndarray | None]:
        """V1 chunks' vectors the derived parts made of theirs (None where a chunk must be embedded).

        Not with contextual chunking: V1 embeds each chunk behind its own situating sentence.
        """
        if not works or self.contextualizer is not None:
            return []
        out: list[np.ndarray | None] = [None] * len(chunks)
        for _, work in works:
            for i, vector in enumerate(work.v1_vectors(chunks)):
                if out[i] is None and vector is not None:
                    out[i] = vector
        return out

    async def _prepare_derived(
        self, derived: Sequence[DerivedIndex], draft: UploadDraft, tracker: IngestProgress
    ) -> list[tuple[DerivedIndex, DerivedWork]]:
        """Each derived index's part of the upload, from its parse (reported as stages of the upload)."""
        works: list[tuple[DerivedIndex, DerivedWork]] = []
        for index in derived:
            work = await index.prepare(draft, tracker.stage)
            if work is not None:
                works.append((index, work))
        return works

    async def _parse_and_chunk(
        self,
        source: SourceFile,
        tracker: IngestProgress,
        *,
        file_id: str,
        owner: str,
        source_name: str,
        keep: bool = False,
    ) -> tuple[list[str], list[dict[str, Any]], _Parsed, LoadedDocument | None]:
        """Parse, then chunk: the chunk texts and metadata, what the rest of the ingest needs, and the
        parsed document itself when `keep` (a derived index prepares its part from it).

        Otherwise only the sections are kept past the parse: the document's blocks (the evidence
        index's structure, as much text again) and, once chunked, the sections themselves are freed
        before embedding, so a large text is held about once while it is embedded and stored.
        """
        tracker.stage("parsing")
        doc = await self.load(source)
        parsed = _Parsed(doc.content_type, _pages(doc))
        sections, warnings = doc.sections, doc.warnings
        kept = doc if keep else None
        del doc
        tracker.stage("chunking")
        texts, metas = await self._chunks(
            sections, warnings, file_id=file_id, owner=owner, source=source_name
        )
        return texts, metas, parsed, kept

    async def _chunks(
        self, sections: list[Section], warnings: list[str], *, file_id: str, owner: str, source: str
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """The sections' chunk texts and metadata, refused when too many or none hold text."""
        for warning in warnings:
            # the loader's own sentences (pages read by OCR or left without text, a misnamed file)
            logger.warning("File %s: %s", file_id, warning)
        loop = asyncio.get_running_loop()
        pieces = await loop.run_in_executor(
            self._executor,
            functools.partial(
                split_sections, sections, self.settings.chunk_size, self.settings.chunk_overlap
            ),
        )
        if len(pieces) > self.settings.max_chunks_per_file:
            raise PayloadTooLarge(
                f"The file yields {len(pieces)} chunks, more than MAX_CHUNKS_PER_FILE "
                f"({self.settings.max_chunks_per_file}); split the file or raise the limit"
            )
        texts, metas = _chunk_texts(pieces, file_id=file_id, owner=owner, source=source)
        if not texts:
            # nothing to search: refuse before embedding, storing the original or touching the
            # file's previous version (which stays as it was)
            logger.warning("File %s: no extractable text; nothing stored", file_id)
            raise NoExtractableText()
        return texts, metas

    async def _commit(
        self,
        record: store.FileRecord,
        chunks: list[store.NewChunk],
        key: str,
        path: Path,
        content_type: str,
        spent: Sequence[str] = (),
        derived: Sequence[DerivedWork] = (),
    ) -> tuple[str | None, list[bool]]:
        """Replace the file's rows in one transaction: (the previous version's blob key, and for
        each derived part whether it was written with them).

        The embedding checkpoints of `spent` (the texts embedded for it) go in the same transaction.
        Each derived part is written under a savepoint: one that fails is rolled back alone, the
        file's V1 rows still commit, and the part is told so (it catches up on its own).
        """
        written: list[bool] = []
        async with self.pool.acquire() as conn, conn.transaction():
            # shared: other uploads of the same content go on; a removal of it waits for our commit
            await store.lock_blob(conn, key, shared=True)
            if not await self.blobs.exists(key):
                # a delete of another file with this content removed it after our put: store again
                await self.blobs.put_file(key, path, content_type=content_type)
            previous = await store.replace_file(conn, self.info, record, chunks)
            await self.checkpoints.consume(conn, spent)
            for part in derived:
                try:
                    async with conn.transaction():
                        await part.write(conn)
                except (asyncpg.PostgresError, OSError, RagError) as exc:
                    logger.error(
                        # the type only: a database error can quote the rows it refused
                        "File %s: a derived index could not store its part (%s)",
                        record.file_id,
                        type(exc).__name__,
                    )
                    written.append(False)
                else:
                    written.append(True)
        return previous, written

    def _note_dimension(self, dim: int) -> None:
        """Committed: the dimension of this model's stored vectors, known from now on without a read."""
        if isinstance(self.embedder, KnowsStoredDimensions):
            self.embedder.note_stored_dimension(dim)

    async def _vectors_for(
        self,
        file_id: str,
        owner: str,
        texts: list[str],
        metas: list[dict[str, Any]],
        tracker: IngestProgress | None = None,
        *,
        title: str = "",
        provided: Sequence[np.ndarray | None] = (),
    ) -> tuple[np.ndarray, int, int, list[str]]:
        """Vectors for `texts`, reusing those of unchanged chunks; (vectors, embedded, reused, the texts
        embedded: their checkpoints go with the commit).

        `provided[i]`, when set, is chunk i's vector made of a derived index's vectors of the same
        text (counted as reused). With contextual chunking each new chunk is embedded behind its
        situating sentence (the stored text stays the chunk's own); reused vectors were made under
        the same identity, so they were situated too.
        """
        if not texts:
            return np.zeros((0, self.embedder.dimensions or 0), dtype=np.float32), 0, 0, []
        async with self.pool.acquire() as conn:
            known = await store.existing_vectors(
                conn, self.info, file_id=file_id, owner=owner, model=self.model_id
            )
        digests = [m["digest"] for m in metas]
        for digest, vector in zip(digests, provided, strict=False):
            if vector is not None and digest not in known:
                known[digest] = vector
        # each distinct new text is embedded once, even if it repeats within the file
        missing: dict[str, int] = {}
        for index, digest in enumerate(digests):
            if digest not in known and digest not in missing:
                missing[digest] = index
        missing_texts = await self._situated(file_id, title, texts, list(missing.values()))
        result = np.zeros((0, 0), dtype=np.float32)
        if missing:
            with reporting_batches(_chunk_counter(tracker, len(texts), len(texts) - len(missing))):
                # checkpointed batch by batch: an attempt that stops before its commit loses none
                result, _ = await self.checkpoints.embed(self.embedder, missing_texts)
        dims = ({result.shape[1]} if missing else set()) | {v.shape[0] for v in known.values()}
        if len(dims) > 1:
            # the model changed dimension under the same name: never mix, embed everything anew
            situated = dict(zip(missing.values(), missing_texts, strict=True))
            rest = [i for i in range(len(texts)) if i not in situated]
            situated.update(zip(rest, await self._situated(file_id, title, texts, rest), strict=True))
            with reporting_batches(_chunk_counter(tracker, len(texts), 0)):
                result = await self.embedder.embed_documents([situated[i] for i in range(len(texts))])
            return np.asarray(result, dtype=np.float32), len(texts), 0, missing_texts
        if len(missing) == len(texts):
            # every chunk new and distinct (a new file): as embedded
            return result, len(texts), 0, missing_texts
        return (*_assemble(digests, result, list(missing), known), missing_texts)

    async def _situated(self, file_id: str, title: str, texts: list[str], indexes: list[int]) -> list[str]:
        """What to embed for `texts[i]` of each `i` in `indexes`: situated when contextual chunking is on."""
        if self.contextualizer is None or not indexes:
            return [texts[i] for i in indexes]
        done = await self.contextualizer.situate(title, texts, indexes)
        log_situated(f"File {file_id}", done)
        return [with_context(s, texts[i]) for s, i in zip(done.sentences, indexes, strict=True)]

    async def _remove_if_unreferenced(self, key: str) -> None:
        """Remove an original once no catalogue row refers to it, decided under its lock.

        The lock is the one an upload of the same content holds until its row commits, so an upload
        racing this removal either commits first (the original stays) or stores it again after.
        """
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await store.lock_blob(conn, key, shared=False)
                if await store.blob_still_referenced(conn, key):
                    return
                await self.blobs.delete(key)
        except Exception:  # the file rows are already gone; a leftover blob is only wasted space
            logger.warning("Could not delete unreferenced blob %s", key, exc_info=False)

    async def delete(self, scope: Scope) -> set[str]:
        """Delete the scope's files (chunks, catalogue rows, unreferenced originals); return those found."""
        async with self.pool.acquire() as conn, conn.transaction():
            # derived rows first: the scope's uploader rule reads the catalogue rows the V1 delete removes
            for index in self.derived:
                await index.delete_files(conn, scope)
            result = await store.delete_files(conn, scope)
        for key in result.blob_keys:
            await self._remove_if_unreferenced(key)
        return result.found


def _v1_chunks(texts: list[str], metas: list[dict[str, Any]]) -> list[V1Chunk]:
    """The V1 chunks of an upload as a derived index reads them: text and 0-based page."""
    pages = [m.get("page") for m in metas]
    return [
        V1Chunk(text, page if isinstance(page, int) else None)
        for text, page in zip(texts, pages, strict=True)
    ]


def _file_record(
    source: SourceFile,
    file_id: str,
    owner: str,
    uploader: str,
    filename: str,
    content_type: str,
    chunk_count: int,
    model: str,
    dim: int | None,
) -> store.FileRecord:
    """The catalogue row of an upload about to be stored (its storage metadata apart)."""
    return store.FileRecord(
        file_id=file_id,
        owner=owner,
        uploader=uploader,
        filename=filename,
        content_type=content_type,
        size_bytes=source.size,
        sha256=source.sha256,
        blob_key=blob_key(source.sha256),
        chunk_count=chunk_count,
        embedding_model=model,
        embedding_dim=dim,
    )


def _assemble(
    digests: list[str], fresh: np.ndarray, fresh_digests: list[str], known: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, int, int]:
    """One vector per digest, from the fresh rows or the known vectors, filled into a single matrix."""
    row_of = {digest: row for row, digest in enumerate(fresh_digests)}
    dim = fresh.shape[1] if fresh.size else next(iter(known.values())).shape[0]
    vectors = np.empty((len(digests), dim), dtype=np.float32)
    reused = 0
    for index, digest in enumerate(digests):
        row = row_of.get(digest)
        if row is None:
            vectors[index] = known[digest]
            reused += 1
        else:
            vectors[index] = fresh[row]
    return vectors, len(digests) - reused, reused


def _pages(doc: LoadedDocument) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The 1-based pages OCR read, and those that show a picture but gave no text."""
    return tuple(sorted(p + 1 for p in doc.ocr_pages)), tuple(p + 1 for p in doc.unreadable_pages)


def _chunk_texts(
    pieces: Sequence[Any], *, file_id: str, owner: str, source: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """The cleaned text and rag_api metadata of every piece that holds any text."""
    texts: list[str] = []
    metas: list[dict[str, Any]] = []
    for piece in pieces:
        text = clean_text(piece.text)
        if text.strip():
            texts.append(text)
            metas.append(chunk_metadata(piece, file_id=file_id, owner=owner, source=source, text=text))
    return texts, metas


def _chunk_counter(tracker: IngestProgress | None, total: int, ready: int) -> Callable[[int, int], None]:
    """The embedder's batch callback, as `tracker.chunks`: `ready` chunks had a vector before the call.

    The embedder counts the texts it sends (windows of long texts, each distinct text once), so the
    chunks are estimated in proportion: all of them when the call ends.
    """
    sent = 0

    def batch(count: int, of: int) -> None:
        nonlocal sent
        sent += count
        if tracker is not None and of:
            tracker.chunks(ready + round((total - ready) * min(sent, of) / of), total)

    return batch
