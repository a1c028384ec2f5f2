"""Upload routes: `/embed`, `/embed-upload`, `/local/embed`, `/text`."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from app.access.namespaces import check_entity_id, write_owner
from app.access.principal import Principal
from app.api.multipart import MAX_FIELD_BYTES, SavedUpload, check_content_length, receive_multipart
from app.config import Settings
from app.deps import CurrentPrincipal, EntityIdQuery, IngestDep, SettingsDep, UploadsDep
from app.errors import BadRequest, InvalidInput, NotFound, PayloadTooLarge
from app.ingest.pipeline import SourceFile
from app.jobs.schemas import JobAccepted
from app.jobs.uploads import Queued, Uploads
from app.safe_text import NON_BLANK_NUL_FREE_PATTERN, NUL_FREE_PATTERN, UNSAFE_ERROR_TYPE, unsafe_in_json
from app.schemas import (
    AUTHED_ERRORS,
    ENTITY_ID_FIELD_DESCRIPTION,
    MAX_ENTITY_ID_CHARS,
    MAX_FILE_ID_CHARS,
    EmbedResponse,
    LocalEmbedRequest,
    TextResponse,
    error_responses,
)

router = APIRouter(tags=["upload"])

# Routes that stream a multipart body to disk under MAX_UPLOAD_BYTES (the JSON body cap skips them).
STREAMED_UPLOAD_PATHS = frozenset({"/embed", "/embed-upload", "/text"})
_EMBED_FIELDS = ("file_id", "entity_id", "storage_metadata")
_TEXT_FIELDS = ("file_id",)


def _multipart_schema(file_field: str, *, with_entity: bool = True) -> dict[str, Any]:
    """OpenAPI description of a multipart body we parse by hand (streamed to disk).

    The constraints are the ones the parser and the route enforce: `file_id` must hold more than
    whitespace, no text field may hold NUL, and text fields are at most MAX_FIELD_BYTES.
    """
    props: dict[str, Any] = {
        "file_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_FILE_ID_CHARS,
            "pattern": NON_BLANK_NUL_FREE_PATTERN,
        },
        file_field: {"type": "string", "format": "binary", "description": "the file (its name: no NUL)"},
    }
    if with_entity:
        props["entity_id"] = {
            "type": "string",
            "maxLength": MAX_ENTITY_ID_CHARS,
            "pattern": NUL_FREE_PATTERN,  # the app's ENTITY_ID_PATTERN replaces this in /openapi.json
            "description": ENTITY_ID_FIELD_DESCRIPTION,
        }
        props["storage_metadata"] = {
            "type": "string",
            "maxLength": MAX_FIELD_BYTES,
            "pattern": NUL_FREE_PATTERN,
            "description": "a JSON object, encoded as a string (422 otherwise)",
        }
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


async def _receive(
    request: Request, settings: Settings, file_field: str, text_fields: tuple[str, ...]
) -> SavedUpload:
    check_content_length(request.headers.get("content-length"), settings.max_upload_bytes)
    return await receive_multipart(
        request.headers.get("content-type"),
        request.stream(),
        file_field=file_field,
        dest_dir=settings.data_dir.resolve() / "tmp",
        max_upload_bytes=settings.max_upload_bytes,
        text_fields=text_fields,
    )


def _too_long(name: str, limit: int) -> InvalidInput:
    return InvalidInput(
        [
            {
                "type": "string_too_long",
                "loc": ["body", name],
                "msg": f"String should have at most {limit} characters",
            }
        ]
    )


def _file_id(fields: dict[str, str]) -> str:
    raw = fields.get("file_id", "")
    if len(raw) > MAX_FILE_ID_CHARS:
        raise _too_long("file_id", MAX_FILE_ID_CHARS)
    value = raw.strip()
    if not value:
        raise InvalidInput([{"type": "missing", "loc": ["body", "file_id"], "msg": "Field required"}])
    return value


def _entity_id(fields: dict[str, str], settings: Settings) -> str | None:
    raw = fields.get("entity_id")
    if raw is not None and len(raw) > MAX_ENTITY_ID_CHARS:
        raise _too_long("entity_id", MAX_ENTITY_ID_CHARS)
    return check_entity_id(raw, settings.entity_id_regex)


def _storage_metadata(fields: dict[str, str]) -> dict[str, Any] | None:
    raw = fields.get("storage_metadata")
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # malformed, or nested deeper than the parser's stack
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
    # stored as jsonb, which refuses NUL (`\u0000`) and lone surrogates anywhere inside
    reason = unsafe_in_json(value)
    if reason is not None:
        raise InvalidInput(
            [
                {
                    "type": UNSAFE_ERROR_TYPE,
                    "loc": ["body", "storage_metadata"],
                    "msg": f"storage_metadata: {reason}",
                }
            ]
        )
    return value


async def _embed_multipart(
    request: Request,
    principal: Principal,
    uploads: Uploads,
    settings: Settings,
    file_field: str,
    *,
    run_async: bool = False,
) -> EmbedResponse | JSONResponse:
    upload = await _receive(request, settings, file_field, _EMBED_FIELDS)
    try:
        file_id = _file_id(upload.fields)
        entity_id = _entity_id(upload.fields, settings)
        storage_metadata = _storage_metadata(upload.fields)
        outcome = await uploads.accept(
            SourceFile(upload.path, upload.filename, upload.content_type, upload.size, upload.sha256),
            file_id=file_id,
            owner=write_owner(principal, entity_id),
            uploader=principal.namespace,
            storage_metadata=storage_metadata,
            # opt-in only: LibreChat's /embed stays synchronous unless the operator asks otherwise
            background=run_async,
        )
    finally:
        upload.cleanup()
    if isinstance(outcome, Queued):
        status_url = f"/jobs/{outcome.job_id}"
        accepted = JobAccepted(
            job_id=outcome.job_id, file_id=file_id, filename=upload.filename, status_url=status_url
        )
        return JSONResponse(accepted.model_dump(), status_code=202, headers={"Location": status_url})
    return EmbedResponse.of(outcome, upload.filename)


_UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    **error_responses(400, 413, 415, 502, *AUTHED_ERRORS, file_errors=True),
    202: {
        "model": JobAccepted,
        "description": "Accepted as a background job (only with `?async=true`, or above "
        "EMBED_ASYNC_OVER_BYTES when set): poll `status_url`",
    },
}
AsyncQuery = Annotated[
    bool,
    Query(
        alias="async",
        description="index in the background: answer 202 with a job id at once (the synchronous 200 "
        "is the default, as LibreChat expects)",
    ),
]


@router.post(
    "/embed",
    response_model=EmbedResponse,
    response_model_exclude_none=True,
    openapi_extra=_multipart_schema("file"),
    responses=_UPLOAD_ERRORS,
)
async def embed(
    request: Request,
    principal: CurrentPrincipal,
    uploads: UploadsDep,
    settings: SettingsDep,
    run_async: AsyncQuery = False,
) -> EmbedResponse | JSONResponse:
    """Upload a file (multipart `file_id`, `file`, `entity_id?`, `storage_metadata?`) and index it."""
    return await _embed_multipart(request, principal, uploads, settings, "file", run_async=run_async)


@router.post(
    "/embed-upload",
    response_model=EmbedResponse,
    response_model_exclude_none=True,
    openapi_extra=_multipart_schema("uploaded_file"),
    responses=_UPLOAD_ERRORS,
)
async def embed_upload(
    request: Request,
    principal: CurrentPrincipal,
    uploads: UploadsDep,
    settings: SettingsDep,
    run_async: AsyncQuery = False,
) -> EmbedResponse | JSONResponse:
    """Same as `/embed`, with the file part named `uploaded_file`."""
    return await _embed_multipart(request, principal, uploads, settings, "uploaded_file", run_async=run_async)


@router.post(
    "/text",
    response_model=TextResponse,
    openapi_extra=_multipart_schema("file", with_entity=False),
    responses=error_responses(400, 413, 415, *AUTHED_ERRORS, file_errors=True),
)
async def extract_text(
    request: Request, principal: CurrentPrincipal, ingest: IngestDep, settings: SettingsDep
) -> TextResponse:
    """Return the text of an uploaded file; nothing is stored."""
    upload = await _receive(request, settings, "file", _TEXT_FIELDS)
    try:
        file_id = _file_id(upload.fields)
        text = await ingest.extract_text(
            SourceFile(upload.path, upload.filename, upload.content_type, upload.size, upload.sha256)
        )
    finally:
        upload.cleanup()
    return TextResponse(text=text, file_id=file_id, filename=upload.filename)


# The OS said the file does not exist; anything else it refuses (too long, a loop, not a
# directory on the way, permissions) is the caller's path being unusable: 400, never a 500.
_MISSING_ERRNOS = frozenset({errno.ENOENT})


def _unusable_path(exc: OSError) -> BadRequest | NotFound:
    if exc.errno in _MISSING_ERRNOS:
        return NotFound("File not found")
    reason = os.strerror(exc.errno) if exc.errno else "the path cannot be used"
    return BadRequest(f"filepath cannot be opened ({reason}); give a path to a file inside RAG_UPLOAD_DIR")


def _resolve_local(settings: Settings, filepath: str) -> Path:
    base = settings.upload_dir
    try:
        candidate = (base / filepath).resolve()
        if not candidate.is_relative_to(base):
            raise BadRequest("filepath must point inside RAG_UPLOAD_DIR")
        if not candidate.is_file():
            raise NotFound("File not found")
    except OSError as exc:
        raise _unusable_path(exc) from None
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise _unusable_path(OSError(errno.ELOOP, os.strerror(errno.ELOOP))) from None
    except ValueError:  # e.g. an embedded NUL, should one ever get past the schema
        raise BadRequest("filepath cannot be opened; give a path to a file inside RAG_UPLOAD_DIR") from None
    return candidate


def _hash_file(path: Path, limit: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise _unusable_path(exc) from None
    with fh:
        while block := fh.read(1024 * 1024):
            size += len(block)
            if size > limit:
                raise PayloadTooLarge(
                    f"The file is larger than MAX_UPLOAD_BYTES ({limit} bytes); use a smaller file"
                )
            digest.update(block)
    return size, digest.hexdigest()


@router.post(
    "/local/embed",
    response_model=EmbedResponse,
    response_model_exclude_none=True,
    responses=error_responses(400, 404, 413, 415, 502, *AUTHED_ERRORS, file_errors=True),
)
async def embed_local(
    body: LocalEmbedRequest,
    principal: CurrentPrincipal,
    ingest: IngestDep,
    settings: SettingsDep,
    entity_id: EntityIdQuery,
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
    return EmbedResponse.of(outcome, body.filename)
