"""Wire models of `POST /query_v2` and `POST /validate_v2` (field names are the contract, section 6).

Request bounds that the contract answers with 400 (file id count, distinct ids, characters the
database cannot store) are checked by `check_query_v2`, so the route can map them to a `detail`
that says what to change; type errors stay pydantic's 422.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.errors import BadRequest
from app.safe_text import SafeStr, safe_str_list
from app.schemas import MAX_FILE_IDS, too_many_file_ids  # one cap and wording for every route

if TYPE_CHECKING:  # built at run time; to a type checker a list of str
    SafeStrList = list[str]
else:
    # NUL and lone surrogates are refused at the edge (422, app/safe_text.py); lengths are the route's 400s
    SafeStrList = safe_str_list()

MAX_QUERY_CHARS = 4000
MAX_FILE_ID_CHARS = 200
DEFAULT_K = 8
MAX_K = 10
MAX_ANSWER_CHARS = 50_000
MAX_EVIDENCE_ITEMS = 100
MAX_CONSTRAINTS = 50


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class QueryV2Request(_Body):
    """`POST /query_v2`: bounds beyond the types are checked by `check_query_v2`."""

    query: SafeStr
    file_ids: SafeStrList
    entity_id: SafeStr | None = None
    k: int = Field(DEFAULT_K, strict=True)
    index_version: SafeStr | None = Field(None, max_length=200)
    debug: bool = Field(False, strict=True)


def check_query_v2(request: QueryV2Request, *, files_later: bool = False) -> QueryV2Request:
    """The request with distinct file ids in first-seen order; BadRequest naming what to change.

    `files_later`: the request names no files yet (MCP's `rag_search` without file ids searches
    every file the caller can read, listed afterwards), so an empty list is not refused.
    """
    query = request.query
    if not query.strip():
        raise BadRequest("query must not be empty")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"query must be at most {MAX_QUERY_CHARS} characters")
    if not request.file_ids and not files_later:
        raise BadRequest("file_ids must not be empty")
    distinct = list(dict.fromkeys(request.file_ids))
    if len(distinct) > MAX_FILE_IDS:
        raise BadRequest(too_many_file_ids(len(distinct)))
    for file_id in distinct:
        if not 1 <= len(file_id) <= MAX_FILE_ID_CHARS:
            raise BadRequest(f"each file id must be 1 to {MAX_FILE_ID_CHARS} characters")
    if not 1 <= request.k <= MAX_K:
        raise BadRequest(f"k must be between 1 and {MAX_K}")
    return request.model_copy(update={"file_ids": distinct})


class EvidenceItem(BaseModel):
    """One `/query_v2` result (the names the overlay's client reads, plus `page_label`)."""

    model_config = ConfigDict(extra="ignore")

    citation_id: str
    file_id: str
    filename: str = ""
    title: str | None = None
    content: str
    page: int | None = None
    page_label: str | None = None
    section: list[str] = Field(default_factory=list)
    chunk_kind: Literal["prose", "table_row"] = "prose"
    table_title: str | None = None
    row_label: str | None = None
    headers: list[str] = Field(default_factory=list)
    row_values: list[str] = Field(default_factory=list)
    units: list[str | None] = Field(default_factory=list)
    footnotes: list[str] = Field(default_factory=list)
    source_type: str | None = None
    channels: list[str] = Field(default_factory=list)
    score: float = Field(ge=0.0, le=1.0)
    language: str | None = None
    publication_date: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class QueryV2Response(BaseModel):
    """`POST /query_v2` answer; `debug` is present only for admins who asked for it."""

    route: Literal["v2"] = "v2"
    index_version: str | None
    results: list[EvidenceItem]
    degraded: bool = Field(
        False,
        description="the answer may lack something: a search channel failed, or files of the request "
        "are stored but not yet in the answering index run (`missing_files`)",
    )
    degraded_detail: str | None = Field(
        None,
        description="why the answer is degraded, when it is: files not indexed yet (or only in a replaced "
        "version, never cited), files whose indexing failed and why, search channels left out",
    )
    missing_files: int = Field(
        0, description="files of the request that are stored but not yet indexed by the answering run"
    )
    safe_refusal: str | None = None
    debug: dict[str, Any] | None = None


class EvidenceInput(BaseModel):
    """An evidence item as `/validate_v2` receives it (as returned by `/query_v2`; extras ignored)."""

    model_config = ConfigDict(extra="ignore")

    citation_id: SafeStr = Field(max_length=50)
    content: SafeStr = Field(max_length=100_000)
    file_id: SafeStr | None = Field(None, max_length=MAX_FILE_ID_CHARS)
    filename: SafeStr | None = Field(None, max_length=1024)
    title: SafeStr | None = Field(None, max_length=2000)
    section: SafeStrList = Field(default_factory=list, max_length=50)
    table_title: SafeStr | None = Field(None, max_length=2000)
    row_label: SafeStr | None = Field(None, max_length=2000)
    headers: SafeStrList = Field(default_factory=list, max_length=500)
    row_values: SafeStrList = Field(default_factory=list, max_length=500)
    units: list[SafeStr | None] = Field(default_factory=list, max_length=500)
    footnotes: SafeStrList = Field(default_factory=list, max_length=100)


class ValidateV2Request(_Body):
    """`POST /validate_v2`."""

    answer: SafeStr = Field(max_length=MAX_ANSWER_CHARS)
    evidence: list[EvidenceInput] = Field(default_factory=list, max_length=MAX_EVIDENCE_ITEMS)
    mandatory_constraints: SafeStrList = Field(default_factory=list, max_length=MAX_CONSTRAINTS)
    safe_refusal_expected: bool = Field(False, strict=True)


class Violation(BaseModel):
    """One finding of the validator."""

    code: str
    severity: Literal["error", "warning"]
    message: str
    value: str | None = None


class ValidateV2Response(BaseModel):
    """`POST /validate_v2` answer: `refuse` on any error, `qualify` on warnings only, else `pass`."""

    verdict: Literal["pass", "qualify", "refuse"]
    violations: list[Violation]
