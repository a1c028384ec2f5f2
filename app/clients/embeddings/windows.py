"""Texts longer than a model's input, embedded so that all of their text counts.

A text that fits the model's input is embedded as it is: its vector is bit for bit what it was
before windows existed. A longer one is cut into windows that each fit; the windows of every text
in a call are embedded together in that call (one request, or one thread job, carries many windows),
and the text's vector is the token-weighted mean of its window vectors, normalised
(`pool_windows` of `app/text/tokens.py`, shared with V2).

Two ways to cut: by the model's own tokenizer (`token_splitter`, the local model: 256 word pieces),
or, for hosted models whose tokenizer we do not ship, by UTF-8 bytes (`byte_splitter`): a BPE token
is at least one byte, so a piece of at most N bytes never has more than N tokens. That count is
conservative (English runs about 4 bytes a token), which only means more, smaller windows for texts
that are far past the limit anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.text.tokens import TokenCounter, fits, pool_windows, window_texts, window_weights

# A text's windows and their weights, or None when the text fits the model's input as it is.
Splitter = Callable[[str], list[tuple[str, float]] | None]

# Input limits of hosted models, in tokens (OpenAI's embeddings guide: 8,191 for these three).
OPENAI_MAX_INPUT_TOKENS: dict[str, int] = {
    "text-embedding-3-small": 8191,
    "text-embedding-3-large": 8191,
    "text-embedding-ada-002": 8191,
}


@dataclass(frozen=True)
class WindowPlan:
    """The texts of one call as the model receives them: each text's pieces, in order."""

    pieces: list[str]
    spans: list[tuple[int, int]]  # per input text: its pieces are pieces[start:end]
    weights: list[list[float] | None]  # per input text: None when it went whole

    @property
    def windowed(self) -> bool:
        """True when at least one text was cut into windows."""
        return any(w is not None for w in self.weights)


def plan_windows(texts: Sequence[str], split: Splitter) -> WindowPlan:
    """Each text whole when it fits, else its windows; all in one flat list for one call."""
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []
    weights: list[list[float] | None] = []
    for text in texts:
        windows = split(text)
        start = len(pieces)
        if windows and len(windows) > 1:
            pieces.extend(piece for piece, _ in windows)
            weights.append([weight for _, weight in windows])
        else:
            pieces.append(text)
            weights.append(None)
        spans.append((start, len(pieces)))
    return WindowPlan(pieces, spans, weights)


def pool_plan(vectors: np.ndarray, plan: WindowPlan) -> np.ndarray:
    """One vector per input text: its own row when it went whole, its pooled windows otherwise."""
    if not plan.windowed:
        return vectors
    out = np.empty((len(plan.spans), vectors.shape[1]), dtype=np.float32)
    for row, ((start, end), weights) in enumerate(zip(plan.spans, plan.weights, strict=True)):
        out[row] = vectors[start] if weights is None else pool_windows(vectors[start:end], weights)
    return out


def token_splitter(counter: TokenCounter, window: int, overlap: int = 0) -> Splitter:
    """Cut on the model's own word pieces: windows of at most `window` tokens with its special tokens."""

    def split(text: str) -> list[tuple[str, float]] | None:
        if fits(text, counter, window):
            return None
        pieces = window_texts(text, counter, window, overlap)
        if len(pieces) < 2:
            return None
        return list(zip(pieces, window_weights(pieces, counter), strict=True))

    return split


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def byte_windows(text: str, max_bytes: int) -> list[str]:
    """`text` cut into pieces of at most `max_bytes` UTF-8 bytes, at whitespace where one is near."""
    if max_bytes < 8:
        raise ValueError("max_bytes must be at least 8")
    pieces: list[str] = []
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + max_bytes)  # a character is at least one byte
        while _utf8_size(text[start:end]) > max_bytes:
            excess = _utf8_size(text[start:end]) - max_bytes
            end -= max(1, excess // 4)  # a character is at most four bytes
        if end < n:
            # prefer a whitespace in the last tenth of the piece, so words stay whole
            floor = start + (end - start) * 9 // 10
            cut = max(text.rfind(sep, floor, end) for sep in (" ", "\n", "\t"))
            if cut > start:
                end = cut + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def byte_splitter(max_tokens: int) -> Splitter:
    """Cut texts that may exceed `max_tokens` tokens, counting a token as at least one UTF-8 byte."""

    def split(text: str) -> list[tuple[str, float]] | None:
        if len(text) * 4 <= max_tokens or _utf8_size(text) <= max_tokens:
            return None
        pieces = [p for p in byte_windows(text, max_tokens) if p.strip()]
        if len(pieces) < 2:
            return None
        return [(piece, float(_utf8_size(piece))) for piece in pieces]

    return split


def hosted_splitter(provider: str, model: str, max_input_tokens: int | None = None) -> Splitter | None:
    """The splitter for an HTTP provider: an explicit limit, else a known OpenAI model's, else none."""
    limit = max_input_tokens
    if limit is None and provider in ("openai", "azure"):
        # Azure: the deployment name, which matches only when the deployment is named after its model
        limit = OPENAI_MAX_INPUT_TOKENS.get(model)
    return byte_splitter(limit) if limit else None
