"""FastAPI dependencies: the services (app/services.py) and the caller, as small `Annotated` aliases.

All are `async def` although none awaits: FastAPI runs a plain `def` dependency in its thread pool,
and three thread hops per request cost more than the work itself (HS256 verification is ~20 us).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from app.access.namespaces import check_entity_id
from app.access.principal import Principal, anonymous, require_admin, single_authorization, verify_token
from app.access.scope import Access
from app.config import Settings
from app.errors import InvalidInput, ServiceUnavailable
from app.evidence.service import Evidence
from app.ingest.pipeline import IngestService
from app.jobs.setup import JobSystem
from app.jobs.uploads import Uploads
from app.schemas import ENTITY_ID_FIELD_DESCRIPTION, EntityId
from app.search.service import SearchService
from app.services import Services


async def get_services(request: Request) -> Services:
    """The app's open services (503 while starting or after shutdown)."""
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        raise ServiceUnavailable("The service is starting; try again shortly")
    return services


async def get_principal(request: Request, services: Annotated[Services, Depends(get_services)]) -> Principal:
    """The caller from `Authorization: Bearer`, or the anonymous principal when auth is off."""
    settings = services.settings
    if not settings.auth_enabled:
        # on loopback only (the default without a secret) the caller is the local operator
        principal = anonymous(local_operator=not settings.allow_unauthenticated)
    else:
        assert settings.jwt_secret is not None
        principal = verify_token(
            single_authorization(request.headers.getlist("authorization")),
            secret=settings.jwt_secret,
            audience=settings.jwt_audience,
            admin_user_ids=services.admin_ids,
            cache=getattr(request.app.state, "token_cache", None),
        )
    request.state.principal = principal
    return principal


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The caller, who must be an admin (403 otherwise)."""
    require_admin(principal)
    return principal


ServicesDep = Annotated[Services, Depends(get_services)]
CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
AdminPrincipal = Annotated[Principal, Depends(get_admin)]


async def get_settings_dep(services: ServicesDep) -> Settings:
    """The settings the app was built with."""
    return services.settings


async def get_search(services: ServicesDep) -> SearchService:
    """The search service."""
    return services.search


async def get_ingest(services: ServicesDep) -> IngestService:
    """The ingestion service."""
    return services.ingest


async def get_jobs(services: ServicesDep) -> JobSystem:
    """The job system."""
    return services.jobs


async def get_uploads(services: ServicesDep) -> Uploads:
    """Uploads, indexed at once or as jobs."""
    return services.jobs.uploads


async def get_evidence(services: ServicesDep) -> Evidence:
    """Evidence search: `/query_v2` and its index runs, backfills and status."""
    return services.evidence


async def get_access(services: ServicesDep) -> Access:
    """The access rules: every read and delete scope, the allow-list re-check inside them."""
    return services.access


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SearchDep = Annotated[SearchService, Depends(get_search)]
IngestDep = Annotated[IngestService, Depends(get_ingest)]
JobsDep = Annotated[JobSystem, Depends(get_jobs)]
UploadsDep = Annotated[Uploads, Depends(get_uploads)]
AccessDep = Annotated[Access, Depends(get_access)]
EvidenceDep = Annotated[Evidence, Depends(get_evidence)]


async def get_entity_id(
    request: Request,
    settings: SettingsDep,
    entity_id: Annotated[EntityId | None, Query(description=ENTITY_ID_FIELD_DESCRIPTION)] = None,
) -> str | None:
    """The `?entity_id=` query parameter, checked against ENTITY_ID_PATTERN (400) or None."""
    if len(request.query_params.getlist("entity_id")) > 1:
        # which one would count? a proxy may check the first while we read the last
        raise InvalidInput(
            [{"type": "duplicate", "loc": ["query", "entity_id"], "msg": "entity_id is given more than once"}]
        )
    return check_entity_id(entity_id, settings.entity_id_regex)


EntityIdQuery = Annotated[str | None, Depends(get_entity_id)]
