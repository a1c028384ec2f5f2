"""Search and document routes: `/query`, `/query_multiple`, `/documents`, `/ids`, context, delete."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response
from pydantic import StringConstraints

from app.auth import read_namespaces
from app.deps import CurrentPrincipal, IngestDep, SearchDep
from app.errors import BadRequest, NotFound
from app.schemas import (
    MAX_FILE_ID_CHARS,
    MAX_FILE_IDS,
    DocumentOut,
    MessageResponse,
    QueryMultipleRequest,
    QueryRequest,
)
from app.store.chunks import ChunkHit

router = APIRouter(tags=["documents"])

EntityQuery = Annotated[str | None, Query(max_length=MAX_FILE_ID_CHARS)]


def _pairs(hits: Sequence[ChunkHit], timing: str | None = None) -> Response:
    """rag_api's `[[document, distance], ...]`, serialised once without a response model pass."""
    payload: list[list[Any]] = [
        [
            {"id": str(h.id), "page_content": h.text, "metadata": h.metadata, "type": "Document"},
            h.distance,
        ]
        for h in hits
    ]
    headers = {"Server-Timing": timing} if timing else None
    return Response(json.dumps(payload, ensure_ascii=False), media_type="application/json", headers=headers)


@router.post("/query", response_model=list[tuple[dict[str, Any], float]])
async def query(body: QueryRequest, principal: CurrentPrincipal, search: SearchDep) -> Response:
    """Top-k chunks of one file; `[]` when nothing matches or the file is out of scope."""
    scope = search.scope(read_namespaces(principal, body.entity_id), principal.namespace, [body.file_id])
    outcome = await search.search(body.query, scope, body.k)
    return _pairs(outcome.hits, outcome.server_timing())


@router.post("/query_multiple", response_model=list[tuple[dict[str, Any], float]])
async def query_multiple(
    body: QueryMultipleRequest, principal: CurrentPrincipal, search: SearchDep
) -> Response:
    """Global top-k across up to 1,000 files in one request; 404 when nothing matches."""
    ids = list(dict.fromkeys(body.file_ids))
    if not ids:
        raise BadRequest("file_ids must not be empty")
    if len(ids) > MAX_FILE_IDS:
        raise BadRequest(f"At most {MAX_FILE_IDS} file_ids are allowed")
    scope = search.scope(read_namespaces(principal, body.entity_id), principal.namespace, ids)
    outcome = await search.search(body.query, scope, body.k)
    if not outcome.hits:
        raise NotFound("No documents found for the given query")
    return _pairs(outcome.hits, outcome.server_timing())


@router.get("/documents", response_model=list[DocumentOut])
async def get_documents(
    principal: CurrentPrincipal,
    search: SearchDep,
    ids: Annotated[list[str], Query(min_length=1, max_length=MAX_FILE_IDS)],
    entity_id: EntityQuery = None,
) -> Response:
    """All chunks of the given files, in order; 404 if any file is not in scope."""
    owners = read_namespaces(principal, entity_id)
    rows = await search.documents(search.scope(owners, principal.namespace, ids))
    found = {r.file_id for r in rows}
    if any(i not in found for i in ids):
        raise NotFound("One or more IDs not found")
    payload = [{"page_content": r.text, "metadata": r.metadata} for r in rows]
    return Response(json.dumps(payload, ensure_ascii=False), media_type="application/json")


@router.delete("/documents", response_model=MessageResponse)
async def delete_documents(
    principal: CurrentPrincipal,
    ingest: IngestDep,
    search: SearchDep,
    file_ids: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_FILE_ID_CHARS)]], Body(max_length=MAX_FILE_IDS)
    ],
    entity_id: EntityQuery = None,
) -> MessageResponse:
    """Delete files (chunks, index rows, originals) in the caller's delete scope."""
    ids = list(dict.fromkeys(file_ids))
    owners = read_namespaces(principal, entity_id)
    found = await ingest.delete(search.delete_scope(owners, principal.namespace, ids))
    if any(i not in found for i in ids):
        raise NotFound("One or more IDs not found")
    count = len(ids)
    return MessageResponse(
        message=f"Documents for {count} file{'s' if count > 1 else ''} deleted successfully"
    )


@router.get("/documents/{file_id}/context", response_model=str)
async def document_context(
    file_id: str, principal: CurrentPrincipal, search: SearchDep, entity_id: EntityQuery = None
) -> Response:
    """The file's text for the model: name, then text with page markers (a JSON string)."""
    owners = read_namespaces(principal, entity_id)
    text = await search.context(search.scope(owners, principal.namespace, [file_id]))
    if text is None:
        raise NotFound("One or more IDs not found")
    return Response(json.dumps(text, ensure_ascii=False), media_type="application/json")


@router.get("/ids", response_model=list[str])
async def list_ids(
    principal: CurrentPrincipal, search: SearchDep, entity_id: EntityQuery = None
) -> list[str]:
    """File ids in the caller's scope. **Decision**: rag_api lists every id in the collection."""
    return await search.file_ids(search.scope(read_namespaces(principal, entity_id), principal.namespace))
