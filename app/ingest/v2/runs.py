"""V2 index runs: the V2 cores wired to the database, the blob store and the embedding model.

    ctx = V2Context(settings, pool, info, embedder, blobs)
    run = await start_run(ctx, namespace="agent_x", index_version="v2", file_ids=["f1", "f2"])
    await index_file(ctx, run.run_id, "f1")       # from its stored original, else its V1 chunks
    await activate(ctx, run.run_id)               # only once every expected file is staged

A backfill is a run with origin `backfill` (`start_backfill_run`) whose files are each a job of the
queue (`app/jobs/v2.py`): first `survey_file` for every file (its repeated-block fingerprints, so
boilerplate is judged across the whole run before any file is chunked), then `index_file`, and the
file job that finds the run complete activates it (`complete_run`, exactly once). Each step is a plain
async function of the context and ids. Staging a file never touches what `/query_v2` reads: queries
read the active run only, and activation swaps runs in one transaction.

Per file: the original is parsed in the bounded worker (`parse_in_worker`), its boilerplate
fingerprints are counted against the run's other files, then it is chunked to fit the embedding
model (its own tokenizer for the local model; characters against RAG_V2__INDEX__HTTP_WINDOW_CHARS for HTTP
providers), embedded and stored. A document already stored with the same bytes, extractor version
and model is linked instead, and vectors of unchanged texts are reused, unless the run was started
with `force` (then every file is parsed and embedded again). When the provider fails, the chunks are
stored without vectors (the lexical channels still find them) and the document records it;
`reembed_missing` (the self-healing sweep) fills them in later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pickle
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from app.clients.blobs import BlobNotFound, BlobStore
from app.clients.embeddings import Embedder
from app.clients.embeddings.local import local_model_counter
from app.config import Settings
from app.errors import BadRequest, NoExtractableText, NotFound, RagError, UpstreamUnavailable
from app.ingest.chunking import clean_text
from app.ingest.limits import ParseLimits
from app.ingest.loaders import safe_basename
from app.ingest.types import Block, LoadedDocument, Section
from app.ingest.upload import process_temp_dir
from app.ingest.v2.boilerplate import document_fingerprints, repeated_fingerprints
from app.ingest.v2.chunker import ChunkedDocument, ChunkerConfig, ChunkRecord, chunk_document
from app.ingest.v2.metadata import DocumentMetadata, document_metadata
from app.ingest.worker import parse_in_worker
from app.search.context import overlap_length
from app.store import chunks as v1_store
from app.store import v2_index as store
from app.store.db import StoreInfo
from app.store.scope import Scope
from app.text.entities import EntityConfig, EntityExtractor
from app.text.tokens import TokenCounter, pool_windows, window_texts, window_weights
from app.v2_settings import BoilerplateSettings

logger = logging.getLogger(__name__)

# Raise when chunking, entity extraction or the loaders change what an index holds: a new
# extractor version makes the next run parse and embed again instead of linking old documents.
EXTRACTOR_RELEASE = "1"
# Files staged before this many are re-read to count repeated blocks (below it no block can repeat
# often enough, see BoilerplateSettings.min_documents).
_V1_MAX_CHUNKS = 200_000
# a document parsed by a file's survey and not yet chunked is kept this long in the process's own
# temporary folder (its stage step, on another replica or much later, parses it again instead)
PARSE_CACHE_MAX_AGE_S = 3600.0
_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".text")


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


def model_identity(settings: Settings) -> str:
    """The identity under which vectors are reusable (the same as V1's: provider, model, dimensions)."""
    dims = settings.embeddings_dimensions
    return f"{settings.provider}:{settings.model}" + (f"@{dims}" if dims else "")


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
    entities = EntityConfig()
    chunking = ChunkerConfig().model_copy(
        update={"window_tokens": window, "chunk_tokens": chunk_tokens, "overlap_tokens": overlap}
    )
    fingerprint = json.dumps(
        {
            "release": EXTRACTOR_RELEASE,
            "counter": name,
            "window": window,
            "chunking": chunking.model_dump(mode="json"),
            "entities": entities.model_dump(mode="json"),
            "boilerplate": index.boilerplate.model_dump(mode="json"),
        },
        sort_keys=True,
    )
    version = f"v2.{EXTRACTOR_RELEASE}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:12]}"
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


@dataclass
class V2Context:
    """What index runs need: the service's resources, and the profile (loaded on first use)."""

    settings: Settings
    pool: asyncpg.Pool
    info: StoreInfo
    embedder: Embedder
    blobs: BlobStore
    profile_override: IndexProfile | None = None
    # told of every embedding dimension a run stores (the HNSW index task of that dimension)
    on_dimension: Callable[[int], None] | None = None
    _profile: IndexProfile | None = field(default=None, init=False, repr=False)
    _locks: dict[tuple[int, str], asyncio.Lock] = field(default_factory=dict, init=False, repr=False)

    @property
    def profile(self) -> IndexProfile:
        """The index profile (the local tokenizer is loaded on first use, ~0.1 s)."""
        if self._profile is None:
            self._profile = self.profile_override or build_profile(self.settings)
        return self._profile

    @property
    def limits(self) -> ParseLimits:
        """The parsing limits of uploads, for originals too."""
        return ParseLimits.from_settings(self.settings)

    @property
    def enabled_namespaces(self) -> frozenset[str]:
        """RAG_V2_NAMESPACE_IDS."""
        return frozenset(self.settings.v2_namespace_ids)

    @contextlib.asynccontextmanager
    async def file_lock(self, run_id: int, file_id: str) -> AsyncIterator[None]:
        """One staging of a file into a run at a time in this process."""
        key = (run_id, file_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    def parse_cache(self, run_id: int) -> _ParseCache:
        """Documents a survey parsed for run `run_id` in this process, until their stage step."""
        base = process_temp_dir(self.settings.data_dir.resolve() / "tmp")
        return _ParseCache(base / f"v2-run-{run_id}")


@dataclass(frozen=True)
class FileOutcome:
    """What staging one file did."""

    file_id: str
    source: store.DocumentSource
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


@dataclass(frozen=True)
class Derivative:
    """An uploaded text or Markdown file that stands in for a file's original."""

    path: Path
    filename: str
    content_type: str | None
    sha256: str


RunFileNotFound = store.RunFileGone


# --- runs --------------------------------------------------------------------------------------


async def namespace_file_ids(ctx: V2Context, namespace: str, *, limit: int = 1_000_000) -> list[str]:
    """Every file of the namespace (its V1 rows, read through the scope), by id."""
    scope = Scope.of(ctx.info.collection_id, [namespace])
    async with ctx.pool.acquire() as conn:
        return await v1_store.list_file_ids(conn, scope, limit=limit)


async def start_run(
    ctx: V2Context,
    *,
    namespace: str,
    index_version: str | None = None,
    file_ids: Sequence[str] | None = None,
    origin: str = "admin",
    created_by: str | None = None,
    options: dict[str, Any] | None = None,
) -> store.RunRecord:
    """A new running run of `namespace` that must contain `file_ids` (default: all of its files).

    BadRequest when a file id is not a file of the namespace, or when there is no file at all.
    """
    known = await namespace_file_ids(ctx, namespace)
    wanted = list(dict.fromkeys(file_ids)) if file_ids is not None else known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise BadRequest(
            f"{len(unknown)} file id(s) are not files of namespace {namespace}: {shown}. "
            "Upload them first, or leave them out"
        )
    if not wanted:
        raise BadRequest(f"Namespace {namespace} has no files to index; upload files through /embed first")
    profile = ctx.profile
    async with ctx.pool.acquire() as conn:
        run = await store.create_run(
            conn,
            ctx.info.collection_id,
            namespace=namespace,
            index_version=index_version or ctx.settings.v2_index_version,
            extractor_version=profile.extractor_version,
            embedding_model=profile.embedding_model,
            embedding_dim=ctx.embedder.dimensions,
            file_ids=wanted,
            origin=origin,
            created_by=created_by,
            settings={**profile.describe(), **(options or {})},
        )
    logger.info("V2 run %d started for %s (%d files)", run.run_id, namespace, len(wanted))
    return run


class RunNarrower(store.RunError):
    """Activating the run would make the namespace's default answers read fewer of its files."""


async def files_held(ctx: V2Context, run_id: int, namespace_files: set[str]) -> int:
    """How many of the namespace's current files a run holds (files deleted since do not count)."""
    async with ctx.pool.acquire() as conn:
        return sum(1 for f in await store.run_files(conn, run_id) if f.file_id in namespace_files)


async def _refuse_narrower(ctx: V2Context, run_id: int) -> None:
    async with ctx.pool.acquire() as conn:
        run = await store.require_run(conn, ctx.info.collection_id, run_id)
        current = await store.active_run(conn, ctx.info.collection_id, run.namespace)
        states = {f.state for f in await store.run_files(conn, run_id)}
    if current is None or current.run_id == run_id or run.status != "running" or states - {"staged"}:
        return  # nothing to compare with, or the activation is refused for what the run itself lacks
    files = set(await namespace_file_ids(ctx, run.namespace))
    held, current_held = await files_held(ctx, run_id, files), await files_held(ctx, current.run_id, files)
    if held < current_held:
        raise RunNarrower(
            f"Index run {run_id} holds {held} of the {len(files)} files of {run.namespace}, fewer than the "
            f"{current_held} of run {current.run_id} ({current.index_version}), which answers /query_v2 "
            "without index_version now; activated, it would answer those queries instead and refuse what "
            "the other files answer. Activate it with force=true if that is meant"
        )


async def activate(ctx: V2Context, run_id: int, *, force: bool = True) -> store.RunRecord:
    """Make a complete run the active one (the previous one is abandoned), then prune documents.

    Without `force`, a run that holds fewer of the namespace's files than the run answering its
    queries now is refused (RunNarrower): an operator's test run must not become everyone's default.
    """
    if not force:
        await _refuse_narrower(ctx, run_id)
    async with ctx.pool.acquire() as conn:
        run = await store.activate_run(conn, ctx.info.collection_id, run_id)
        pruned = await store.prune_documents(conn, ctx.info.collection_id)
    logger.info(
        "V2 run %d is active for %s (%s); %d documents pruned",
        run_id,
        run.namespace,
        run.index_version,
        pruned,
    )
    return run


async def fail(ctx: V2Context, run_id: int, reason: str) -> store.RunRecord:
    """Mark a running run failed: what queries read does not change."""
    async with ctx.pool.acquire() as conn:
        run = await store.fail_run(conn, ctx.info.collection_id, run_id, reason)
        await store.prune_documents(conn, ctx.info.collection_id)
    logger.info("V2 run %d failed: %s", run_id, reason)
    return run


@dataclass(frozen=True)
class RunStatus:
    """A run with its files and their counts per state."""

    run: store.RunRecord
    counts: dict[str, int]
    files: list[store.RunFileRecord]
    chunks: int


async def run_status(ctx: V2Context, run_id: int) -> RunStatus:
    """The run, every expected file's progress, and how many chunks it holds."""
    async with ctx.pool.acquire() as conn:
        run = await store.require_run(conn, ctx.info.collection_id, run_id)
        files = await store.run_files(conn, run_id)
        chunks, _ = await store.run_stats(conn, run_id)
    counts: dict[str, int] = dict.fromkeys(store.FILE_STATES, 0)
    for item in files:
        counts[item.state] += 1
    return RunStatus(run, counts, files, chunks)


def describe_run(status: RunStatus) -> str:
    """One line of a run's progress."""
    c = status.counts
    return (
        f"run {status.run.run_id} ({status.run.namespace}, {status.run.index_version}): {c['staged']} of "
        f"{status.run.expected_files} files staged, {c['staging']} staging, {c['failed']} failed; "
        f"{status.run.status}"
    )


# --- one file ----------------------------------------------------------------------------------


async def index_file(
    ctx: V2Context, run_id: int, file_id: str, *, derivative: Derivative | None = None
) -> FileOutcome:
    """Stage one expected file into a running (or active) run: link, or parse, chunk, embed, store.

    Failures are recorded on the run's file (state `failed`, with the reason) and raised.
    """
    async with ctx.file_lock(run_id, file_id):
        async with ctx.pool.acquire() as conn:
            run = await store.require_run(conn, ctx.info.collection_id, run_id)
            if run.status not in ("running", "active"):
                raise store.RunStateError(
                    f"Index run {run_id} is {run.status}; files cannot be staged into it"
                )
            if await store.run_file(conn, run_id, file_id) is None:
                raise RunFileNotFound(f"File {file_id} is not one of the files of index run {run_id}")
            await store.start_file(conn, run_id, file_id)
        try:
            cache = ctx.parse_cache(run_id) if derivative is None else None
            return await _stage(ctx, run, file_id, derivative, cache)
        except RagError as exc:
            await _record_failure(ctx, run_id, file_id, exc.detail)
            raise
        except store.RunError as exc:
            await _record_failure(ctx, run_id, file_id, exc.detail)
            raise
        except Exception:
            await _record_failure(ctx, run_id, file_id, "internal error while staging (see the service log)")
            raise


async def _record_failure(ctx: V2Context, run_id: int, file_id: str, reason: str) -> None:
    logger.warning("V2 run %d: staging %s failed: %s", run_id, file_id, reason)
    with contextlib.suppress(Exception):
        async with ctx.pool.acquire() as conn:
            await store.fail_file(conn, run_id, file_id, reason)


@dataclass
class _Source:
    """Where a document's text comes from, and its checksum."""

    source: store.DocumentSource
    filename: str
    checksum: str
    content_type: str | None = None
    blob_key: str | None = None
    path: Path | None = None  # a derivative, or the rebuilt V1 text
    v1_text: str | None = None


def _scope(ctx: V2Context, namespace: str, file_id: str) -> Scope:
    return Scope.of(ctx.info.collection_id, [namespace], file_ids=[file_id])


async def _resolve(
    ctx: V2Context, run: store.RunRecord, file_id: str, derivative: Derivative | None
) -> _Source:
    if derivative is not None:
        return _Source(
            "derivative",
            safe_basename(derivative.filename),
            derivative.sha256,
            derivative.content_type,
            path=derivative.path,
        )
    async with ctx.pool.acquire() as conn:
        entry = await store.catalogue_file(conn, _scope(ctx, run.namespace, file_id), file_id)
    if entry is not None and entry.blob_key and entry.sha256:
        return _Source("original", entry.filename, entry.sha256, entry.content_type, blob_key=entry.blob_key)
    return await _v1_source(ctx, run.namespace, file_id, entry.filename if entry else None)


async def _v1_source(ctx: V2Context, namespace: str, file_id: str, filename: str | None) -> _Source:
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
    return _Source("v1_chunks", safe_basename(name), checksum, "text/plain", v1_text=text)


def _page(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def rebuild_v1_text(chunks: Sequence[tuple[str, int | None]], max_overlap: int) -> str:
    """V1 chunks (text, 0-based page) in order as one text: overlaps removed, a form feed per page.

    Pages keep their numbers (a page without chunks stays an empty page), so the V2 chunks of a PDF
    rebuilt this way carry the original's pages.
    """
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


async def _parse(ctx: V2Context, source: _Source, tmp_dir: Path) -> LoadedDocument:
    """The source parsed in the bounded worker (downloading an original to a temporary file first)."""
    suffix = Path(source.filename).suffix[:16]
    if source.path is not None:
        return await parse_in_worker(
            source.path,
            source.filename,
            source.content_type,
            limits=ctx.limits,
            pdf_extract_images=ctx.settings.pdf_extract_images,
        )
    await asyncio.to_thread(tmp_dir.mkdir, parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(
        prefix="v2-", suffix=suffix if source.v1_text is None else ".txt", dir=tmp_dir
    )
    os.close(handle)
    path = Path(name)
    try:
        if source.v1_text is not None:
            await asyncio.to_thread(path.write_text, source.v1_text, "utf-8")
            parse_name = Path(source.filename).stem + ".txt"
            return await parse_in_worker(path, parse_name, "text/plain", limits=ctx.limits)
        assert source.blob_key is not None
        await ctx.blobs.download(source.blob_key, path)
        return await parse_in_worker(
            path,
            source.filename,
            source.content_type,
            limits=ctx.limits,
            pdf_extract_images=ctx.settings.pdf_extract_images,
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.unlink)


def _repeated(
    policy: BoilerplateSettings, others: Iterable[frozenset[str]], own: frozenset[str]
) -> frozenset[str]:
    return repeated_fingerprints([*others, own], policy)


class ProfileMismatch(store.RunStateError):
    """The run was started by a service with another extractor version or embedding model."""


def _check_profile(ctx: V2Context, run: store.RunRecord) -> None:
    """ProfileMismatch when the run was started by a service with another extractor or model."""
    profile = ctx.profile
    if run.extractor_version != profile.extractor_version or run.embedding_model != profile.embedding_model:
        raise ProfileMismatch(
            f"Index run {run.run_id} was started with extractor {run.extractor_version} and model "
            f"{run.embedding_model}; this service runs {profile.extractor_version} and "
            f"{profile.embedding_model}. Start a new run"
        )


def forced(run: store.RunRecord) -> bool:
    """True for a run started with `force`: nothing of earlier documents is linked or reused."""
    return run.settings.get("force") is True


async def _stage(
    ctx: V2Context,
    run: store.RunRecord,
    file_id: str,
    derivative: Derivative | None,
    cache: _ParseCache | None = None,
) -> FileOutcome:
    started = time.perf_counter()
    profile = ctx.profile
    _check_profile(ctx, run)
    force = forced(run)
    source = await _resolve(ctx, run, file_id, derivative)
    # what the survey of this file parsed in this process, if it was the same bytes
    parsed = await asyncio.to_thread(cache.take, file_id, source.checksum) if cache is not None else None
    async with ctx.pool.acquire() as conn:
        others = await store.run_fingerprints(conn, run.run_id)
        others.pop(file_id, None)
        candidates = (
            []
            if force
            else await store.reusable_documents(
                conn,
                ctx.info.collection_id,
                owner=run.namespace,
                file_id=file_id,
                checksum=source.checksum,
                extractor_version=profile.extractor_version,
                embedding_model=profile.embedding_model,
            )
        )
    for candidate in candidates:
        if candidate.vectors_missing:
            continue  # built while the provider was down: rebuild it (its vectors are reused)
        repeated = _repeated(profile.boilerplate, others.values(), candidate.fingerprints)
        if repeated & candidate.fingerprints == candidate.repeated_removed:
            # the same bytes, extractor and model, and the same blocks removed: the very same chunks
            async with ctx.pool.acquire() as conn, conn.transaction():
                await store.link_file(
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
    tmp_dir = ctx.settings.data_dir.resolve() / "tmp"
    if parsed is None:
        try:
            parsed = await _parse(ctx, source, tmp_dir)
        except BlobNotFound:
            # the catalogue names an original the store lost: rebuild from V1 chunks instead
            logger.warning(
                "V2: the original of %s is missing from the blob store; using its V1 chunks", file_id
            )
            source = await _v1_source(ctx, run.namespace, file_id, source.filename)
            parsed = await _parse(ctx, source, tmp_dir)
    document = clean_document(parsed)
    for warning in document.warnings:
        logger.info("V2 file %s: %s", file_id, warning)
    fingerprints = document_fingerprints(document.blocks, profile.boilerplate)
    repeated = _repeated(profile.boilerplate, others.values(), fingerprints)
    chunked, meta = await asyncio.to_thread(_chunk, profile, document, source, repeated)
    if not chunked.chunks:
        raise NoExtractableText()
    rows, embedded, reused, error = await _embed_rows(
        ctx, run, file_id, source.checksum, chunked.chunks, reuse=not force
    )
    missing = sum(1 for row in rows if row.embedding is None)
    stats = chunked.stats
    row = store.DocumentRow(
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
    )
    async with ctx.pool.acquire() as conn, conn.transaction():
        document_id = await store.insert_document(conn, ctx.info.collection_id, row, rows)
        await store.link_file(
            conn,
            run.run_id,
            file_id,
            document_id=document_id,
            source=source.source,
            linked=False,
            chunks=len(rows),
            fingerprints=fingerprints,
        )
        dims = next((int(r.embedding.shape[0]) for r in rows if r.embedding is not None), None)
        if dims is not None:
            await store.set_run_dimension(conn, run.run_id, dims)
    if dims is not None and ctx.on_dimension is not None:
        ctx.on_dimension(dims)
    outcome = FileOutcome(
        file_id=file_id,
        source=source.source,
        linked=False,
        document_id=document_id,
        chunks=len(rows),
        table_rows=stats.table_rows,
        entities=sum(len(r.entities) for r in rows),
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
    logger.info(
        "V2 run %d: staged %s (%s): %d chunks, %d table rows, %d embedded, %d reused, %d without vector, "
        "%.0f ms",
        run.run_id,
        file_id,
        source.source,
        outcome.chunks,
        outcome.table_rows,
        embedded,
        reused,
        missing,
        outcome.seconds * 1000,
    )
    return outcome


def _chunk(
    profile: IndexProfile, document: LoadedDocument, source: _Source, repeated: frozenset[str]
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


def _row(chunk: ChunkRecord, vector: np.ndarray | None) -> store.ChunkRow:
    return store.ChunkRow(
        ordinal=chunk.ordinal,
        chunk_id=chunk.id,
        kind=chunk.kind,
        page=chunk.page,
        page_label=chunk.page_label,
        section=chunk.section,
        content=chunk.content,
        embed_text=chunk.embed_text,
        search_text=chunk.search_text,
        tokens=chunk.tokens,
        table_caption=chunk.table_caption,
        table_index=chunk.table_index,
        row_index=chunk.row_index,
        row_label=chunk.row_label,
        headers=chunk.headers,
        row_values=chunk.row_values,
        units=chunk.units,
        footnotes=chunk.footnotes,
        whole_table=chunk.whole_table,
        entities=tuple(store.EntityRow(e.kind, e.raw, e.normalized, e.value, e.unit) for e in chunk.entities),
        embedding=vector,
    )


async def embed_texts(embedder: Embedder, profile: IndexProfile, texts: Sequence[str]) -> list[np.ndarray]:
    """One unit vector per text; a text longer than the window is embedded by its pooled windows.

    The chunker keeps every V2 text inside the window, so pooling is the safety net that makes sure
    no text is ever cut silently by the model.
    """
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
    vectors = np.asarray(await embedder.embed_documents(pieces), dtype=np.float32) if pieces else None
    out: list[np.ndarray] = []
    for start, end, weights in spans:
        assert vectors is not None
        if weights is None:
            vector = vectors[start]
            out.append((vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32))
        else:
            out.append(pool_windows(vectors[start:end], weights))
    return out


async def _embed_rows(
    ctx: V2Context,
    run: store.RunRecord,
    file_id: str,
    checksum: str,
    chunks: Sequence[ChunkRecord],
    *,
    reuse: bool = True,
) -> tuple[list[store.ChunkRow], int, int, str | None]:
    """Rows with vectors (reused by text digest, else embedded); without vectors if the provider fails."""
    profile = ctx.profile
    digests = [store.text_digest(c.embed_text) for c in chunks]
    known: dict[str, np.ndarray] = {}
    if reuse:
        async with ctx.pool.acquire() as conn:
            known = await store.reusable_vectors(
                conn,
                ctx.info.collection_id,
                embedding_model=profile.embedding_model,
                checksum=checksum,
                owner=run.namespace,
                file_id=file_id,
                digests=digests,
            )
    missing: dict[str, str] = {}
    for digest, chunk in zip(digests, chunks, strict=True):
        if digest not in known:
            missing.setdefault(digest, chunk.embed_text)
    fresh: dict[str, np.ndarray] = {}
    error: str | None = None
    if missing:
        try:
            vectors = await embed_texts(ctx.embedder, profile, list(missing.values()))
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
    rows = [_row(c, fresh.get(d, known.get(d))) for c, d in zip(chunks, digests, strict=True)]
    reused = sum(1 for d in digests if d in known)
    embedded = len(fresh)
    return rows, embedded, reused, error


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
        todo = await store.chunks_missing_vectors(
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
        done = await store.set_chunk_vectors(conn, fitting)
    if fitting and ctx.on_dimension is not None:
        ctx.on_dimension(int(fitting[0][2].shape[0]))
    last = todo[-1]
    return Reembedded(len(todo), done, len(todo) - len(fitting), (last.document_id, last.ordinal))


# --- backfills and new uploads ------------------------------------------------------------------


async def start_backfill_run(
    ctx: V2Context,
    *,
    namespace: str,
    index_version: str | None = None,
    file_ids: Sequence[str] | None = None,
    activate_when_done: bool = True,
    force: bool = False,
    created_by: str | None = None,
    job_id: int | None = None,
) -> store.RunRecord:
    """A new backfill run of the namespace (default: all of its files); older ones of it give way.

    A backfill run of the same namespace and index version still running is failed ("superseded"):
    the newest request wins, and it links what the older one had staged. `force`: a run that links
    no earlier document and reuses no vector (every file is parsed and embedded again).
    """
    run = await start_run(
        ctx,
        namespace=namespace,
        index_version=index_version,
        file_ids=file_ids,
        origin="backfill",
        created_by=created_by,
        options={"activate": activate_when_done, "force": force, "job_id": job_id},
    )
    async with ctx.pool.acquire() as conn:
        older = await store.list_runs(
            conn, ctx.info.collection_id, namespace=namespace, statuses=["running"], limit=1000
        )
    for other in older:
        same = other.origin == "backfill" and other.index_version == run.index_version
        if other.run_id < run.run_id and same:
            with contextlib.suppress(store.RunStateError):
                await fail(ctx, other.run_id, f"superseded by backfill run {run.run_id}")
    return run


async def start_first_run(
    ctx: V2Context, *, namespace: str, created_by: str | None = None, job_id: int | None = None
) -> store.RunRecord | None:
    """The backfill run a namespace's first upload queues, or None when another run indexes it.

    Unlike an operator's backfill it never supersedes: it gives way to any other running or active
    run of the namespace, even one started a moment later (so a race ends with the operator's run).
    """
    run = await start_run(
        ctx,
        namespace=namespace,
        origin="backfill",
        created_by=created_by,
        options={"activate": True, "force": False, "job_id": job_id},
    )
    async with ctx.pool.acquire() as conn:
        others = [
            r
            for r in await store.open_runs(conn, ctx.info.collection_id, namespace)
            if r.run_id != run.run_id
        ]
    if not others:
        return run
    with contextlib.suppress(store.RunStateError):
        await fail(ctx, run.run_id, f"not needed: run {others[0].run_id} indexes the namespace")
    return None


async def find_backfill_run(ctx: V2Context, namespace: str, job_id: int) -> store.RunRecord | None:
    """The running backfill run that job `job_id` started (its run after a crash finds it again)."""
    async with ctx.pool.acquire() as conn:
        running = await store.list_runs(
            conn, ctx.info.collection_id, namespace=namespace, statuses=["running"], limit=1000
        )
    return next((r for r in running if r.origin == "backfill" and r.settings.get("job_id") == job_id), None)


async def survey_file(ctx: V2Context, run_id: int, file_id: str) -> bool:
    """Record one file's repeated-block fingerprints on a running run, before any file is chunked.

    The parsed document is kept in this process until the file's stage step. False when there was
    nothing to do (the run is not running, the file is staged or surveyed already) or the file
    cannot be read (its stage step records why). Raises when the blob store or the database is away.
    """
    async with ctx.pool.acquire() as conn:
        run = await store.require_run(conn, ctx.info.collection_id, run_id)
        entry = await store.run_file(conn, run_id, file_id)
    if run.status != "running" or entry is None or entry.state == "staged" or entry.surveyed:
        return False
    cache = ctx.parse_cache(run_id)
    await asyncio.to_thread(cache.prune, PARSE_CACHE_MAX_AGE_S)
    try:
        _check_profile(ctx, run)
        source = await _resolve(ctx, run, file_id, None)
        reusable: list[store.ReusableDocument] = []
        if not forced(run):
            async with ctx.pool.acquire() as conn:
                reusable = await store.reusable_documents(
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
            try:
                raw = await _parse(ctx, source, tmp_dir)
            except BlobNotFound:
                # the store lost the original: staging will use the V1 chunks, so does the survey
                source = await _v1_source(ctx, run.namespace, file_id, source.filename)
                raw = await _parse(ctx, source, tmp_dir)
            parsed = clean_document(raw)
            fingerprints = document_fingerprints(parsed.blocks, ctx.profile.boilerplate)
            await asyncio.to_thread(cache.put, file_id, source.checksum, parsed)
    except UpstreamUnavailable:
        raise  # the blob store is away: the survey runs again
    except (RagError, store.RunError) as exc:
        logger.info("V2 run %d: %s cannot be read (%s)", run_id, file_id, exc.detail)
        return False
    async with ctx.pool.acquire() as conn:
        await store.set_fingerprints(conn, run_id, file_id, fingerprints)
    return True


async def complete_run(ctx: V2Context, run_id: int) -> store.RunRecord | None:
    """Activate a backfill run once every file is staged; the run when this call activated it.

    Called after every file of the run is staged, by whichever job or replica: the activation
    itself re-checks the run under its row lock, so exactly one caller activates it and the others
    get None. Runs started without `activate` (and runs of `/v2/runs`) are left running.
    """
    async with ctx.pool.acquire() as conn:
        run = await store.get_run(conn, ctx.info.collection_id, run_id)
        if run is None or run.status != "running" or run.origin != "backfill":
            return None
        if run.settings.get("activate") is not True:
            return None
        counts = await store.run_file_counts(conn, run_id)
    if counts["staged"] != run.expected_files:
        return None
    try:
        active = await activate(ctx, run_id)
    except (store.RunIncomplete, store.RunStateError):
        return None  # a file arrived meanwhile, or another job activated it first
    await asyncio.to_thread(ctx.parse_cache(run_id).clear)
    return active


@dataclass(frozen=True)
class UploadStaging:
    """What staging a new upload did: the runs it was staged into, and those that refused it."""

    staged: list[int]
    failed: dict[int, RagError | store.RunError]
    activated: list[int]
    # the namespace had no running or active run at all: nothing could take the file
    no_run: bool = False


async def stage_upload(ctx: V2Context, file_id: str, owner: str) -> UploadStaging:
    """Stage a new or replaced file into every running and active run of its namespace.

    A backfill run that this file was the last one missing from is activated.
    """
    async with ctx.pool.acquire() as conn:
        runs = await store.open_runs(conn, ctx.info.collection_id, owner)
        for run in runs:
            await store.add_run_file(conn, run.run_id, file_id)
    if not runs:
        return UploadStaging([], {}, [], no_run=True)
    staged: list[int] = []
    failed: dict[int, RagError | store.RunError] = {}
    activated: list[int] = []
    for run in runs:
        try:
            await index_file(ctx, run.run_id, file_id)
        except ProfileMismatch as exc:
            failed[run.run_id] = exc  # another extractor or model: only a new run can take the file
            continue
        except (store.RunStateError, store.RunFileGone):
            continue  # the run was failed or abandoned, or the file deleted, meanwhile
        except (RagError, store.RunError) as exc:
            logger.warning(
                "V2: could not stage new upload %s into run %d: %s",
                file_id,
                run.run_id,
                getattr(exc, "detail", exc),
            )
            failed[run.run_id] = exc
            continue
        staged.append(run.run_id)
        if run.status == "running" and await complete_run(ctx, run.run_id) is not None:
            activated.append(run.run_id)
    if staged:
        async with ctx.pool.acquire() as conn:
            await store.prune_documents(conn, ctx.info.collection_id)  # the replaced version
    return UploadStaging(staged, failed, activated)


_ALLOWED_PICKLES = {
    ("app.ingest.types", "LoadedDocument"): LoadedDocument,
    ("app.ingest.types", "Section"): Section,
    ("app.ingest.types", "Block"): Block,
}


class _DocumentUnpickler(pickle.Unpickler):
    """Reads back only the document model (the cache holds our own pickles; still, nothing else)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_PICKLES[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}") from None


class _ParseCache:
    """Documents parsed by a survey, kept on disk until they are chunked (parsed once, not twice).

    Keyed by file id and checksum: a file replaced between its survey and its stage step is parsed
    again. The folder is under this process's own temporary folder, removed with it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, file_id: str, checksum: str) -> Path:
        key = f"{file_id}\x1f{checksum}".encode("utf-8", "surrogatepass")
        return self.folder / (hashlib.sha256(key).hexdigest() + ".pickle")

    def put(self, file_id: str, checksum: str, document: LoadedDocument) -> None:
        """Keep a parsed document."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._path(file_id, checksum).open("wb") as handle:
            pickle.dump(document, handle, protocol=pickle.HIGHEST_PROTOCOL)

    def take(self, file_id: str, checksum: str) -> LoadedDocument | None:
        """The parsed document, removed from the cache; None when it was not kept."""
        path = self._path(file_id, checksum)
        try:
            with path.open("rb") as handle:
                document = _DocumentUnpickler(handle).load()
        except (OSError, pickle.UnpicklingError, EOFError):
            return None
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return document if isinstance(document, LoadedDocument) else None

    def prune(self, max_age_s: float) -> None:
        """Remove documents of every run kept longer than `max_age_s` (their stage step ran elsewhere)."""
        now = time.time()
        for folder in self.folder.parent.glob("v2-run-*"):
            for item in folder.glob("*.pickle"):
                with contextlib.suppress(OSError):
                    if now - item.stat().st_mtime > max_age_s:
                        item.unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty

    def clear(self) -> None:
        """Remove whatever is left."""
        if self.folder.is_dir():
            for item in self.folder.glob("*.pickle"):
                with contextlib.suppress(OSError):
                    item.unlink()
            with contextlib.suppress(OSError):
                self.folder.rmdir()
