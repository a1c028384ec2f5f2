"""Wire models of the V1 (rag_api-compatible) routes. Field names are the contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from app.errors import BadRequest
from app.safe_text import SafeStr, safe_str, safe_str_list

MAX_QUERY_CHARS = 20_000
MAX_FILE_ID_CHARS = 512
MAX_ENTITY_ID_CHARS = 512
MAX_FILE_IDS = 1000
DEFAULT_K = 4  # rag_api's
MAX_K = 100
# more distinct file ids than a request may name: CONTRACT.md pins these words on /query_multiple
TOO_MANY_FILE_IDS = f"At most {MAX_FILE_IDS} file_ids are allowed"


def too_many_file_ids(given: int) -> str:
    """The one wording for too many file ids, on every route and MCP tool that caps them: the limit
    (the contract's sentence), the count given and what to do. `/query_multiple` answers the
    sentence alone, as the contract pins it."""
    return f"{TOO_MANY_FILE_IDS} ({given} given); send at most {MAX_FILE_IDS} per request"


ENTITY_ID_FIELD_DESCRIPTION = (
    "A LibreChat Agent id (agent_...) whose files the caller may also read; it must match "
    "ENTITY_ID_PATTERN (400 otherwise). Empty or null means absent."
)
if TYPE_CHECKING:  # the validated aliases are built at run time; to a type checker str and list of str
    FileId = str
    EntityId = str
    FileIdList = list[str]
else:
    FileId = safe_str(min_length=1, max_length=MAX_FILE_ID_CHARS)
    EntityId = safe_str(max_length=MAX_ENTITY_ID_CHARS)
    FileIdList = safe_str_list(min_length=1, max_length=MAX_FILE_ID_CHARS)


class _Body(BaseModel):
    # unknown keys are ignored, as rag_api does
    model_config = ConfigDict(extra="ignore")


class QueryRequest(_Body):
    """`POST /query`."""

    query: SafeStr = Field(max_length=MAX_QUERY_CHARS)
    file_id: SafeStr = Field(min_length=1, max_length=MAX_FILE_ID_CHARS)
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K)
    entity_id: SafeStr | None = Field(
        None, max_length=MAX_ENTITY_ID_CHARS, description=ENTITY_ID_FIELD_DESCRIPTION
    )


class QueryMultipleRequest(_Body):
    """`POST /query_multiple`: k is global across all files."""

    query: SafeStr = Field(max_length=MAX_QUERY_CHARS)
    # emptiness and the 1,000 cap on *distinct* ids are checked by the route, to answer 400 as the
    # contract says; the schema still says "at least one"
    file_ids: FileIdList = Field(
        json_schema_extra={"minItems": 1},
        description=f"1 to {MAX_FILE_IDS} distinct file ids (400 when empty or more)",
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K)
    entity_id: SafeStr | None = Field(
        None, max_length=MAX_ENTITY_ID_CHARS, description=ENTITY_ID_FIELD_DESCRIPTION
    )


def capped_file_ids(file_ids: list[str]) -> list[str]:
    """`file_ids` as a search takes them: 400 beyond MAX_FILE_IDS distinct ids.

    The cap counts distinct ids; up to the cap no count is needed (the scope drops repeats itself),
    which spares ~30 µs of hashing at 1,000 ids. Past it the repeats are dropped.
    """
    if len(file_ids) > MAX_FILE_IDS:
        file_ids = list(dict.fromkeys(file_ids))
        if len(file_ids) > MAX_FILE_IDS:
            raise BadRequest(TOO_MANY_FILE_IDS)  # the contract's words, without the count
    return file_ids


class LocalEmbedRequest(_Body):
    """`POST /local/embed`: a file already in RAG_UPLOAD_DIR."""

    filepath: SafeStr = Field(min_length=1, max_length=4096)
    filename: SafeStr = Field(min_length=1, max_length=1024)
    file_content_type: SafeStr | None = Field(None, max_length=255)
    file_id: SafeStr = Field(min_length=1, max_length=MAX_FILE_ID_CHARS)


class _Stored(Protocol):
    """What an ingest reports (`app.ingest.pipeline.EmbedOutcome`), as the answer reads it."""

    @property
    def file_id(self) -> str: ...
    @property
    def known_type(self) -> bool: ...
    @property
    def ocr_pages(self) -> tuple[int, ...]: ...
    @property
    def empty_pages(self) -> tuple[int, ...]: ...
    @property
    def derived(self) -> Mapping[str, Mapping[str, object]]: ...


class EmbedResponse(BaseModel):
    """Success answer of the embed routes (LibreChat needs truthy `status` and `known_type`).

    `ocr_pages` and `empty_pages` appear only when they say something (the routes leave out None):
    LibreChat ignores them, a person or script uploading a scan reads what OCR did.
    """

    status: bool = True
    message: str = "File processed successfully."
    file_id: str
    filename: str
    known_type: bool = True
    ocr_pages: list[int] | None = Field(
        None, description="pages (1-based; a picture's frames) whose text OCR read"
    )
    empty_pages: list[int] | None = Field(
        None,
        description="pages (1-based) that show a picture but gave no text: OCR off, nothing found, or "
        "a limit reached (the service log says which)",
    )
    evidence: dict[str, Any] | None = Field(
        None,
        description="for a namespace evidence search serves: `searchable` true when /query_v2 answers from "
        "this version already (with its `chunks`), else false with `queued` and the `reason` its "
        "staging job does it instead",
    )

    @classmethod
    def of(cls, outcome: _Stored, filename: str) -> EmbedResponse:
        """The answer for a stored upload."""
        evidence = outcome.derived.get("evidence")
        return cls(
            file_id=outcome.file_id,
            filename=filename,
            known_type=outcome.known_type,
            ocr_pages=list(outcome.ocr_pages) or None,
            empty_pages=list(outcome.empty_pages) or None,
            evidence=dict(evidence) if evidence is not None else None,
        )


class TextResponse(BaseModel):
    """`POST /text`."""

    text: str
    file_id: str
    filename: str
    known_type: bool = True


class DocumentOut(BaseModel):
    """A chunk as `GET /documents` returns it."""

    page_content: str
    metadata: dict[str, Any]


class SearchDocument(BaseModel):
    """A chunk inside a query result pair (langchain's Document serialisation)."""

    id: str | None
    page_content: str
    metadata: dict[str, Any]
    type: Literal["Document"] = "Document"


class MessageResponse(BaseModel):
    """`DELETE /documents`."""

    message: str


class HealthResponse(BaseModel):
    """`GET /health`."""

    status: Literal["UP", "DOWN"]


class ErrorResponse(BaseModel):
    """Every error but validation: a `detail` that says what to change (5xx add a request id)."""

    detail: str
    request_id: str | None = Field(None, description="only on 5xx answers; quote it to the operator")


class ValidationIssue(BaseModel):
    """One problem with the request (pydantic's error shape, without the input)."""

    model_config = ConfigDict(extra="allow")

    type: str
    loc: list[str | int]
    msg: str


class ValidationErrorResponse(BaseModel):
    """422: the request does not fit the schema (or holds NUL / invalid Unicode)."""

    detail: list[ValidationIssue]
    message: Literal["Request validation failed"]


_ERROR_TEXT: dict[int, str] = {
    400: "Bad request: an entity_id that is not an Agent id (ENTITY_ID_PATTERN), or a body that "
    "cannot be served as asked",
    401: "Missing or invalid Authorization header, or an invalid token",
    403: "The caller is not allowed to use this route",
    404: "Nothing in the caller's scope matches",
    409: "The resource is not in a state that allows this (for example an index run that is not complete)",
    413: "The body is larger than its limit (MAX_JSON_BODY_BYTES, or MAX_UPLOAD_BYTES for uploads)",
    415: "The file cannot be turned into text",
    422: "Validation failed: a missing or malformed field, NUL or invalid Unicode in a string, or a "
    "JSON body that is not UTF-8",
    500: "Unexpected server error (never carries exception text; quote request_id)",
    502: "A dependency (embedding provider, file storage) failed",
    503: "The service is starting, a dependency is temporarily unavailable, or the database is down",
}


_FILE_422_TEXT = (
    "; or, for an uploaded file, a file that yields no text (blank, or a scan OCR could not read) or "
    "breaks a parsing limit (PARSE_*), answered with a `detail` sentence"
)


def error_responses(
    *codes: int, long_url: bool = False, file_errors: bool = False
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for the error statuses a route can answer, with their body models.

    `file_errors`: the route parses an uploaded file, so its 422 may also be a sentence about the
    file (no extractable text, a parsing limit) rather than a list of field errors.

    `long_url`: the route takes a list in its query string, so a schema-valid URL can pass the HTTP
    server's request-line limit (~64 KB), which the server itself answers with a text/plain 400.
    """
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        model: Any = ValidationErrorResponse if code == 422 else ErrorResponse
        description = _ERROR_TEXT[code]
        if code == 422 and file_errors:
            model = ValidationErrorResponse | ErrorResponse
            description += _FILE_422_TEXT
        out[code] = {"model": model, "description": description}
    if long_url and 400 in out:
        out[400]["description"] += (
            "; a URL longer than ~64 KB is refused by the HTTP server itself as text/plain "
            "(send fewer ids per request)"
        )
        out[400]["content"] = {"text/plain": {"schema": {"type": "string"}}}
    return out


# `[[document, distance], ...]` without `prefixItems` (which some OpenAPI tools still misread)
SEARCH_PAIRS_RESPONSE: dict[str, Any] = {
    "description": "`[[document, cosine distance], ...]`, nearest first; `[]` when nothing is in scope",
    "content": {
        "application/json": {
            "schema": {
                "type": "array",
                "items": {
                    "type": "array",
                    "minItems": 2,
                    "maxItems": 2,
                    "items": {"anyOf": [SearchDocument.model_json_schema(), {"type": "number"}]},
                },
            }
        }
    },
}


# every route behind authentication can answer these
AUTHED_ERRORS = (401, 422, 500, 503)
