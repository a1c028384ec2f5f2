"""The MCP tools' arguments, checked by the same pydantic models and checks the HTTP routes use.

`rag_search` builds `/query_multiple`'s `QueryMultipleRequest` (V1) or `/query_v2`'s
`QueryV2Request` with `check_query_v2` (V2); the tools' own arguments are the small models below,
built from the routes' field types (`FileId`, `EntityId`) and bounds. Limits and wording therefore
come from one place: what a route would refuse with 400 or 422, a tool refuses with a JSON-RPC
INVALID_PARAMS error carrying the same sentence (`build`: `bounds_detail` for a value out of its
bounds, else pydantic's message for each argument).
"""

from __future__ import annotations

from typing import Any, TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.mcp.describe import JOBS_MAX, LIST_DEFAULT, LIST_MAX, READ_DEFAULT_CHARS, READ_MAX_CHARS
from app.safe_text import SafeStr
from app.schemas import MAX_ENTITY_ID_CHARS, EntityId, FileId
from app.validation import bounds_detail

M = TypeVar("M", bound=BaseModel)

MAX_OFFSET = 2**31 - 1
MAX_JOB_ID = 2**63 - 1  # a bigint, as GET /admin/jobs bounds `before`
JOBS_DEFAULT = 50


def invalid(message: str) -> MCPError:
    """The JSON-RPC error for arguments the caller must change."""
    return MCPError(INVALID_PARAMS, message)


def _where(loc: tuple[int | str, ...]) -> str:
    """`file_ids[3]` for pydantic's ('file_ids', 3)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "arguments"


def build(model: type[M], **arguments: Any) -> M:
    """`model` built from a tool's arguments; INVALID_PARAMS naming each argument to change."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # located as a route's body fields: bounds_detail drops a leading source ("body", "query", ...)
        # and would otherwise take the `query` argument for one
        sentence = bounds_detail([{**e, "loc": ("body", *e["loc"])} for e in errors])
        problems = sentence or "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in errors)
        raise invalid(problems) from None


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadArguments(_Arguments):
    """`rag_read`: a file as `GET /documents/{file_id}/context` names it, and a window of its text."""

    file_id: FileId
    entity_id: EntityId | None = None
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    limit: int = Field(READ_DEFAULT_CHARS, ge=1, le=READ_MAX_CHARS)


class ListArguments(_Arguments):
    """`rag_list`: a page of the files `GET /ids` would list."""

    cursor: FileId | None = None
    entity_id: EntityId | None = None
    limit: int = Field(LIST_DEFAULT, ge=1, le=LIST_MAX)


class JobsArguments(_Arguments):
    """`rag_jobs`: a page of jobs, as `GET /admin/jobs` pages them."""

    before: int | None = Field(None, ge=1, le=MAX_JOB_ID)
    limit: int = Field(JOBS_DEFAULT, ge=1, le=JOBS_MAX)


class ReindexArguments(_Arguments):
    """`rag_reindex`: a namespace, as `POST /v2/backfill` takes it."""

    namespace: SafeStr = Field(min_length=1, max_length=MAX_ENTITY_ID_CHARS)


def present(**arguments: Any) -> dict[str, Any]:
    """The arguments the caller gave (None: left out, so the model's default applies)."""
    return {name: value for name, value in arguments.items() if value is not None}
