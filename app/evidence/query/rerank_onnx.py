"""An optional local cross-encoder: an ONNX model and its `tokenizer.json` from a configured folder.

The folder holds `model.onnx` (inputs `input_ids`, `attention_mask`, optionally `token_type_ids`;
output logits shaped (n,), (n, 1) or (n, 2)) and `tokenizer.json` (a `tokenizers` file whose
post-processor builds the pair input, as every exported cross-encoder's does). Nothing is
downloaded: a missing or malformed folder is a configuration error at load time. A score is the
sigmoid of the logit (for two logits, the softmax probability of the second, "relevant", class).
Inference runs in a worker thread so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import ConfigError
from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.records import Fused
from app.evidence.query.rerank import RerankError, rerank_text

DEFAULT_MAX_TOKENS = 512


class OnnxCrossEncoder:
    """A cross-encoder reranker on onnxruntime (CPU), loaded once on first use."""

    name = "onnx"

    def __init__(self, folder: Path, *, max_tokens: int = DEFAULT_MAX_TOKENS, threads: int = 1) -> None:
        self.folder = Path(folder)
        self.max_tokens = max_tokens
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: set[str] = set()

    def load(self) -> None:
        """Load the model and tokenizer (idempotent, thread-safe); ConfigError when unusable."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model, vocab = self.folder / "model.onnx", self.folder / "tokenizer.json"
            if not model.is_file() or not vocab.is_file():
                raise ConfigError(f"The reranker folder {self.folder} needs model.onnx and tokenizer.json")
            try:
                tokenizer = Tokenizer.from_file(str(vocab))
                options = ort.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.log_severity_level = 3
                session = ort.InferenceSession(
                    str(model), sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime and tokenizers raise their own types
                raise ConfigError(
                    f"The reranker in {self.folder} could not be loaded ({type(exc).__name__})"
                ) from None
            inputs = {i.name for i in session.get_inputs()}
            if not {"input_ids", "attention_mask"} <= inputs:
                raise ConfigError(f"The reranker in {self.folder} lacks input_ids/attention_mask inputs")
            tokenizer.enable_truncation(max_length=self.max_tokens)
            if tokenizer.padding is None:
                # the model's own padding (XLM-R pads with id 1) wins; else BERT's [PAD] = 0
                tokenizer.enable_padding()
            self._inputs = inputs
            self._tokenizer = tokenizer
            self._session = session

    def score_texts(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance of each text to the query, in 0..1 (blocking)."""
        self.load()
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch([(query, text) for text in texts])
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.asarray([e.type_ids for e in encodings], dtype=np.int64)
        logits = np.asarray(self._session.run(None, feeds)[0], dtype=np.float64)
        if logits.ndim == 2 and logits.shape[1] == 2:
            # two classes: probability of the second, relevant one
            shifted = logits - logits.max(axis=1, keepdims=True)
            probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
            scores = probabilities[:, 1]
        elif logits.ndim == 1 or (logits.ndim == 2 and logits.shape[1] == 1):
            scores = 1.0 / (1.0 + np.exp(-logits.reshape(-1)))
        else:
            raise RerankError("unexpected logits shape")
        if scores.shape[0] != len(texts):
            raise RerankError("wrong number of logits")
        return [float(s) for s in scores]

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        """Scores aligned with `items`, computed in a worker thread."""
        texts = [rerank_text(item.candidate) for item in items]
        return await asyncio.to_thread(self.score_texts, query.raw, texts)
