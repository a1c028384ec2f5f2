"""Bounded reranking: a pluggable reranker reorders the fused window, never grows it.

    outcome = await rerank_window(query, fused, reranker, window=25, per_file_cap=3, per_page_cap=2)

A `Reranker` returns one score in 0..1 per window item. The default `FeatureReranker` is
deterministic and needs no model: a weighted mean of features in 0..1, each counted only when the
query makes it applicable (a query without identifiers is not judged on identifier hits):

    coverage     share of the query's terms found in the item (by their English and German stems),
                 each weighted by its idf in the window
    phrases      share of quoted phrases found on token boundaries
    identifiers  share of identifiers, standards and document numbers found
    quantities   share of numbers with units found (by value and unit, or as written)
    heading      share of the terms found in the title, headings, caption or row label (by stems)
    definition   an identifier of the query is what the item defines: its row label, a heading or the
                 caption names it, or its text starts with it (a passing mention elsewhere does not)
    intent       table lookup: a table row; document lookup: terms in title or file name;
                 citation request: a known page
    prior        the fused score relative to the window's best (what the channels agreed on)
    dense        the vector channel's similarity, from the window's lowest (0) to its best (1): a
                 paraphrase shares few words with its answer, and literal overlap alone must not
                 outrank a much closer meaning

Any failure of a remote or local model (an exception, a timeout, a wrong number of scores, a
non-finite score) falls back to the feature reranker; the outcome says which one ranked and why.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from app.evidence.query.analysis import (
    CITATION_REQUEST,
    DOCUMENT_LOOKUP,
    TABLE_LOOKUP,
    QueryAnalysis,
    name_variants,
)
from app.evidence.query.bm25 import idf
from app.evidence.query.evidence import OCR_PAGES, ocr_confidence
from app.evidence.query.fusion import apply_caps
from app.evidence.query.records import Candidate, Fused
from app.evidence.settings import MAX_RERANK_WINDOW, FeatureWeights, RerankSettings
from app.text.normalize import contains_phrase, normalize, normalize_kept
from app.text.stems import matches, text_forms

logger = logging.getLogger(__name__)

DEFAULT_WINDOW = RerankSettings.model_fields["window"].default
MAX_WINDOW = MAX_RERANK_WINDOW


class Reranker(Protocol):
    """Scores a window of fused items for a query: one score in 0..1 per item, in input order."""

    name: str

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        """Scores aligned with `items`."""
        ...


def rerank_text(candidate: Candidate) -> str:
    """The text a model reranker reads: breadcrumb then content, as the chunk was embedded."""
    crumbs = [part for part in (candidate.document.title, *candidate.place.section) if part]
    head = " › ".join(crumbs)
    return f"{head}\n{candidate.content}" if head else candidate.content


def _defines(query: QueryAnalysis, c: Candidate, heading_text: str) -> bool:
    """True when the candidate is an entry for one of the query's names, not a passing mention."""
    first_line = normalize(c.content.strip().split("\n", 1)[0][:200])
    for entity in query.names:
        for key in name_variants(entity, last_part=False):
            # an entry starts with its term ("str.lstrip(chars)  Return ..."); a mention only holds it
            if contains_phrase(heading_text, key) or first_line == key or first_line.startswith(key + " "):
                return True
    return False


def _fraction(found: Sequence[bool]) -> float:
    return sum(found) / len(found) if found else 0.0


class FeatureReranker:
    """The deterministic default reranker (see the module docstring)."""

    name = "features"

    def __init__(self, weights: FeatureWeights | None = None) -> None:
        self.weights = weights or FeatureWeights()

    def features(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[dict[str, float]]:
        """The applicable features of every item (a feature absent from a dict does not apply)."""
        texts = [item.candidate.search_text for item in items]
        token_sets = [text_forms(text) for text in texts]
        # idf within the window: a term every candidate has says little about which one answers
        weights = {
            term: idf(len(items), sum(matches(term, tokens) for tokens in token_sets)) for term in query.terms
        }
        # the prior is the fused score relative to the window's best: what the channels agreed on,
        # on the same 0..1 footing as the other features (absolute fused scores are small numbers)
        top = max((item.score for item in items), default=0.0)
        # how close in meaning, relative to the window: the best similarity 1, the lowest 0 (an item
        # the vector channel did not return lies below everything it returned)
        sims = [item.dense for item in items if item.dense is not None]
        high, low = (max(sims), min(sims)) if sims else (0.0, 0.0)
        out: list[dict[str, float]] = []
        for item, text, tokens in zip(items, texts, token_sets, strict=True):
            c, place = item.candidate, item.candidate.place
            f: dict[str, float] = {"prior": item.score / top if top > 0 else 0.0}
            if sims:
                f["dense"] = (
                    (item.dense - low) / (high - low) if item.dense is not None and high > low else 0.0
                )
            total = sum(weights.values())
            if query.terms and total > 0:
                f["coverage"] = sum(w for t, w in weights.items() if matches(t, tokens)) / total
            if query.phrases:
                f["phrases"] = _fraction([contains_phrase(text, p) for p in query.phrases])
            if query.names:
                f["identifiers"] = _fraction(
                    [
                        any(
                            key in c.entity_keys or contains_phrase(text, key)
                            for key in name_variants(entity)
                        )
                        for entity in query.names
                    ]
                )
            if query.quantities:
                f["quantities"] = _fraction(
                    [
                        q.normalized in c.entity_keys or contains_phrase(text, normalize(q.raw))
                        for q in query.quantities
                    ]
                )
            heading_text = normalize_kept(
                " ".join(
                    filter(None, (c.document.title, *place.section, place.table_caption, place.row_label))
                )
            )
            heading_tokens = text_forms(heading_text)
            if query.terms:
                f["heading"] = _fraction([matches(t, heading_tokens) for t in query.terms])
            if query.names:
                f["definition"] = 1.0 if _defines(query, c, heading_text) else 0.0
            intents: list[float] = []
            if TABLE_LOOKUP in query.intents:
                intents.append(1.0 if place.kind == "table_row" or place.table_caption else 0.0)
            if DOCUMENT_LOOKUP in query.intents and query.terms:
                names = set(normalize(f"{c.document.title or ''} {c.document.filename}").split())
                intents.append(_fraction([t in names for t in query.terms]))
            if CITATION_REQUEST in query.intents:
                intents.append(1.0 if place.page is not None else 0.0)
            if intents:
                f["intent"] = sum(intents) / len(intents)
            out.append(f)
        return out

    def score_all(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        """Weighted mean of each item's applicable features, in 0..1."""
        weights = self.weights.model_dump()
        scores: list[float] = []
        for features in self.features(query, items):
            denominator = sum(weights[name] for name in features)
            numerator = sum(weights[name] * value for name, value in features.items())
            scores.append(numerator / denominator if denominator > 0 else 0.0)
        return scores

    async def scores(self, query: QueryAnalysis, items: Sequence[Fused]) -> list[float]:
        """See `score_all` (no I/O)."""
        return self.score_all(query, items)


def ocr_weight(item: Fused, discount: float) -> float:
    """1 for a text layer's chunk; 1 - discount * (1 - confidence) for a chunk OCR read."""
    c = item.candidate
    confidence = ocr_confidence(c.document.metadata.get(OCR_PAGES), c.place.page)
    if confidence is None:
        return 1.0
    return 1.0 - discount * (1.0 - min(max(confidence, 0.0), 1.0))


class RerankError(Exception):
    """A reranker's reply could not be used (the message never holds provider text)."""


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    """The reordered window, who ranked it, and why a fallback happened (None when none did)."""

    items: list[Fused]
    reranker: str
    fallback_reason: str | None = None


def check_scores(scores: Sequence[float], expected: int) -> list[float]:
    """Scores as floats clipped to 0..1; RerankError when their number or values are unusable."""
    if len(scores) != expected:
        raise RerankError("wrong number of scores")
    out: list[float] = []
    for value in scores:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RerankError("a score is not a finite number")
        out.append(min(max(float(value), 0.0), 1.0))
    return out


async def rerank_window(
    query: QueryAnalysis,
    items: Sequence[Fused],
    reranker: Reranker,
    *,
    window: int = DEFAULT_WINDOW,
    per_file_cap: int = 3,
    per_page_cap: int = 2,
    diverse_head: int = 0,
    fallback: FeatureReranker | None = None,
    ocr_discount: float = 0.0,
) -> RerankOutcome:
    """Rerank the first `window` items (at most MAX_WINDOW); caps are applied again afterwards.

    Whichever reranker scored them, a chunk OCR read is discounted by its page's confidence
    (`ocr_discount`): misread text is weaker evidence than a text layer's.
    """
    head = list(items[: max(0, min(window, MAX_WINDOW))])
    if not head:
        return RerankOutcome([], reranker.name)
    used = reranker.name
    reason: str | None = None
    try:
        scores = check_scores(await reranker.scores(query, head), len(head))
    except Exception as exc:  # any failure of an optional model falls back to the features
        reason = exc.__class__.__name__
        logger.warning("Reranker %s failed (%s); using the feature reranker", reranker.name, reason)
        fallback = fallback or FeatureReranker()
        used = fallback.name
        scores = check_scores(fallback.score_all(query, head), len(head))
    if ocr_discount > 0:
        scores = [score * ocr_weight(item, ocr_discount) for score, item in zip(scores, head, strict=True)]
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    ranked = [replace(head[i], rerank=scores[i]) for i in order]
    return RerankOutcome(apply_caps(ranked, per_file_cap, per_page_cap, diverse_head), used, reason)
