"""`POST /query_v2` (evidence search of the V2 index) and `POST /validate_v2` (answer checks).

Order of the checks on `/query_v2`, so that a caller learns only what it may: the token (401), the
body's types (422), its bounds and `entity_id` (400), V2 switched off entirely (503: an empty
RAG_V2_NAMESPACE_IDS fails closed), a namespace V2 is not enabled for (403), `debug` without an
admin (403), then LibreChat's allow-list (ALLOWLIST_VERIFY) and the search itself.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.deps import AccessDep, CurrentPrincipal, EvidenceDep
from app.errors import Forbidden
from app.evidence.query.schemas import (
    QueryV2Request,
    QueryV2Response,
    ValidateV2Request,
    ValidateV2Response,
    check_query_v2,
)
from app.evidence.query.validate import validate_v2
from app.schemas import AUTHED_ERRORS, error_responses

router = APIRouter(tags=["v2 search"])


@router.post(
    "/query_v2",
    response_model=QueryV2Response,
    response_model_exclude_none=False,
    responses=error_responses(400, 403, 413, *AUTHED_ERRORS),
)
async def query_v2(
    body: QueryV2Request,
    principal: CurrentPrincipal,
    evidence: EvidenceDep,
    access: AccessDep,
) -> Response:
    """Cited evidence from the namespace's active V2 run, or `safe_refusal` when nothing supports one."""
    request = check_query_v2(body)
    entity = access.entity(principal, request.entity_id)
    namespace = entity or principal.namespace
    evidence.require_enabled(namespace)
    if request.debug and not principal.is_admin:
        raise Forbidden("debug output needs an admin token (RAG_ADMIN_USER_IDS or role ADMIN)")
    scope = await access.read_scope(principal, entity, request.file_ids)
    # evidence is re-checked against what LibreChat allows, not only against what was asked
    request = request.model_copy(update={"file_ids": list(scope.file_ids or ())})
    answer, timing = await evidence.query(request, scope, namespace, debug=request.debug)
    payload = answer.model_dump_json(exclude={"debug"} if answer.debug is None else set())
    return Response(payload, media_type="application/json", headers={"Server-Timing": timing})


@router.post(
    "/validate_v2",
    response_model=ValidateV2Response,
    responses=error_responses(413, *AUTHED_ERRORS),
)
async def validate(body: ValidateV2Request, principal: CurrentPrincipal) -> ValidateV2Response:
    """Check an answer against the evidence it cites: citations, quotes, numbers, identifiers, constraints."""
    return validate_v2(body.answer, body.evidence, body.mandatory_constraints, body.safe_refusal_expected)
