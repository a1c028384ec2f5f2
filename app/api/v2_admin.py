"""Admin routes of the V2 index: runs, staging, activation, backfill and status (`/v2/...`).

Every route needs an admin (RAG_ADMIN_USER_IDS or a token with `role: "ADMIN"`); anyone else gets
403. The work itself is evidence search's (`Evidence`, app/evidence/service.py); this module only
maps HTTP to it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from app.api.multipart import check_content_length, receive_multipart
from app.deps import AdminPrincipal, EvidenceDep, SettingsDep
from app.errors import BadRequest, InvalidInput, UnsupportedFileType
from app.evidence.index.lifecycle import RunStatus
from app.evidence.index.sources import Derivative
from app.evidence.index.staging import FileOutcome
from app.safe_text import NON_BLANK_NUL_FREE_PATTERN, SafeStr, safe_str, safe_str_list
from app.schemas import AUTHED_ERRORS, MAX_ENTITY_ID_CHARS, MAX_FILE_ID_CHARS, error_responses

router = APIRouter(prefix="/v2", tags=["v2 index (admin)"])

# Routes that stream a multipart body to disk under MAX_UPLOAD_BYTES (the JSON body cap skips them).
STREAMED_UPLOAD_PATHS = frozenset({"/v2/derivative"})
MAX_RUN_FILES = 100_000
MAX_RUN_ID = 2**63 - 1
INDEX_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_DERIVATIVE_FIELDS = ("run_id", "file_id", "sha256")
_DERIVATIVE_SUFFIXES = (".txt", ".md", ".markdown", ".text")

if TYPE_CHECKING:
    FileIds = list[str]
    RunIdPath = int
    NamespaceQuery = str
else:
    FileIds = safe_str_list(min_length=1, max_length=MAX_FILE_ID_CHARS)
    RunIdPath = Annotated[int, Path(ge=1, le=MAX_RUN_ID, description="the run's id")]
    NamespaceQuery = safe_str(min_length=1, max_length=MAX_ENTITY_ID_CHARS)


# --- wire models ---------------------------------------------------------------------------------


class StartRunRequest(BaseModel):
    """`POST /v2/runs`: a run of `namespace` that must contain `file_ids`."""

    namespace: SafeStr = Field(
        min_length=1,
        max_length=MAX_ENTITY_ID_CHARS,
        description="the owner whose files are indexed: an Agent id or a user id",
    )
    index_version: SafeStr | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=INDEX_VERSION_PATTERN,
        description="default RAG_V2_INDEX_VERSION",
    )
    file_ids: FileIds = Field(min_length=1, max_length=MAX_RUN_FILES)


class BackfillRequest(BaseModel):
    """`POST /v2/backfill`: build a run of `namespace` from stored originals, as jobs of the queue."""

    namespace: SafeStr = Field(min_length=1, max_length=MAX_ENTITY_ID_CHARS)
    index_version: SafeStr | None = Field(None, min_length=1, max_length=200, pattern=INDEX_VERSION_PATTERN)
    file_ids: FileIds | None = Field(
        None, min_length=1, max_length=MAX_RUN_FILES, description="default: every file of the namespace"
    )
    activate: bool = Field(True, description="activate the run once every file is staged")
    force: bool = Field(
        False, description="parse and embed every file again: link no document of an earlier run"
    )


class StageRequest(BaseModel):
    """`POST /v2/runs/{run_id}/stage`: stage one expected file from its stored original."""

    file_id: SafeStr = Field(min_length=1, max_length=MAX_FILE_ID_CHARS)


class FailRequest(BaseModel):
    """`POST /v2/runs/{run_id}/fail`."""

    reason: SafeStr = Field("failed by an admin", min_length=1, max_length=2000)


class RunOut(BaseModel):
    """An index run."""

    run_id: int
    namespace: str
    index_version: str
    status: Literal["running", "active", "failed", "abandoned"]
    origin: str
    extractor_version: str
    embedding_model: str
    embedding_dim: int | None
    expected_files: int
    error: str | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None
    finished_at: datetime | None


class RunFileOut(BaseModel):
    """One expected file of a run and its progress."""

    file_id: str
    state: Literal["pending", "staging", "staged", "failed"]
    source: Literal["original", "derivative", "v1_chunks"] | None
    linked: bool = Field(description="an identical document of an earlier run was reused (no new embedding)")
    chunks: int | None
    attempts: int
    error: str | None
    updated_at: datetime


class RunStatusOut(BaseModel):
    """A run with its per-file progress."""

    run: RunOut
    counts: dict[str, int] = Field(description="files per state: pending, staging, staged, failed")
    chunks: int = Field(description="chunks the run holds now")
    files: list[RunFileOut]


class StagedFileOut(BaseModel):
    """What staging one file did."""

    file_id: str
    state: Literal["staged"] = "staged"
    source: Literal["original", "derivative", "v1_chunks"]
    linked: bool
    chunks: int
    table_rows: int
    entities: int
    embedded: int
    reused: int
    vectors_missing: int = Field(description="chunks stored without a vector (the embedding provider failed)")
    boilerplate_chars: int
    seconds: float


class BackfillOut(BaseModel):
    """A backfill started as jobs of the queue."""

    run: RunOut
    job_id: int = Field(
        description="the job that queues one job per file (GET /admin/jobs/{job_id}); progress per file: "
        "GET /v2/runs/{run_id}"
    )


class ActiveRunOut(BaseModel):
    """A namespace's active run."""

    namespace: str
    index_version: str
    run_id: int
    files: int
    activated_at: datetime | None


class AnsweringRunOut(BaseModel):
    """The run that answers a namespace's `/query_v2` without `index_version`, and what it covers."""

    namespace: str
    run_id: int
    index_version: str
    files_held: int = Field(description="how many of the namespace's current files the run holds")
    namespace_files: int = Field(description="how many files the namespace has now")
    reindex_needed: str | None = Field(
        None,
        description="why the run must be rebuilt with force=true (built with another extractor or "
        "model identity, contextual chunking included); null when it matches this service",
    )


class TaskOut(BaseModel):
    """A V2 maintenance task (the vector index of one dimension), as this replica saw it."""

    name: str
    state: str
    progress: str
    last_error: str | None


class V2StatusOut(BaseModel):
    """`GET /v2/status`."""

    enabled: bool = Field(description="RAG_V2_NAMESPACE_IDS names at least one namespace")
    namespaces: list[str]
    schema_ready: bool
    index_version: str = Field(description="the default index version (RAG_V2_INDEX_VERSION)")
    extractor_version: str
    embedding_model: str
    embedding_dimensions: int | None
    token_counter: str
    window: int = Field(description="the longest text the model reads, in the counter's units")
    reranker_configured: bool
    reranker: str
    active_runs: list[ActiveRunOut]
    answering: list[AnsweringRunOut] = Field(
        description="per namespace with an active run: the one queries without index_version read"
    )
    running_runs: int
    tasks: list[TaskOut]


# --- answers -------------------------------------------------------------------------------------


def _run_out(run: object) -> RunOut:
    """A run record as the wire shows it (the record's fields by name)."""
    return RunOut.model_validate(run, from_attributes=True)


def _status_out(status: RunStatus) -> RunStatusOut:
    return RunStatusOut(
        run=_run_out(status.run),
        counts=status.counts,
        chunks=status.chunks,
        files=[RunFileOut.model_validate(f, from_attributes=True) for f in status.files],
    )


def _staged_out(outcome: FileOutcome) -> StagedFileOut:
    return StagedFileOut(
        file_id=outcome.file_id,
        source=outcome.source,
        linked=outcome.linked,
        chunks=outcome.chunks,
        table_rows=outcome.table_rows,
        entities=outcome.entities,
        embedded=outcome.embedded,
        reused=outcome.reused,
        vectors_missing=outcome.vectors_missing,
        boilerplate_chars=outcome.boilerplate_chars,
        seconds=round(outcome.seconds, 3),
    )


_ADMIN = (403, *AUTHED_ERRORS)


# --- routes --------------------------------------------------------------------------------------


@router.get("/status", response_model=V2StatusOut, responses=error_responses(*_ADMIN))
async def v2_status(principal: AdminPrincipal, evidence: EvidenceDep, settings: SettingsDep) -> V2StatusOut:
    """Whether V2 is enabled and ready, the active run of each namespace, and how the index is built."""
    seen = await evidence.overview()
    profile, tuning = seen.profile, settings.v2
    return V2StatusOut(
        enabled=bool(settings.v2_namespace_ids),
        namespaces=sorted(set(settings.v2_namespace_ids)),
        schema_ready=seen.schema_ready,
        index_version=settings.v2_index_version,
        extractor_version=profile.extractor_version,
        embedding_model=profile.embedding_model,
        embedding_dimensions=seen.embedding_dimensions,
        token_counter=profile.counter_name,
        window=profile.window,
        reranker_configured=tuning.rerank.backend != "features",
        reranker=tuning.rerank.backend,
        active_runs=[
            ActiveRunOut(
                namespace=r.namespace,
                index_version=r.index_version,
                run_id=r.run_id,
                files=r.expected_files,
                activated_at=r.activated_at,
            )
            for r in seen.active
        ],
        answering=[AnsweringRunOut.model_validate(a, from_attributes=True) for a in seen.answering],
        running_runs=seen.running_runs,
        tasks=[
            TaskOut(name=t.name, state=t.state, progress=t.progress, last_error=t.last_error)
            for t in seen.tasks
        ],
    )


@router.post(
    "/runs", status_code=201, response_model=RunStatusOut, responses=error_responses(400, 413, *_ADMIN)
)
async def start_run(body: StartRunRequest, principal: AdminPrincipal, evidence: EvidenceDep) -> RunStatusOut:
    """Start a run of a namespace that must contain exactly `file_ids`; stage them, then activate it."""
    status = await evidence.start_run(
        namespace=body.namespace,
        index_version=body.index_version,
        file_ids=body.file_ids,
        created_by=principal.namespace,
    )
    return _status_out(status)


@router.get("/runs", response_model=list[RunOut], responses=error_responses(*_ADMIN))
async def list_runs(
    principal: AdminPrincipal,
    evidence: EvidenceDep,
    namespace: Annotated[NamespaceQuery | None, Query()] = None,
    status: Annotated[Literal["running", "active", "failed", "abandoned"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[RunOut]:
    """Runs, newest first (optionally of one namespace or status)."""
    return [_run_out(r) for r in await evidence.list_runs(namespace=namespace, status=status, limit=limit)]


@router.get("/runs/{run_id}", response_model=RunStatusOut, responses=error_responses(404, *_ADMIN))
async def get_run(run_id: RunIdPath, principal: AdminPrincipal, evidence: EvidenceDep) -> RunStatusOut:
    """A run with the progress of each of its files."""
    return _status_out(await evidence.run(run_id))


@router.post(
    "/runs/{run_id}/stage",
    response_model=StagedFileOut,
    responses=error_responses(404, 409, 413, 415, 502, *_ADMIN, file_errors=True),
)
async def stage_file(
    run_id: RunIdPath, body: StageRequest, principal: AdminPrincipal, evidence: EvidenceDep
) -> StagedFileOut:
    """Stage one expected file from its stored original (a file rag_api stored without one: its V1 chunks).

    404 when the run or the file is unknown, 409 when the run is not running or active; a file that
    cannot be read answers as an upload would (413, 415, 422) and is recorded as failed on the run.
    """
    return _staged_out(await evidence.stage(run_id, body.file_id))


def _derivative_schema() -> dict[str, Any]:
    props: dict[str, Any] = {
        "run_id": {"type": "string", "maxLength": 40, "pattern": r"^\s*[1-9][0-9]{0,17}\s*$"},
        "file_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_FILE_ID_CHARS,
            "pattern": NON_BLANK_NUL_FREE_PATTERN,
        },
        "sha256": {
            "type": "string",
            "maxLength": 80,
            "pattern": r"^\s*[0-9A-Fa-f]{64}\s*$",
            "description": "SHA-256 (hex) of the file's bytes; 400 when it does not match",
        },
        "file": {
            "type": "string",
            "format": "binary",
            "description": "a .txt or .md file (its name: no NUL)",
        },
    }
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["run_id", "file_id", "sha256", "file"],
                        "properties": props,
                    }
                }
            },
        }
    }


def _field(fields: dict[str, str], name: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise InvalidInput([{"type": "missing", "loc": ["body", name], "msg": "Field required"}])
    return value


@router.post(
    "/derivative",
    response_model=StagedFileOut,
    openapi_extra=_derivative_schema(),
    responses=error_responses(400, 404, 409, 413, 415, *_ADMIN, file_errors=True),
)
async def stage_derivative(
    request: Request, principal: AdminPrincipal, evidence: EvidenceDep, settings: SettingsDep
) -> StagedFileOut:
    """Stage an expected file from an uploaded text or Markdown version of it (multipart `run_id`,
    `file_id`, `sha256`, `file`): the bytes must have that SHA-256 (400 otherwise)."""
    check_content_length(request.headers.get("content-length"), settings.max_upload_bytes)
    upload = await receive_multipart(
        request.headers.get("content-type"),
        request.stream(),
        file_field="file",
        dest_dir=settings.data_dir.resolve() / "tmp",
        max_upload_bytes=settings.max_upload_bytes,
        text_fields=_DERIVATIVE_FIELDS,
    )
    try:
        raw_run = _field(upload.fields, "run_id")
        if not (raw_run.isascii() and raw_run.isdigit()) or not 1 <= int(raw_run) <= MAX_RUN_ID:
            raise BadRequest("run_id must be a run's id (a positive whole number)")
        file_id = _field(upload.fields, "file_id")
        if len(file_id) > MAX_FILE_ID_CHARS:
            raise BadRequest(f"file_id must be at most {MAX_FILE_ID_CHARS} characters")
        claimed = _field(upload.fields, "sha256").lower()
        if len(claimed) != 64 or any(c not in "0123456789abcdef" for c in claimed):
            raise BadRequest("sha256 must be the 64 hex digits of the file's SHA-256")
        if claimed != upload.sha256:
            raise BadRequest(
                "The file's SHA-256 does not match the sha256 field: the upload was damaged or it is "
                "another file; send the file again with its own SHA-256"
            )
        if not upload.filename.lower().endswith(_DERIVATIVE_SUFFIXES):
            raise UnsupportedFileType("A derivative must be a text (.txt) or Markdown (.md) file")
        derivative = Derivative(upload.path, upload.filename, upload.content_type, upload.sha256)
        return _staged_out(await evidence.stage(int(raw_run), file_id, derivative))
    finally:
        upload.cleanup()


@router.post(
    "/runs/{run_id}/activate", response_model=RunStatusOut, responses=error_responses(404, 409, *_ADMIN)
)
async def activate_run(
    run_id: RunIdPath,
    principal: AdminPrincipal,
    evidence: EvidenceDep,
    force: Annotated[
        bool,
        Query(
            description="activate even when it holds fewer of the namespace's files than the answering run"
        ),
    ] = False,
) -> RunStatusOut:
    """Make a complete run the active one of its namespace and version.

    409 while a file is not staged, or, without `force`, when the run holds fewer of the namespace's
    files than the run that answers its queries now (it would become their default).
    """
    return _status_out(await evidence.activate(run_id, force=force))


@router.post(
    "/runs/{run_id}/fail", response_model=RunStatusOut, responses=error_responses(404, 409, 413, *_ADMIN)
)
async def fail_run(
    run_id: RunIdPath, principal: AdminPrincipal, evidence: EvidenceDep, body: FailRequest | None = None
) -> RunStatusOut:
    """Give a running run up: it never becomes active, and what queries read does not change."""
    return _status_out(await evidence.fail(run_id, (body or FailRequest()).reason))


@router.post(
    "/backfill", status_code=202, response_model=BackfillOut, responses=error_responses(400, 413, *_ADMIN)
)
async def backfill(
    body: BackfillRequest, principal: AdminPrincipal, evidence: EvidenceDep, response: Response
) -> BackfillOut:
    """Build a run of a namespace from the originals `/embed` stored (files without one: their V1 chunks),
    as jobs of the queue (one per file); it is activated when every file is staged. A backfill of the
    namespace and index version still running gives way to this one. Progress: `GET /v2/runs/{run_id}`."""
    started = await evidence.backfill(
        namespace=body.namespace,
        index_version=body.index_version,
        file_ids=body.file_ids,
        activate=body.activate,
        force=body.force,
        created_by=principal.namespace,
    )
    response.headers["Location"] = f"/v2/runs/{started.run.run_id}"
    return BackfillOut(run=_run_out(started.run), job_id=started.job_id)
