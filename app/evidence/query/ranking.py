"""The rank stage of `/query_v2`: fusion, the reranked window and the refusal, on the channels' lists.

    ranking = await rank(analysis, lists, statistics, tuning, reranker)

No I/O but the reranker's own (a remote reranker over HTTP, which falls back to the features).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.evidence.query.analysis import QueryAnalysis
from app.evidence.query.context_rows import glossary_rows_second
from app.evidence.query.fusion import fuse, keep_channel_firsts
from app.evidence.query.inherited import thin_shared_vectors
from app.evidence.query.named_documents import select_named_documents
from app.evidence.query.records import Fused, Scored
from app.evidence.query.refusal import RefusalDecision, decide_refusal
from app.evidence.query.rerank import FeatureReranker, Reranker, RerankOutcome, rerank_window
from app.evidence.query.statistics import Statistics, discount_common_labels, discount_word_labels
from app.evidence.settings import V2Settings


@dataclass(frozen=True)
class Ranking:
    """What rank made of the lists: the fused list, the reranked window and the refusal decision."""

    fused: list[Fused]
    reranked: RerankOutcome
    decision: RefusalDecision
    fuse_ms: float = 0.0
    rerank_ms: float = 0.0

    @property
    def items(self) -> list[Fused]:
        """The reranked window: what the evidence is built from."""
        return self.reranked.items


async def rank(
    analysis: QueryAnalysis,
    lists: Mapping[str, Sequence[Scored]],
    stats: Statistics,
    tuning: V2Settings,
    reranker: Reranker,
) -> Ranking:
    """Fusion, the reranked window (features when `reranker` fails) and the refusal; no other I/O.

    `lists` holds the channels that ran without failing (an empty list: ran, found nothing).
    """
    t0 = time.perf_counter()
    if lists.get("vector"):
        lexical = {hit.candidate.chunk_id: hit.score for hit in lists.get("lexical", ())}
        lists = {**lists, "vector": thin_shared_vectors(lists["vector"], lexical)}
    if "exact" in lists and stats.chunks:
        lists = {
            **lists,
            "exact": discount_common_labels(lists["exact"], stats, tuning.refusal.rare_share),
        }
    if "exact" in lists:
        lists = {**lists, "exact": discount_word_labels(lists["exact"], tuning.channels.exact.word_label)}
    # a question naming a document and asking in it: the name selects the document, not its title page
    lists = select_named_documents(lists, analysis, tuning.channels.named_document_chunks)
    # query-adaptive: plain-word questions lean on the vector channel (FusionSettings.prose_weights)
    fusion = (
        tuning.fusion.model_copy(update={"weights": tuning.fusion.prose_weights})
        if leans_on_meaning(analysis, tuning.fusion.dense_languages)
        else tuning.fusion
    )
    fused = fuse(lists, fusion)
    t1 = time.perf_counter()
    outcome = await rerank_window(
        analysis,
        fused,
        reranker,
        window=tuning.rerank.window,
        per_file_cap=tuning.fusion.per_file_cap,
        per_page_cap=tuning.fusion.per_page_cap,
        diverse_head=tuning.fusion.diverse_head,
        fallback=FeatureReranker(tuning.rerank.features),
        ocr_discount=tuning.rerank.ocr_discount,
    )
    # after any reranker: each channel's first stays near the top (fusion never loses a channel's
    # win), and a glossary row is context, never first evidence on its own
    kept = keep_channel_firsts(outcome.items, fused, tuning.fusion.keep_channel_firsts)
    moved = glossary_rows_second(kept, analysis, tuning.rerank.glossary_row_words)
    outcome = dataclasses.replace(outcome, items=moved)
    t2 = time.perf_counter()
    decision = decide_refusal(
        analysis,
        outcome.items,
        tuning.refusal,
        document_frequency=stats.document_frequency if stats.chunks else None,
        documents=stats.chunks,
        channels_run=len(lists),
        # how close anything visible comes in meaning: the vector channel's best similarity
        best_dense=max((hit.score for hit in lists["vector"]), default=0.0) if "vector" in lists else None,
    )
    return Ranking(fused, outcome, decision, (t1 - t0) * 1000, (t2 - t1) * 1000)


def leans_on_meaning(analysis: QueryAnalysis, languages: Sequence[str]) -> bool:
    """A plain-word question in a language the embedding model reads: fuse with the prose weights.

    A paraphrase shares few words with its answer, so the vector channel holds its wins, but only
    where the model understands the language: the offline model reads English, and on German
    questions the lexical channel finds the answer's passage far more often (German natural
    questions, dev split).
    """
    return analysis.prose and (analysis.language in languages or "*" in languages)
