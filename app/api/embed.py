"""Upload routes: `/embed`, `/embed-upload`, `/local/embed`, `/text`."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request

from app.auth import Principal, write_owner
from app.config import Settings
from app.deps import CurrentPrincipal, IngestDep, SearchDep, SettingsDep
from app.errors import BadRequest, InvalidInput, NotFound, PayloadTooLarge
from app.ingest.pipeline import IngestService, SourceFile
from app.ingest.upload import SavedUpload, check_content_length, receive_multipart
from app.schemas import MAX_FILE_ID_CHARS, EmbedResponse, LocalEmbedRequest, TextResponse
from app.search.service import SearchService

router = APIRouter(tags=["upload"])


def _multipart_schema(file_field: str, *, with_entity: bool = True) -> dict[str, Any]:
    """OpenAPI description of a multipart body we parse by hand (streamed to disk)."""
    props: dict[str, Any] = {
        "file_id": {"type": "string"},
        file_field: {"type": "string", "format": "binary"},
    }
    if with_entity:
        props["entity_id"] = {"type": "string"}
        props["storage_metadata"] = {"type": "string", "description": "JSON object"}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {"type": "object", "required": ["file_id", file_field], "properties": props}
                }
            },
        }
    }


async def _receive(request: Request, settings: Settings, file_field: str) -> SavedUpload:
    check_content_length(request.headers.get("content-length"), settings.max_upload_bytes)
    return await receive_multipart(
        request.headers.get("content-type"),
        request.stream(),
        file_field=file_field,
        dest_dir=settings.data_dir.resolve() / "tmp",
        max_upload_bytes=settings.max_upload_bytes,
    )


def _file_id(fields: dict[str, str]) -> str:
    value = fields.get("file_id", "").strip()
    if not value:
        raise InvalidInput([{"type": "missing", "loc": ["body", "file_id"], "msg": "Field required"}])
    if len(value) > MAX_FILE_ID_CHARS:
        raise InvalidInput(
            [
                {
                    "type": "string_too_long",
                    "loc": ["body", "file_id"],
                    "msg": f"String should have at most {MAX_FILE_ID_CHARS} characters",
                }
            ]
        )
    return value


def _storage_metadata(fields: dict[str, str]) -> dict[str, Any] | None:
    raw = fields.get("storage_metadata")
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise InvalidInput(
            [
                {
                    "type": "json_invalid",
                    "loc": ["body", "storage_metadata"],
                    "msg": "storage_metadata must be a JSON object encoded as a string",
                }
            ]
        )
    return value


async def _embed_multipart(
    request: Request,
    principal: Principal,
    ingest: IngestService,
    search: SearchService,
    settings: Settings,
    file_field: str,
) -> EmbedResponse:
    upload = await _receive(request, settings, file_field)
    try:
        file_id = _file_id(upload.fields)
        storage_metadata = _storage_metadata(upload.fields)
        owner = write_owner(principal, upload.fields.get("entity_id"))
        outcome = await ingest.ingest(
            SourceFile(upload.path, upload.filename, upload.content_type, upload.size, upload.sha256),
            file_id=file_id,
            owner=owner,
            uploader=principal.namespace,
            storage_metadata=storage_metadata,
        )
    finally:
        upload.cleanup()
    search.note_stored(outcome.record)
    return EmbedResponse(file_id=outcome.file_id, filename=upload.filename, known_type=outcome.known_type)


@router.post("/embed", response_model=EmbedResponse, openapi_extra=_multipart_schema("file"))
async def embed(
    request: Request, principal: CurrentPrincipal, ingest: IngestDep, search: SearchDep, settings: SettingsDep
) -> EmbedResponse:
    """Upload a file (multipart `file_id`, `file`, `entity_id?`, `storage_metadata?`) and index it."""
    return await _embed_multipart(request, principal, ingest, search, settings, "file")


@router.post("/embed-upload", response_model=EmbedResponse, openapi_extra=_multipart_schema("uploaded_file"))
async def embed_upload(
    request: Request, principal: CurrentPrincipal, ingest: IngestDep, search: SearchDep, settings: SettingsDep
) -> EmbedResponse:
    """Same as `/embed`, with the file part named `uploaded_file`."""
    return await _embed_multipart(request, principal, ingest, search, settings, "uploaded_file")


@router.post("/text", response_model=TextResponse, openapi_extra=_multipart_schema("file", with_entity=False))
async def extract_text(
    request: Request, principal: CurrentPrincipal, ingest: IngestDep, settings: SettingsDep
) -> TextResponse:
    """Return the text of an uploaded file; nothing is stored."""
    upload = await _receive(request, settings, "file")
    try:
        file_id = _file_id(upload.fields)
        text = await ingest.extract_text(
            SourceFile(upload.path, upload.filename, upload.content_type, upload.size, upload.sha256)
        )
    finally:
        upload.cleanup()
    return TextResponse(text=text, file_id=file_id, filename=upload.filename)


def _resolve_local(settings: Settings, filepath: str) -> Path:
    base = settings.upload_dir
    candidate = (base / filepath).resolve()
    if not candidate.is_relative_to(base):
        raise BadRequest("filepath must point inside RAG_UPLOAD_DIR")
    if not candidate.is_file():
        raise NotFound("File not found")
    return candidate


def _hash_file(path: Path, limit: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while block := fh.read(1024 * 1024):
            size += len(block)
            if size > limit:
                raise PayloadTooLarge(
                    f"The file is larger than MAX_UPLOAD_BYTES ({limit} bytes); use a smaller file"
                )
            digest.update(block)
    return size, digest.hexdigest()


@router.post("/local/embed", response_model=EmbedResponse)
async def embed_local(
    body: LocalEmbedRequest,
    principal: CurrentPrincipal,
    ingest: IngestDep,
    search: SearchDep,
    settings: SettingsDep,
    entity_id: str | None = Query(None, max_length=MAX_FILE_ID_CHARS),
) -> EmbedResponse:
    """Index a file that already sits in RAG_UPLOAD_DIR."""
    path = _resolve_local(settings, body.filepath)
    size, sha = await asyncio.to_thread(_hash_file, path, settings.max_upload_bytes)
    outcome = await ingest.ingest(
        SourceFile(path, body.filename, body.file_content_type, size, sha),
        file_id=body.file_id,
        owner=write_owner(principal, entity_id),
        uploader=principal.namespace,
    )
    search.note_stored(outcome.record)
    return EmbedResponse(file_id=outcome.file_id, filename=body.filename, known_type=outcome.known_type)
