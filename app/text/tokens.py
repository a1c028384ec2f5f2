"""Token counting with the embedding model's own tokenizer, and embeddings of text longer than its window.

`TokenCounter` is the small protocol the chunker sizes chunks with: `count` (tokens of a text, no
special tokens), `spans` (character spans of those tokens, to cut a text on token boundaries) and
`special_tokens` (what the model adds around every input, [CLS] and [SEP] for BERT-style models).
`ModelTokenCounter` wraps a `tokenizers.Tokenizer`; `local_model_counter()` loads the tokenizer of
the local embedding model the same way the embedder does. Tests pass `SimpleTokenCounter`.

`window_texts` + `pool_windows` embed a long text so that all of it counts: cut it into windows
that fit the model, embed each, and take the token-weighted mean of the unit vectors, normalised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class TokenCounter(Protocol):
    """What the chunker needs to know about a tokenizer."""

    special_tokens: int

    def count(self, text: str) -> int:
        """Tokens of `text` without special tokens."""
        ...

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character (start, end) of each token of `text`, in order."""
        ...


class SimpleTokenCounter:
    """A word-and-punctuation counter: deterministic, dependency-free, for tests and fallbacks."""

    _pattern = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, special_tokens: int = 0) -> None:
        self.special_tokens = special_tokens

    def count(self, text: str) -> int:
        """Words and punctuation marks."""
        return sum(1 for _ in self._pattern.finditer(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of the words and punctuation marks."""
        return [m.span() for m in self._pattern.finditer(text)]


class ModelTokenCounter:
    """A `tokenizers.Tokenizer` as a `TokenCounter` (truncation off: we count, never cut)."""

    def __init__(self, tokenizer: Any) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        # [CLS] text [SEP] for BERT: what encode() adds on top of the text's own tokens
        self.special_tokens = int(tokenizer.num_special_tokens_to_add(False))

    @classmethod
    def from_file(cls, path: Path) -> ModelTokenCounter:
        """Load a `tokenizer.json`."""
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def count(self, text: str) -> int:
        """Word pieces of `text`."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the word pieces."""
        return [tuple(offset) for offset in self._tokenizer.encode(text, add_special_tokens=False).offsets]


def fits(text: str, counter: TokenCounter, window: int) -> bool:
    """True when `text` with the model's special tokens fits a `window`-token input."""
    return counter.count(text) + counter.special_tokens <= window


def window_texts(text: str, counter: TokenCounter, window: int, overlap: int = 0) -> list[str]:
    """`text` cut on token boundaries into pieces that each fit the window (with `overlap` tokens)."""
    budget = window - counter.special_tokens
    if budget < 1:
        raise ValueError("the window leaves no room for text")
    if overlap < 0 or overlap >= budget:
        raise ValueError("overlap must be at least 0 and smaller than the window")
    spans = counter.spans(text)
    if len(spans) <= budget:
        return [text] if text.strip() else []
    pieces: list[str] = []
    start = 0
    while start < len(spans):
        end = min(start + budget, len(spans))
        pieces.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            break
        start = end - overlap
    return pieces


def pool_windows(vectors: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """The weighted mean of window embeddings, L2-normalised: one vector in which every window counts."""
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError("pool_windows needs a non-empty (windows, dimensions) matrix")
    w = np.ones(matrix.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (matrix.shape[0],) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError("weights must be one non-negative number per window, not all zero")
    # each window vector is normalised first so a window's weight, not its norm, sets its share
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.maximum(norms, 1e-12)
    mean = (unit * w[:, None]).sum(axis=0) / w.sum()
    norm = float(np.linalg.norm(mean))
    if norm < 1e-12:
        raise ValueError("the window embeddings cancel out")
    result: np.ndarray = (mean / norm).astype(np.float32)
    return result


def window_weights(pieces: Sequence[str], counter: TokenCounter) -> list[float]:
    """Token counts of the window texts: the weights `pool_windows` gives them."""
    return [float(max(counter.count(piece), 1)) for piece in pieces]
