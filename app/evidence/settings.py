"""Every V2 tuning knob, once: nested models whose field defaults are the shipped defaults.

`Settings.v2` (app/config.py) is a `V2Settings`; each leaf is also an environment variable named
by its path, `RAG_V2__<SECTION>__<FIELD>` (`RAG_V2__FUSION__RRF_K=30`,
`RAG_V2__FUSION__WEIGHTS__LEXICAL=1.5`, `RAG_V2__REFUSAL__MIN_RERANK_SCORE=0.5`). The index and
query code read their knobs from here and nowhere else, so a unit test that builds `V2Settings()`
runs exactly what a user gets.

Nearly all of them are tuning knobs, chosen against a benchmark and documented in docs/tuning.md.
The few an operator sets (the reranker an operator points at, the languages of the embedding
model they chose) carry `json_schema_extra=OPERATOR` and are documented in docs/configuration.md
instead; tests/unit/test_config_docs.py holds both pages to these marks.

This module imports nothing from the rest of the application: configuration, the V2 index, the V2
query path and the store all import it, and it must not close an import cycle between them.
Where a default came from a measurement, the comment beside it says which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

CHANNELS: tuple[str, ...] = ("exact", "lexical", "vector")
ENV_PREFIX = "RAG_V2"
ENV_DELIMITER = "__"
MAX_RERANK_WINDOW = 50
# the mark of a knob an operator sets (docs/configuration.md); every other leaf is a tuning knob
OPERATOR: JsonDict = {"tier": "operator"}


class Section(BaseModel):
    """A frozen group of knobs whose environment keys are its field names in capitals."""

    # case-sensitive settings hand nested keys over as written (RRF_K); code builds by field name
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=str.upper, validate_by_name=True, validate_by_alias=True
    )


class Weights(Section):
    """A section of named weights."""

    def of(self, name: str) -> float:
        """The weight called `name` (1 for a name the section does not know)."""
        return float(getattr(self, name, 1.0))


class ChannelWeights(Weights):
    """Weight of each channel's reciprocal rank in fusion."""

    exact: float = Field(1.0, ge=0, le=100)
    # 2, not 1: the fusion grid of the full quality run (2,871 questions) chose lexical weight 2
    lexical: float = Field(2.0, ge=0, le=100)
    vector: float = Field(1.0, ge=0, le=100)


class FusionSettings(Section):
    """Reciprocal rank fusion of the channel lists, de-duplication and diversity caps."""

    # rrf: reciprocal ranks; convex: each channel's scores scaled to 0..1 over its list, weighted
    method: Literal["rrf", "convex"] = "rrf"
    # each chunk also gets this share of its file's votes (each channel's vote for its best chunk
    # of the file, ranked among files): channels that agree on a file through different chunks
    file_weight: float = Field(0.0, ge=0, le=10)
    # 20, not the literature's 60: chosen with the weights by the same fusion grid
    rrf_k: float = Field(20.0, gt=0, le=1000)
    weights: ChannelWeights = Field(default_factory=ChannelWeights)
    # a question of plain words (no identifier, quoted phrase, quantity or table intent) is mostly
    # a paraphrase, where the vector channel holds the wins: it leans on that channel instead
    prose_weights: ChannelWeights = Field(
        default_factory=lambda: ChannelWeights(exact=1.0, lexical=1.0, vector=2.0)
    )
    # the question languages the embedding model reads ("*": every language); a plain-word question
    # in another one keeps `weights`. The offline model reads English only
    dense_languages: tuple[str, ...] = Field(("en",), json_schema_extra=OPERATOR)
    # extra weight of an exact hit (a row label or entity equal to the query's)
    exact_boost: float = Field(1.0, ge=0, le=100)
    min_score: float = Field(0.0, ge=0, le=1)
    per_file_cap: int = Field(3, ge=1, le=100)
    per_page_cap: int = Field(2, ge=1, le=100)
    # the caps shape only this many first places (0: the whole list); behind them, fused order.
    # 6, not 0: a knowledge base of a few long manuals kept its answer passages behind weaker ones
    # of other files (natural questions, dev: answer in a passage 0.639 -> 0.731, top 5 0.880 -> 0.861)
    diverse_head: int = Field(6, ge=0, le=1000)
    # two chunks whose normalised text starts with the same this-many characters are one passage
    dedupe_prefix_chars: int = Field(160, ge=1, le=10_000)
    # after the reranker, the vector and the lexical channel's first hit are each kept within this
    # many first places (0: off): fusion never loses what one channel alone put first. Natural
    # questions, dev: answer in a passage .725 -> .739 with 2, 3 or 5; 2 also one more first place
    # (1 of 142), 3 chosen as the smaller move of the reranker's order (docs/v2.md)
    keep_channel_firsts: int = Field(3, ge=0, le=100)


class ExactWeights(Weights):
    """The exact channel's match weight (0..1) of each kind of match; a chunk keeps its best."""

    # a table row whose label is the question's phrase is the answer's own row
    row_label: float = Field(1.0, ge=0, le=1)
    # ... times this when the label is one ordinary English or German word (a glossary's term)
    word_label: float = Field(0.5, ge=0, le=1)
    # an identifier, standard or number of the chunk equal to one of the question's
    entity: float = Field(0.9, ge=0, le=1)
    # a match of the document's number, title or file name stands for its first chunks
    document_number: float = Field(0.85, ge=0, le=1)
    title: float = Field(0.7, ge=0, le=1)
    filename: float = Field(0.6, ge=0, le=1)


class ChannelSettings(Section):
    """How many candidates each channel returns, and how each channel matches and scores."""

    limit: int = Field(50, ge=10, le=500)
    bm25_k1: float = Field(1.2, ge=0, le=10)
    bm25_b: float = Field(0.75, ge=0, le=1)
    # a visible set up to this many chunks is scanned exactly; above it the planner may choose the
    # HNSW walk (with an exact refill), as V1's does with EXACT_SCAN_MAX_ROWS
    exact_scan_max_chunks: int = Field(4000, ge=0, le=10_000_000)
    exact: ExactWeights = Field(default_factory=ExactWeights)
    # a document-level exact match (number, title, file name) stands for this many of its first
    # chunks in reading order: its title page, where such names are printed
    document_match_chunks: int = Field(3, ge=1, le=100)
    # a question naming a document (its title, file name, or an identifier inside either) and asking
    # more than its name: the match stands for this many of that document's chunks the lexical or
    # vector channel found holding the rest of the question, not for its first chunks
    # (app/evidence/query/named_documents.py); 0: the first chunks always
    named_document_chunks: int = Field(3, ge=0, le=100)
    # pg_trgm similarity from which an entity looks like a short identifier-like question: a code
    # written together or apart, or one letter off, reaches it ("widgt 3000" / "widget 3000" 0.64);
    # a code with another number does not ("k 29" / "k 28" 0.43, "iso 9010" / "iso 9001" 0.5)
    trigram_similarity: float = Field(0.6, ge=0, le=1)


class FeatureWeights(Section):
    """Weights of the feature reranker's features."""

    coverage: float = Field(3.0, ge=0, le=100)
    phrases: float = Field(2.0, ge=0, le=100)
    identifiers: float = Field(3.0, ge=0, le=100)
    quantities: float = Field(2.0, ge=0, le=100)
    heading: float = Field(1.0, ge=0, le=100)
    # an identifier's defining entry outranks its passing mentions (a row, heading or entry naming it)
    definition: float = Field(2.0, ge=0, le=100)
    intent: float = Field(1.0, ge=0, le=100)
    # 5, not 2: with 2 the features overruled fusion's first place too often (man pages R@1 0.927
    # fused -> 0.903 reranked); with 5, 0.933 (scripts/bench quality --quick, both measured)
    prior: float = Field(5.0, ge=0, le=100)
    # 0: on the natural questions' dev split every weight tried (2, 4, 8) lowered the top 5
    # (0.861 -> 0.833) and left the answer in a passage and the first file as they were
    dense: float = Field(0.0, ge=0, le=100)


class RerankSettings(Section):
    """Which reranker runs over how large a window of the fused list."""

    backend: Literal["features", "http", "onnx"] = Field("features", json_schema_extra=OPERATOR)
    window: int = Field(25, ge=1, le=MAX_RERANK_WINDOW)
    # the /rerank URL of a Cohere-, Jina- or TEI-style service (backend http)
    url: str | None = Field(None, json_schema_extra=OPERATOR)
    flavour: Literal["cohere", "jina", "tei"] = Field("cohere")
    model: str | None = Field(None, json_schema_extra=OPERATOR)
    api_key: str | None = Field(None, repr=False, json_schema_extra=OPERATOR)
    timeout_ms: int = Field(1500, ge=50, le=30_000)
    # a folder with model.onnx and tokenizer.json (backend onnx)
    onnx_dir: Path | None = Field(None, json_schema_extra=OPERATOR)
    onnx_max_tokens: int = Field(512, ge=16, le=8192)
    features: FeatureWeights = Field(default_factory=FeatureWeights)
    # a glossary row (a one- or two-word ordinary label, at most this many other words, no digit)
    # is never first when the question asks more than its term: the best other of the first five
    # goes first (app/evidence/query/context_rows.py; 0: off). Natural questions, dev: no change
    # (first .690, top 5 .866, answer .725); test: first .651 -> .656
    glossary_row_words: int = Field(12, ge=0, le=100)
    # a chunk OCR read with mean confidence c scores x (1 - ocr_discount * (1 - c)) after any
    # reranker: a misread word is weaker evidence than a text layer's (0: OCR text counts fully)
    ocr_discount: float = Field(0.5, ge=0, le=1)

    @model_validator(mode="after")
    def _backend_needs(self) -> RerankSettings:
        if self.backend == "http" and not self.url:
            raise ValueError("backend http needs RAG_V2__RERANK__URL (the reranking service's /rerank URL)")
        if self.backend == "onnx" and self.onnx_dir is None:
            raise ValueError(
                "backend onnx needs RAG_V2__RERANK__ONNX_DIR (a folder with model.onnx and tokenizer.json)"
            )
        return self

    @property
    def timeout_seconds(self) -> float:
        """The remote reranker's timeout in seconds."""
        return self.timeout_ms / 1000


class SignalWeights(Weights):
    """Weight of each soft refusal signal; signals whose weights reach `refuse_at` refuse."""

    weak_rerank: float = Field(0.5, ge=0, le=100)
    no_agreement: float = Field(0.5, ge=0, le=100)
    rare_terms_missing: float = Field(0.5, ge=0, le=100)
    # 0.5, not 1: term coverage never refuses alone (a paraphrase shares few words with its answer)
    low_coverage: float = Field(0.5, ge=0, le=100)
    low_dense: float = Field(0.5, ge=0, le=100)


class RefusalSettings(Section):
    """Thresholds of the refusal decision (app/evidence/query/refusal.py).

    Soft signals refuse when their weights reach `refuse_at` and one of them is not lexical: with
    every weight 0.5, any two signals of which one is `no_agreement` or `low_dense`.
    """

    min_rerank_score: float = Field(0.6, ge=0, le=1)
    agreement_depth: int = Field(5, ge=1, le=MAX_RERANK_WINDOW)
    # a share, not an idf cut: "rare" must mean the same in a corpus of 10 chunks and of 10 million
    rare_share: float = Field(0.01, ge=0, le=1)
    rare_missing_share: float = Field(0.5, gt=0, le=1)
    min_coverage: float = Field(0.5, ge=0, le=1)
    # coverage is the best of this many candidates: the answer need not be ranked first
    coverage_depth: int = Field(3, ge=1, le=MAX_RERANK_WINDOW)
    # the vector channel's best cosine similarity under which nothing visible is close in meaning;
    # every answerable natural question (dev split) had one of at least 0.26 with the offline model
    min_dense_similarity: float = Field(0.25, ge=-1, le=1)
    signals: SignalWeights = Field(default_factory=SignalWeights)
    refuse_at: float = Field(1.0, gt=0, le=100)
    # how many of the best candidates the term checks look at (the window the reranker saw)
    depth: int = Field(50, ge=1, le=500)


class BoilerplateSettings(Section):
    """Cross-document boilerplate: a block repeated in this many documents of a run is dropped."""

    min_documents: int = Field(5, ge=2, le=100_000)
    min_share: float = Field(0.2, ge=0, le=1)
    # normalised tokens; a longer block is content even when it repeats
    max_tokens: int = Field(64, ge=1, le=10_000)
    # block kinds that can be boilerplate (headings never are: they carry the section structure)
    kinds: tuple[str, ...] = ("paragraph", "list_item", "table", "code", "definition")


class IndexSettings(Section):
    """Chunk sizes of the V2 index (tokens of the embedding model, or characters for HTTP models)."""

    chunk_tokens: int = Field(256, ge=32, le=8192)
    overlap_tokens: int = Field(32, ge=0, le=1024)
    # an HTTP embedding model's tokenizer is unknown here: chunks are cut at this many characters
    http_window_chars: int = Field(1500, ge=200, le=100_000)
    boilerplate: BoilerplateSettings = Field(default_factory=BoilerplateSettings)
    # the lexical channel over Snowball stems (a document's words under its language's stems): off,
    # since on the natural questions it raised the lexical channel's first file (0.604 -> 0.651)
    # but not the answers served (dev: first 0.713 = 0.713, top 5 0.861 -> 0.880, answer in a
    # passage 0.731 -> 0.722); changing it needs a reindex
    stems: bool = False
    # German compounds indexed and asked with their words ("Paketverwaltung" also as "paket" and
    # "verwaltung", app/text/compounds.py); changing it needs a reindex
    compounds: bool = True

    @model_validator(mode="after")
    def _overlap_below_size(self) -> IndexSettings:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError("RAG_V2__INDEX__OVERLAP_TOKENS must be smaller than RAG_V2__INDEX__CHUNK_TOKENS")
        return self


class EvidenceSettings(Section):
    """What a result shows: its chunk, widened by the neighbouring chunks of its section and page."""

    # characters a result's content may grow to with its neighbours (0: the chunk alone); a chunk
    # longer than this is shown whole, alone. 1500, V1's chunk length (rag_api's CHUNK_SIZE): the
    # reader gets no more text per passage than V1 gives it. Natural questions, dev split, answer in a
    # passage: 0 0.759, 1500 0.796, 2000 0.806, 3000 0.815 (longer always finds more, and costs more)
    context_chars: int = Field(1500, ge=0, le=20_000)
    # neighbours read on each side of a result's chunk
    context_reach: int = Field(2, ge=1, le=8)


class V2Settings(Section):
    """All V2 knobs: the index side and the query side."""

    index: IndexSettings = Field(default_factory=IndexSettings)
    channels: ChannelSettings = Field(default_factory=ChannelSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    refusal: RefusalSettings = Field(default_factory=RefusalSettings)
    evidence: EvidenceSettings = Field(default_factory=EvidenceSettings)


def leaf_defaults(value: BaseModel | None = None, prefix: str = ENV_PREFIX) -> dict[str, object]:
    """Every leaf's environment variable name and default (of `value`, else `V2Settings()`), in order."""
    value = V2Settings() if value is None else value
    out: dict[str, object] = {}
    for name in type(value).model_fields:
        env = f"{prefix}{ENV_DELIMITER}{name.upper()}"
        field_value = getattr(value, name)
        if isinstance(field_value, BaseModel):
            out.update(leaf_defaults(field_value, env))
        else:
            out[env] = field_value
    return out
