"""A refusal that is earned: decided from the evidence, never from a distance threshold.

Hard reasons (any one refuses):
    no_candidates        nothing authorised was found at all
    missing_identifier   an identifier, standard or document number of the query occurs in no candidate
                         (in any of its written forms: "PurePath.as_uri" for "pathlib.PurePath.as_uri",
                         or "popitem" in a candidate that names "Mailbox" for "mailbox.Mailbox.popitem")
    missing_phrase       a quoted phrase occurs in no candidate
    missing_quantity     a number with a unit occurs in no candidate
Soft signals, weighed (`signal_weights`); their weights summing to `refuse_at` refuse:
    weak_rerank          the best reranker score is under `min_rerank_score`
    no_agreement         none of the top `agreement_depth` candidates was found by two channels
                         (counted only when at least two channels ran)
    rare_terms_missing   at least `rare_missing_share` of the query's rare words (in at most
                         `rare_share` of the chunks, or in none; corpus statistics given) occur
                         in no candidate
    low_coverage         the best candidate holds under `min_coverage` of the query's terms

By default (chosen by the quality benchmark's refusal grid) low_coverage weighs 1 and the others
0.5, and 1 refuses: low coverage alone, or any two of the others. Missing rare words alone (a
paraphrase misses words, "attach" for "mount") never refuse. The decision and every signal are
data, for `debug`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from app.ingest.v2.entities import Entity
from app.ingest.v2.normalize import contains_phrase, normalize
from app.search.v2.analysis import QueryAnalysis, name_parts, name_variants
from app.search.v2.records import Fused

SAFE_REFUSAL = "I could not find this in the documents available to you, so I cannot answer it from them."


class RefusalPolicy(BaseModel):
    """Thresholds of the refusal decision; defaults chosen by `scripts/bench quality`'s refusal grid.

    The grid of the full run (docs/v2.md, Results on the benchmark) picked the setting that refuses the most
    unanswerable questions with at most 3 % false refusals: `refuse_at` 1, where low coverage (the
    best candidate holds under half of the question's terms) refuses alone and the other signals
    (a best rerank score under 0.6, no agreement between channels, missing rare words) weigh 0.5,
    so two of them refuse. RAG_V2_REFUSAL_POLICY overrides any field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_rerank_score: float = Field(0.6, ge=0, le=1)
    agreement_depth: int = Field(5, ge=1)
    # a share, not an idf cut: "rare" must mean the same in a corpus of 10 chunks and of 10 million
    rare_share: float = Field(0.01, ge=0, le=1)
    rare_missing_share: float = Field(0.5, gt=0, le=1)
    min_coverage: float = Field(0.5, ge=0, le=1)
    signal_weights: dict[str, float] = Field(
        default_factory=lambda: {
            "weak_rerank": 0.5,
            "no_agreement": 0.5,
            "rare_terms_missing": 0.5,
            "low_coverage": 1.0,
        }
    )
    refuse_at: float = Field(1.0, gt=0)
    # how many of the best candidates the term checks look at (the window the reranker saw)
    depth: int = Field(50, ge=1)


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason or signal: a code and the value it is about (a term, a score)."""

    code: str
    value: str | float | None = None


@dataclass(frozen=True, slots=True)
class RefusalDecision:
    """Whether to refuse, the hard reasons, and the soft signals that fired."""

    refuse: bool
    reasons: tuple[Reason, ...] = ()
    signals: tuple[Reason, ...] = ()
    checked: Mapping[str, object] = field(default_factory=dict)

    def as_debug(self) -> dict[str, object]:
        """A JSON-ready dict for the response's `debug`."""
        return {
            "refuse": self.refuse,
            "reasons": [{"code": r.code, "value": r.value} for r in self.reasons],
            "signals": [{"code": s.code, "value": s.value} for s in self.signals],
            "checked": dict(self.checked),
        }


def _found(items: Sequence[Fused], key: str, entity_key: str | None = None) -> bool:
    for item in items:
        candidate = item.candidate
        if entity_key is not None and entity_key in candidate.entity_keys:
            return True
        if contains_phrase(candidate.search_text, key):
            return True
    return False


def _member_found(items: Sequence[Fused], entity: Entity) -> bool:
    """A member of a qualified name written alone under its owner: "popitem()" in "Mailbox objects".

    "mailbox.Mailbox.popitem" is found where a candidate holds "popitem" and names "Mailbox" in its
    text, title, headings or caption (documentation lists a class's methods by their short names).
    """
    parts = name_parts(entity)
    if len(parts) < 3:
        return False
    member, owner = normalize(parts[-1]), normalize(parts[-2])
    if not member or not owner:
        return False
    for item in items:
        c = item.candidate
        if not contains_phrase(c.search_text, member):
            continue
        around = normalize(" ".join(filter(None, (c.title, *c.section, c.table_caption, c.row_label))))
        if contains_phrase(c.search_text, owner) or contains_phrase(around, owner):
            return True
    return False


def decide_refusal(
    query: QueryAnalysis,
    items: Sequence[Fused],
    policy: RefusalPolicy | None = None,
    *,
    document_frequency: Mapping[str, int] | None = None,
    documents: int = 0,
    channels_run: int = 3,
) -> RefusalDecision:
    """Refuse or answer, from what the candidates hold (see the module docstring)."""
    policy = policy or RefusalPolicy()
    pool = list(items[: policy.depth])
    if not pool:
        return RefusalDecision(True, (Reason("no_candidates"),))
    reasons: list[Reason] = []
    for entity in query.names:
        if not any(_found(pool, form, form) for form in name_variants(entity)) and not _member_found(
            pool, entity
        ):
            reasons.append(Reason("missing_identifier", entity.raw))
    for phrase in query.phrases:
        if not _found(pool, phrase):
            reasons.append(Reason("missing_phrase", phrase))
    for quantity in query.quantities:
        if not _found(pool, normalize(quantity.raw), quantity.normalized):
            reasons.append(Reason("missing_quantity", quantity.raw))

    signals: list[Reason] = []
    best = max((item.rerank if item.rerank is not None else item.score) for item in pool)
    if best < policy.min_rerank_score:
        signals.append(Reason("weak_rerank", round(best, 4)))
    top = pool[: policy.agreement_depth]
    # agreement needs two channels that ran; with one left (a degraded search) it says nothing
    if channels_run >= 2 and not any(len(item.channels) >= 2 for item in top):
        signals.append(Reason("no_agreement"))
    checked: dict[str, object] = {"best_score": round(best, 4), "candidates": len(pool)}
    if document_frequency is not None and documents > 0:
        rare = [t for t in query.terms if document_frequency.get(t, 0) <= policy.rare_share * documents]
        missing = [t for t in rare if not any(t in item.candidate.search_text.split() for item in pool)]
        checked["rare_terms"] = rare
        if rare and len(missing) / len(rare) >= policy.rare_missing_share:
            signals.append(Reason("rare_terms_missing", " ".join(missing)))
    if query.terms:
        first = set(pool[0].candidate.search_text.split())
        coverage = sum(t in first for t in query.terms) / len(query.terms)
        checked["coverage"] = round(coverage, 4)
        if coverage < policy.min_coverage:
            signals.append(Reason("low_coverage", round(coverage, 4)))
    weight = sum(policy.signal_weights.get(signal.code, 1.0) for signal in signals)
    checked["signal_weight"] = round(weight, 4)
    refuse = bool(reasons) or weight >= policy.refuse_at - 1e-9
    return RefusalDecision(refuse, tuple(reasons), tuple(signals), checked)
