"""FastAPI dependencies: the shared resources and the caller, as small `Annotated` aliases.

All are `async def` although none awaits: FastAPI runs a plain `def` dependency in its thread pool,
and three thread hops per request cost more than the work itself (HS256 verification is ~20 us).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

import asyncpg
import httpx
from fastapi import Depends, Query, Request

from app.auth import Principal, anonymous, check_entity_id, require_admin, single_authorization, verify_token
from app.clients.blobs import BlobStore
from app.clients.embeddings import Embedder
from app.config import Settings
from app.edge import safe_str
from app.errors import InvalidInput, ServiceUnavailable
from app.ingest.pipeline import IngestService
from app.ingest.v2.context import V2Context
from app.jobs.setup import JobSystem
from app.maintenance.tasks import Maintenance
from app.maintenance.v2_tasks import V2Maintenance
from app.runtime.supervisor import DatabaseSupervisor
from app.schemas import ENTITY_ID_FIELD_DESCRIPTION, MAX_ENTITY_ID_CHARS
from app.search.allowlist import AllowList, OpenAllowList
from app.search.service import SearchService
from app.search.v2.service import V2SearchService
from app.store.db import StoreInfo


@dataclass
class Resources:
    """Everything the lifespan opens, in one place on `app.state.resources`."""

    settings: Settings
    pool: asyncpg.Pool
    info: StoreInfo
    embedder: Embedder
    blobs: BlobStore
    search: SearchService
    ingest: IngestService
    http: httpx.AsyncClient
    maintenance: Maintenance
    admin_ids: frozenset[str] = field(default_factory=frozenset)
    v2: V2Context | None = None
    v2_tasks: V2Maintenance | None = None
    v2_search: V2SearchService | None = None
    jobs: JobSystem | None = None
    database: DatabaseSupervisor | None = None  # app/runtime/supervisor.py: up/down, restarts
    # ALLOWLIST_VERIFY: LibreChat's catalogue narrows file ids before they enter a Scope
    allowlist: AllowList = field(default_factory=OpenAllowList)


async def get_resources(request: Request) -> Resources:
    """The app's open resources (503 while starting or after shutdown)."""
    resources: Resources | None = getattr(request.app.state, "resources", None)
    if resources is None:
        raise ServiceUnavailable("The service is starting; try again shortly")
    return resources


async def get_principal(
    request: Request, resources: Annotated[Resources, Depends(get_resources)]
) -> Principal:
    """The caller from `Authorization: Bearer`, or the anonymous principal when auth is off."""
    settings = resources.settings
    if not settings.auth_enabled:
        principal = anonymous()
    else:
        assert settings.jwt_secret is not None
        principal = verify_token(
            single_authorization(request.headers.getlist("authorization")),
            secret=settings.jwt_secret,
            audience=settings.jwt_audience,
            admin_user_ids=resources.admin_ids,
        )
    request.state.principal = principal
    return principal


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The caller, who must be an admin (403 otherwise)."""
    require_admin(principal)
    return principal


ResourcesDep = Annotated[Resources, Depends(get_resources)]
CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
AdminPrincipal = Annotated[Principal, Depends(get_admin)]


async def get_settings_dep(resources: ResourcesDep) -> Settings:
    """The settings the app was built with."""
    return resources.settings


async def get_search(resources: ResourcesDep) -> SearchService:
    """The search service."""
    return resources.search


async def get_ingest(resources: ResourcesDep) -> IngestService:
    """The ingestion service."""
    return resources.ingest


async def get_jobs(resources: ResourcesDep) -> JobSystem:
    """The job system (503 while it is not running)."""
    if resources.jobs is None:
        raise ServiceUnavailable("The job queue is not running; try again shortly")
    return resources.jobs


async def get_v2_search(resources: ResourcesDep) -> V2SearchService:
    """The `/query_v2` service (503 while it is not running)."""
    if resources.v2_search is None:
        raise ServiceUnavailable("V2 search is not running; try again shortly")
    return resources.v2_search


async def get_allowlist(resources: ResourcesDep) -> AllowList:
    """The allow-list re-check (a pass-through unless ALLOWLIST_VERIFY=mongo)."""
    return resources.allowlist


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SearchDep = Annotated[SearchService, Depends(get_search)]
IngestDep = Annotated[IngestService, Depends(get_ingest)]
JobsDep = Annotated[JobSystem, Depends(get_jobs)]
AllowListDep = Annotated[AllowList, Depends(get_allowlist)]
V2SearchDep = Annotated[V2SearchService, Depends(get_v2_search)]


if TYPE_CHECKING:  # built at run time; to a type checker it is a str
    _EntityIdParam = str
else:
    _EntityIdParam = safe_str(max_length=MAX_ENTITY_ID_CHARS)


async def get_entity_id(
    request: Request,
    settings: SettingsDep,
    entity_id: Annotated[_EntityIdParam | None, Query(description=ENTITY_ID_FIELD_DESCRIPTION)] = None,
) -> str | None:
    """The `?entity_id=` query parameter, checked against ENTITY_ID_PATTERN (400) or None."""
    if len(request.query_params.getlist("entity_id")) > 1:
        # which one would count? a proxy may check the first while we read the last
        raise InvalidInput(
            [{"type": "duplicate", "loc": ["query", "entity_id"], "msg": "entity_id is given more than once"}]
        )
    return check_entity_id(entity_id, settings.entity_id_regex)


EntityIdQuery = Annotated[str | None, Depends(get_entity_id)]
