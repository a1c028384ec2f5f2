"""Search and document routes: `/query`, `/query_multiple`, `/documents`, `/ids`, context, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from fastapi.responses import Response

from app.api.jsonbody import json_bytes
from app.deps import AccessDep, CurrentPrincipal, EntityIdQuery, IngestDep, SearchDep, ServicesDep
from app.errors import BadRequest, NotFound
from app.schemas import (
    AUTHED_ERRORS,
    MAX_FILE_IDS,
    SEARCH_PAIRS_RESPONSE,
    DocumentOut,
    FileId,
    FileIdList,
    MessageResponse,
    QueryMultipleRequest,
    QueryRequest,
    capped_file_ids,
    error_responses,
    too_many_file_ids,
)
from app.search.service import SearchOutcome

router = APIRouter(tags=["documents"])
# the cap on a list of file ids, as the schema shows it; the route checks it, to answer every route's
# too many file ids in one wording (FastAPI's own check says "ids must have at most 1000 items")
_AT_MOST_MAX_FILE_IDS: dict[str, Any] = {"maxItems": MAX_FILE_IDS}

if TYPE_CHECKING:  # built at run time; to a type checker it is a str
    FileIdPath = str
else:
    FileIdPath = Annotated[FileId, Path()]


def _pairs(outcome: SearchOutcome) -> Response:
    """rag_api's `[[document, distance], ...]`, serialised once without a response model pass."""
    hits = outcome.hits
    payload: list[list[Any]] = [
        [
            {"id": str(h.id), "page_content": h.text, "metadata": h.metadata, "type": "Document"},
            h.distance,
        ]
        for h in hits
    ]
    body = json_bytes(payload, floats=[h.distance for h in hits])
    headers = {"Server-Timing": outcome.server_timing()}
    return Response(body, media_type="application/json", headers=headers)


@router.post(
    "/query",
    response_model=None,
    responses={200: SEARCH_PAIRS_RESPONSE, **error_responses(400, 413, *AUTHED_ERRORS)},
)
async def query(body: QueryRequest, principal: CurrentPrincipal, services: ServicesDep) -> Response:
    """Top-k chunks of one file; `[]` when nothing matches or the file is out of scope."""
    # the services in one dependency, not three: FastAPI spends ~15 µs on each it resolves
    # ALLOWLIST_VERIFY: LibreChat's catalogue narrows the allow-list the SQL predicate carries
    scope = await services.access.read_scope(principal, body.entity_id, [body.file_id])
    outcome = await services.search.search(body.query, scope, body.k)
    return _pairs(outcome)


@router.post(
    "/query_multiple",
    response_model=None,
    responses={200: SEARCH_PAIRS_RESPONSE, **error_responses(400, 404, 413, *AUTHED_ERRORS)},
)
async def query_multiple(
    body: QueryMultipleRequest, principal: CurrentPrincipal, services: ServicesDep
) -> Response:
    """Global top-k across up to 1,000 files in one request; 404 when nothing matches."""
    if not body.file_ids:
        raise BadRequest("file_ids must not be empty")
    ids = capped_file_ids(body.file_ids)
    scope = await services.access.read_scope(principal, body.entity_id, ids)
    outcome = await services.search.search(body.query, scope, body.k)
    if not outcome.hits:
        # the search's stages all the same: where a request that found nothing spent its time
        raise NotFound(
            "No documents found for the given query", headers={"Server-Timing": outcome.server_timing()}
        )
    return _pairs(outcome)


@router.get(
    "/documents",
    response_model=list[DocumentOut],
    responses=error_responses(400, 404, *AUTHED_ERRORS, long_url=True),
)
async def get_documents(
    principal: CurrentPrincipal,
    search: SearchDep,
    access: AccessDep,
    ids: Annotated[FileIdList, Query(min_length=1, json_schema_extra=_AT_MOST_MAX_FILE_IDS)],
    entity_id: EntityIdQuery,
) -> Response:
    """All chunks of the given files, in order; 404 if any file is not in scope."""
    if len(ids) > MAX_FILE_IDS:
        raise BadRequest(too_many_file_ids(len(ids)))
    rows = await search.documents(await access.read_scope(principal, entity_id, ids))
    found = {r.file_id for r in rows}
    if any(i not in found for i in ids):
        raise NotFound("One or more IDs not found")
    payload = [{"page_content": r.text, "metadata": r.metadata} for r in rows]
    return Response(json_bytes(payload), media_type="application/json")


@router.delete(
    "/documents",
    response_model=MessageResponse,
    responses=error_responses(400, 404, 413, *AUTHED_ERRORS),
)
async def delete_documents(
    principal: CurrentPrincipal,
    ingest: IngestDep,
    access: AccessDep,
    file_ids: Annotated[FileIdList, Body(json_schema_extra=_AT_MOST_MAX_FILE_IDS)],
    entity_id: EntityIdQuery,
) -> MessageResponse:
    """Delete files (chunks, index rows, originals) the caller owns or uploaded.

    `entity_id` is checked like everywhere else but never widens what may be deleted: LibreChat
    never sends it on delete, and the uploader rule already covers an Agent's knowledge base.
    With ALLOWLIST_VERIFY=mongo, files the rule did not find may still be deleted from the
    namespaces of Agents the caller may edit in LibreChat (author or EDIT bit).
    """
    if len(file_ids) > MAX_FILE_IDS:
        raise BadRequest(too_many_file_ids(len(file_ids)))
    ids = list(dict.fromkeys(file_ids))
    found = await access.delete(principal, ids, ingest.delete)
    if any(i not in found for i in ids):
        raise NotFound("One or more IDs not found")
    count = len(ids)
    return MessageResponse(
        message=f"Documents for {count} file{'s' if count > 1 else ''} deleted successfully"
    )


@router.get(
    "/documents/{file_id}/context", response_model=str, responses=error_responses(400, 404, *AUTHED_ERRORS)
)
async def document_context(
    file_id: FileIdPath,
    principal: CurrentPrincipal,
    search: SearchDep,
    access: AccessDep,
    entity_id: EntityIdQuery,
) -> Response:
    """The file's text for the model: name, then text with page markers (a JSON string)."""
    text = await search.context(await access.read_scope(principal, entity_id, [file_id]))
    if text is None:
        raise NotFound("One or more IDs not found")
    return Response(json_bytes(text), media_type="application/json")


@router.get("/ids", response_model=list[str], responses=error_responses(400, *AUTHED_ERRORS))
async def list_ids(
    principal: CurrentPrincipal, search: SearchDep, access: AccessDep, entity_id: EntityIdQuery
) -> list[str]:
    """File ids in the caller's scope. **Decision**: rag_api lists every id in the collection."""
    # an Agent the caller may not use in LibreChat lists as if not named
    entity = await access.listed_entity(principal, entity_id)
    return await search.file_ids(await access.read_scope(principal, entity, None))
