"""What every embedder shares: the protocol, vector checks, batching and the query cache."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app import metrics
from app.errors import EmbeddingProviderError

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into float32 vectors; one instance per process, shared by every request."""

    provider: str
    model: str

    @property
    def dimensions(self) -> int | None:
        """EMBEDDINGS_DIMENSIONS when set, else the dimension learned from the first reply."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of `texts`, shape (n, d), float32, in input order."""
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """Vector of one query, shape (d,), float32, from an LRU cache when seen before."""
        ...

    async def aclose(self) -> None:
        """Release the clients and threads the embedder owns."""
        ...


@runtime_checkable
class KnowsStoredDimensions(Protocol):
    """An embedder that judges replies by the dimension of the vectors already stored (`BaseEmbedder`)."""

    @property
    def trusted_dimensions(self) -> int | None:
        """The dimension every reply must have, or None while nothing decides it."""
        ...

    def use_stored_dimensions(
        self, source: DimensionSource, known: int | None = None, *, looked_up: bool = False
    ) -> None:
        """Judge replies by the stored vectors' dimension, read from `source`."""
        ...

    def note_stored_dimension(self, dims: int) -> None:
        """This process just stored vectors of `dims` for this model."""
        ...


@runtime_checkable
class WarmsUp(Protocol):
    """An embedder with something to load before its first call (the offline model)."""

    async def warmup(self) -> None:
        """Load it (off the event loop); raises ConfigError when it is unusable."""
        ...


def plan_batches(texts: Sequence[str], max_count: int, max_chars: int) -> list[tuple[int, int]]:
    """Split `texts` into contiguous [start, end) slices of at most `max_count` texts and `max_chars`.

    A text longer than `max_chars` on its own still gets a slice (the provider truncates or rejects it).
    """
    if max_count < 1 or max_chars < 1:
        raise ValueError("max_count and max_chars must be positive")
    slices: list[tuple[int, int]] = []
    start, chars = 0, 0
    for i, text in enumerate(texts):
        size = len(text)
        if i > start and (i - start >= max_count or chars + size > max_chars):
            slices.append((start, i))
            start, chars = i, 0
        chars += size
    if start < len(texts):
        slices.append((start, len(texts)))
    return slices


# Told (texts just embedded, texts of the whole call) as each batch of an `embed_documents` call
# finishes: how an ingest reports its progress. A context variable, so that concurrent calls each
# report to their own caller (tasks the call starts inherit it).
BatchProgress = Callable[[int, int], None]
_batch_progress: ContextVar[BatchProgress | None] = ContextVar("ragoverlay_batch_progress", default=None)


@contextlib.contextmanager
def reporting_batches(callback: BatchProgress) -> Iterator[None]:
    """Within this block, `callback(done, of)` is called as each batch of an embedding call finishes."""
    token = _batch_progress.set(callback)
    try:
        yield
    finally:
        _batch_progress.reset(token)


def batch_progress() -> BatchProgress | None:
    """The callback `reporting_batches` installed for the current task, if any."""
    return _batch_progress.get()


def batch_done(count: int, of: int) -> None:
    """An embedder finished a batch of `count` texts of a call of `of` (its caller may be told)."""
    callback = _batch_progress.get()
    if callback is not None:
        callback(count, of)


async def gather_or_cancel(aws: Sequence[Awaitable[Any]]) -> list[Any]:
    """Like `asyncio.gather`, but the first failure cancels the rest (no orphaned requests)."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class QueryCache:
    """A small LRU of query vectors, stored read-only so that no caller can corrupt an entry."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        """The cached vector for `key`, refreshed as most recently used, or None."""
        vector = self._items.get(key)
        if vector is not None:
            self._items.move_to_end(key)
        return vector

    def put(self, key: tuple[str, str], vector: np.ndarray) -> None:
        """Store `vector`, evicting the least recently used entries beyond the limit."""
        if self.max_entries <= 0:
            return
        vector.flags.writeable = False
        self._items[key] = vector
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Forget every entry."""
        self._items.clear()


# Where the dimension of the vectors already stored for this model comes from (None: nothing stored).
DimensionSource = Callable[[], Awaitable[int | None]]
# after a failed look-up (database down), ask again no sooner than this
DIMENSION_LOOKUP_RETRY_S = 5.0
# "nothing stored for this model" is remembered this long: files this process stores tell the
# embedder at once (`note_stored_dimension`); only another replica's first file is learned this late
DIMENSION_UNKNOWN_RECHECK_S = 300.0


def _clock() -> float:
    """The clock of the dimension look-ups (its own name, so tests can move it alone)."""
    return time.monotonic()


class BaseEmbedder:
    """Shared behaviour: the empty case, vector checks, dimension learning and the query cache.

    Which dimension is right is decided before any reply is trusted: EMBEDDINGS_DIMENSIONS when
    set, else the model's own (the local model's 384), else the dimension of the vectors already
    stored for this model (`use_stored_dimensions`: read at start-up, then told by every ingest
    that stores a file, `note_stored_dimension`). The answer is kept for the process: "nothing
    stored" too, asked again at most every `DIMENSION_UNKNOWN_RECHECK_S` (another replica may store
    the first file), never per request. A reply of another dimension is refused (502) and changes
    nothing, so one wrong reply cannot poison the replies after it. With nothing configured and
    nothing stored there is nothing to protect: replies are accepted as they come (the first upload
    that commits then fixes the dimension).
    """

    provider: str
    model: str
    # Name used in error details ("The embedding provider ..." vs "The local embedding model ...").
    _who: str = "The embedding provider"
    # The dimension the model always has, when the model is ours (None: the provider decides).
    _model_dims: int | None = None

    def __init__(self, *, provider: str, model: str, dimensions: int | None, cache_size: int) -> None:
        self.provider = provider
        self.model = model
        self._configured_dims = dimensions
        self._stored_dims: int | None = None
        self._learned_dims: int | None = None  # the last reply's, for information only
        self._dimension_source: DimensionSource | None = None
        self._next_lookup = 0.0
        self._cache = QueryCache(cache_size)
        self._inflight: dict[tuple[str, str], asyncio.Future[np.ndarray]] = {}

    @property
    def dimensions(self) -> int | None:
        """EMBEDDINGS_DIMENSIONS, else the model's, else the stored vectors', else the last reply's."""
        return self._configured_dims or self._model_dims or self._stored_dims or self._learned_dims

    @property
    def trusted_dimensions(self) -> int | None:
        """The dimension every reply must have (configured, the model's or stored), or None when unknown."""
        return self._configured_dims or self._model_dims or self._stored_dims

    def use_stored_dimensions(
        self, source: DimensionSource, known: int | None = None, *, looked_up: bool = False
    ) -> None:
        """Judge replies by the stored vectors' dimension, read from `source` once.

        `looked_up`: `known` is what `source` said just now (None: nothing stored), so it is not
        asked again before `DIMENSION_UNKNOWN_RECHECK_S`; otherwise it is asked before the next call.
        """
        self._dimension_source = source
        self._next_lookup = _clock() + DIMENSION_UNKNOWN_RECHECK_S if looked_up else 0.0
        if known:
            self._set_stored(known)

    def note_stored_dimension(self, dims: int) -> None:
        """This process just stored vectors of `dims` for this model: they decide from now on."""
        if dims > 0:
            self._set_stored(dims)

    def _set_stored(self, dims: int) -> None:
        if self._stored_dims == dims:
            return
        self._stored_dims = dims
        # a query vector computed before the dimension was known may be of another one
        self._cache.clear()
        logger.info(
            "Embedding dimension of %s/%s from the stored vectors: %d", self.provider, self.model, dims
        )

    async def _refresh_trusted(self) -> None:
        """Ask the store for the dimension when none is known and the last answer is old enough."""
        if self.trusted_dimensions or self._dimension_source is None:
            return
        if _clock() < self._next_lookup:
            return
        try:
            dims = await self._dimension_source()
        except Exception as exc:  # the database may be down: judge by what we know, ask again later
            logger.debug("Stored embedding dimension unknown for now (%s)", type(exc).__name__)
            self._next_lookup = _clock() + DIMENSION_LOOKUP_RETRY_S
            return
        # "nothing stored" is an answer too: kept, not asked again per request
        self._next_lookup = _clock() + DIMENSION_UNKNOWN_RECHECK_S
        if dims:
            self._set_stored(dims)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of `texts`, shape (n, d), float32, in input order; no call for an empty list."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        items = list(texts)
        if not items:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        await self._refresh_trusted()
        async with self._measured("documents"):
            return await self._embed_documents(items)

    @contextlib.asynccontextmanager
    async def _measured(self, kind: str) -> AsyncIterator[None]:
        """Count one embedding call and time it (metrics: calls by outcome, duration)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            metrics.EMBEDDING_CALLS.labels(self.provider, kind, outcome).inc()
            metrics.EMBEDDING_DURATION.labels(self.provider, kind).observe(time.perf_counter() - started)

    async def embed_query(self, text: str) -> np.ndarray:
        """Vector of one query (d,); cached, and concurrent identical misses share one computation."""
        await self._refresh_trusted()
        key = (self.model, text)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(self._compute_query(text))
            self._inflight[key] = future
            future.add_done_callback(functools.partial(self._query_done, key))
        # shield: one waiter being cancelled must not cancel the computation the others wait on
        return await asyncio.shield(future)

    def _query_done(self, key: tuple[str, str], future: asyncio.Future[np.ndarray]) -> None:
        self._inflight.pop(key, None)
        if future.cancelled():
            return
        # retrieving the exception marks it handled even when every waiter was cancelled
        if future.exception() is None:
            self._cache.put(key, future.result())

    async def _compute_query(self, text: str) -> np.ndarray:
        async with self._measured("query"):
            vector = (await self._embed_query(text))[0]
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        vector.flags.writeable = False
        return vector

    async def aclose(self) -> None:
        """Release resources (subclasses extend)."""
        for future in list(self._inflight.values()):
            future.cancel()
        self._cache.clear()

    # --- for subclasses -------------------------------------------------------------------------
    async def _embed_documents(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    async def _embed_query(self, text: str) -> np.ndarray:
        """Shape (1, d); subclasses may route queries through a faster lane."""
        return await self._embed_documents([text])

    def _accept(self, vectors: np.ndarray, expected_rows: int) -> np.ndarray:
        """Check a reply's shape, dimension and values; learn the dimension from the first one."""
        if vectors.ndim != 2:
            raise EmbeddingProviderError(f"{self._who} returned malformed vectors", retryable=False)
        if vectors.shape[0] != expected_rows:
            raise EmbeddingProviderError(
                f"{self._who} returned {vectors.shape[0]} vectors for {expected_rows} texts",
                retryable=False,
            )
        dims = int(vectors.shape[1])
        if dims == 0:
            raise EmbeddingProviderError(f"{self._who} returned empty vectors", retryable=False)
        if self._configured_dims is not None and dims != self._configured_dims:
            raise EmbeddingProviderError(
                f"{self._who} returned vectors of {dims} dimensions, but EMBEDDINGS_DIMENSIONS is "
                f"{self._configured_dims}",
                retryable=False,
            )
        if self._model_dims is not None and dims != self._model_dims:
            raise EmbeddingProviderError(
                f"{self._who} returned vectors of {dims} dimensions instead of its {self._model_dims}",
                retryable=False,
            )
        if self._stored_dims is not None and dims != self._stored_dims:
            raise EmbeddingProviderError(
                f"{self._who} returned vectors of {dims} dimensions, but the vectors already stored "
                f"for this model have {self._stored_dims}; check EMBEDDINGS_MODEL (or set "
                "EMBEDDINGS_DIMENSIONS)",
                retryable=False,
            )
        if not np.isfinite(vectors).all():
            raise EmbeddingProviderError(f"{self._who} returned non-finite values", retryable=False)
        if self._learned_dims != dims:
            self._learned_dims = dims
            logger.info("Embedding dimension of %s/%s replies: %d", self.provider, self.model, dims)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _place(self, out: np.ndarray | None, total: int, start: int, vectors: np.ndarray) -> np.ndarray:
        """Write one batch's rows into the call's matrix (made by the first batch to arrive).

        One matrix for the whole call, never a list of batches and a copy of them: a large upload's
        vectors are held once. Batches of different dimensions are refused.
        """
        if out is None:
            out = np.empty((total, vectors.shape[1]), dtype=np.float32)
        elif out.shape[1] != vectors.shape[1]:
            raise EmbeddingProviderError(
                f"{self._who} returned vectors of different dimensions within one request; check "
                "EMBEDDINGS_MODEL",
                retryable=False,
            )
        out[start : start + vectors.shape[0]] = vectors
        return out
