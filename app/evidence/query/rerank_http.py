"""A remote reranker over HTTP, speaking the common `/rerank` shapes.

    cohere, jina: POST {model, query, documents: [str], top_n} -> {results: [{index, relevance_score}]}
    tei:          POST {query, texts: [str]}                   -> [{index, score}]

The whole call is bounded by `timeout` (default 1.5 s). Any failure (timeout, transport error,
non-2xx status, a body that is not the expected shape, an index missing or repeated, a score that
is not a finite number) raises `RerankError` or the transport's exception, and `rerank_window`
falls back to the feature reranker. Provider bodies are never logged or echoed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import httpx

from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.records import Fused
from app.evidence.query.rerank import RerankError, rerank_text

Flavour = Literal["cohere", "jina", "tei"]
DEFAULT_TIMEOUT = 1.5
# a reranker reads a passage, not a book: longer texts are cut before sending (the index is untouched)
MAX_DOCUMENT_CHARS = 4000


class HttpReranker:
    """Client of a hosted or self-run reranking service."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        flavour: Flavour = "cohere",
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.flavour = flavour
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.name = f"http:{flavour}"
        # PII_REDACT=reranker: the question and every passage are redacted before they are sent
        self.redact = redact

    def body(self, query: str, documents: list[str]) -> dict[str, Any]:
        """The request body for this flavour (redacted when asked)."""
        if self.redact is not None:
            query, documents = self.redact(query), [self.redact(d) for d in documents]
        return self._body(query, documents)

    def _body(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self.flavour == "tei":
            return {"query": query, "texts": documents, "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model:
            body["model"] = self.model
        return body

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        """Scores from the service, aligned with `items`."""
        documents = [rerank_text(item.candidate)[:MAX_DOCUMENT_CHARS] for item in items]
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with asyncio.timeout(self.timeout):
            # redacting a window of passages is milliseconds of CPU: off the event loop (and only then)
            if self.redact is None:
                body = self.body(query.raw, documents)
            else:
                body = await asyncio.to_thread(self.body, query.raw, documents)
            response = await self.client.post(self.url, json=body, headers=headers, timeout=self.timeout)
            if response.status_code // 100 != 2:
                raise RerankError(f"status {response.status_code}")
            try:
                payload = response.json()
            except ValueError:
                raise RerankError("reply is not JSON") from None
        return parse_reply(payload, len(items))


def parse_reply(payload: Any, expected: int) -> list[float]:
    """Scores in input order from a Cohere/Jina (`results`) or TEI (list) reply; RerankError otherwise."""
    if isinstance(payload, dict) and isinstance(payload.get("results"), list):
        entries, key = payload["results"], "relevance_score"
    elif isinstance(payload, list):
        entries, key = payload, "score"
    else:
        raise RerankError("reply has neither `results` nor a list")
    scores: list[float | None] = [None] * expected
    for entry in entries:
        if not isinstance(entry, dict):
            raise RerankError("a result is not an object")
        index, value = entry.get("index"), entry.get(key)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < expected:
            raise RerankError("a result index is out of range")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RerankError("a result score is not a finite number")
        if scores[index] is not None:
            raise RerankError("a result index repeats")
        scores[index] = float(value)
    if any(score is None for score in scores):
        raise RerankError("the reply misses some documents")
    return [score for score in scores if score is not None]
