"""The pure V2 cores wired together as the route will wire them: chunk, rank, fuse, rerank, refuse, cite.

The channels here are the reference implementations (BM25 over search_text, exact entity-key
lookup) over chunks of two documents; the SQL channels will be held to the same behaviour. The
vector channel is a stand-in (cosine of term-count vectors): a second, differently shaped ranking.
"""

from __future__ import annotations

import math
from collections import Counter

from app.evidence.index.chunker import chunk_document
from app.evidence.query import bm25
from app.evidence.query.analysis import analyze_query
from app.evidence.query.evidence import build_evidence
from app.evidence.query.fusion import fuse
from app.evidence.query.records import Candidate, Scored
from app.evidence.query.refusal import SAFE_REFUSAL, decide_refusal
from app.evidence.query.rerank import FeatureReranker, rerank_window
from app.evidence.query.schemas import EvidenceInput, QueryV2Response
from app.evidence.query.validate import validate_v2
from app.evidence.settings import RefusalSettings
from app.text.tokens import SimpleTokenCounter
from tests.fixtures import v2_corpus
from tests.unit.v2.helpers import from_chunk


def corpus() -> list[Candidate]:
    """The test corpus's manual and the other owner's file, chunked as the index would."""
    counter = SimpleTokenCounter()
    out: list[Candidate] = []
    for file_id, document in (("manual", v2_corpus.DATASHEET), ("secret", v2_corpus.foreign_document())):
        chunked = chunk_document(
            document.loaded(), title=document.title, document_key=file_id, counter=counter
        )
        out += [from_chunk(c, file_id, document.filename, document.title) for c in chunked.chunks]
    return out


def cosine_channel(terms: tuple[str, ...], visible: list[Candidate]) -> list[Scored]:
    """Candidates by the cosine of term-count vectors, best first (the vector channel's stand-in)."""
    query = Counter(terms)
    scored = []
    for candidate in visible:
        doc = Counter(candidate.search_text.split())
        dot = sum(query[t] * doc[t] for t in query)
        if dot:
            norm = math.sqrt(sum(v * v for v in query.values())) * math.sqrt(sum(v * v for v in doc.values()))
            scored.append(Scored(candidate, dot / norm))
    return sorted(scored, key=lambda s: (-s.score, s.candidate.chunk_id))


async def answer(question: str, allowed: list[str]) -> QueryV2Response:
    query = analyze_query(question)
    # the scope predicate: channels only ever see allowed files
    visible = [c for c in corpus() if c.file_id in allowed]
    documents = {c.chunk_id: c.search_text.split() for c in visible}
    by_id = {c.chunk_id: c for c in visible}
    lexical = [Scored(by_id[i], s) for i, s in bm25.rank(list(query.terms), documents)]
    exact = [Scored(c, 1.0) for c in visible if set(query.exact_keys) & c.entity_keys]
    fused = fuse({"exact": exact, "lexical": lexical, "vector": cosine_channel(query.terms, visible)})
    outcome = await rerank_window(query, fused, FeatureReranker())
    stats = bm25.corpus_stats(documents.values())
    decision = decide_refusal(
        query, outcome.items, document_frequency=stats.document_frequency, documents=stats.documents
    )
    if decision.refuse:
        return QueryV2Response(
            index_version="v1", results=[], safe_refusal=SAFE_REFUSAL, debug=decision.as_debug()
        )
    return QueryV2Response(index_version="v1", results=build_evidence(outcome.items, allowed, k=5))


async def test_a_table_question_returns_its_row_first() -> None:
    response = await answer("What is the length of K 28?", ["manual"])
    top = response.results[0]
    assert (top.citation_id, top.chunk_kind, top.row_label) == ("V2-1", "table_row", "K 28")
    assert top.table_title == "Table 2: Sizes" and top.section == ["Dimensions"]
    assert top.headers == ["Type", "Length (mm)", "Weight (kg)"] and top.units == [None, "mm", "kg"]
    assert top.channels == ["exact", "lexical", "vector"] and top.page == 2
    assert all("Home" not in r.content for r in response.results)
    # the answer a model would write from it validates
    evidence = [EvidenceInput.model_validate(r.model_dump()) for r in response.results]
    assert validate_v2("K 28 is 14 mm long [V2-1].", evidence).verdict == "pass"
    assert validate_v2("K 28 is 16 mm long [V2-1].", evidence).verdict == "refuse"


async def test_an_identifier_absent_from_the_corpus_is_refused() -> None:
    response = await answer("What is the length of K 29?", ["manual"])
    assert response.results == [] and response.safe_refusal == SAFE_REFUSAL
    assert {"code": "missing_identifier", "value": "K 29"} in response.debug["reasons"]


async def test_a_foreign_file_gives_no_evidence_and_alone_means_refusal() -> None:
    # ZX 9000 exists, but only in a file the request may not read
    response = await answer("What pressure is the ZX 9000 valve rated for?", ["manual"])
    assert response.results == [] and response.safe_refusal == SAFE_REFUSAL
    allowed = await answer("What pressure is the ZX 9000 valve rated for?", ["manual", "secret"])
    assert allowed.results[0].file_id == "secret"


async def test_a_question_whose_words_occur_nowhere_is_refused() -> None:
    response = await answer("What is the warranty period?", ["manual"])
    assert response.results == [] and response.safe_refusal == SAFE_REFUSAL
    assert response.debug["reasons"] == [{"code": "no_candidates", "value": None}]


async def test_missing_words_are_reported_even_when_answered() -> None:
    # "warranty" and "period" occur nowhere, "unit" matches the mounting chunk, and both channels rank
    # it first: the words alone do not refuse (a paraphrase looks the same to lexical evidence), but
    # the signal is there for the reranker-backed decision and for debug
    query = analyze_query("What is the warranty period of the unit?")
    visible = [c for c in corpus() if c.file_id == "manual"]
    documents = {c.chunk_id: c.search_text.split() for c in visible}
    stats = bm25.corpus_stats(documents.values())
    by_id = {c.chunk_id: c for c in visible}
    fused = fuse(
        {
            "lexical": [Scored(by_id[i], s) for i, s in bm25.rank(list(query.terms), documents)],
            "vector": cosine_channel(query.terms, visible),
        }
    )
    outcome = await rerank_window(query, fused, FeatureReranker())
    decision = decide_refusal(
        query,
        outcome.items,
        RefusalSettings(min_rerank_score=0.35),
        document_frequency=stats.document_frequency,
        documents=stats.documents,
    )
    assert [s.code for s in decision.signals][:1] == ["rare_terms_missing"]
    assert decision.signals[0].value == "warranty period"


async def test_an_answerable_prose_question() -> None:
    response = await answer("Which mode needs the guard closed?", ["manual"])
    assert response.results and response.results[0].section == ["Safety"]
    kinds = Counter(r.chunk_kind for r in response.results)
    assert kinds["prose"] >= 1
