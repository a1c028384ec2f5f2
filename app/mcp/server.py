"""The MCP tools: thin adapters over the services the HTTP routes use (CONTRACT.md section 9).

    server = build_server(services, limiter=app.state.rate_limiter)

Every tool resolves its caller (`app/mcp/auth.py`: put on the request by `app/mcp/http.py`, or the
one stdio principal), checks its arguments with the routes' own request models and checks
(`app/mcp/arguments.py`), gets its `Scope` where the routes get theirs (`Access.read_scope`: the
`entity_id` check, the allow-list re-check) and calls the search service, evidence search or the
job service. No tool calls a router or holds SQL.

Errors: arguments the caller must change are JSON-RPC errors (INVALID_PARAMS) whose message says
what to change; refusals the model should read (not allowed, not found, V2 off, rate limited,
database down) are tool results marked `isError` with a sentence; anything unexpected is logged
and answered with a fixed sentence, never a trace.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Literal, ParamSpec, TypeVar

import asyncpg
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations

from app.access.principal import require_admin
from app.errors import (
    BadRequest,
    InvalidInput,
    RagError,
    RateLimited,
    database_unavailable,
)
from app.evidence.query import schemas as v2_schemas
from app.jobs.schemas import AdminJobOut, JobOut
from app.mcp.arguments import (
    JobsArguments,
    ListArguments,
    ReadArguments,
    ReindexArguments,
    build,
    invalid,
    present,
)
from app.mcp.auth import McpCaller
from app.mcp.describe import (
    DESCRIPTIONS,
    INSTRUCTIONS,
    V1_DEFAULT_K,
    BeforeArg,
    CursorArg,
    EntityArg,
    FileIdArg,
    FileIdsArg,
    ForceArg,
    JobsLimitArg,
    JobStatusArg,
    KArg,
    ListLimitArg,
    ModeArg,
    NamespaceArg,
    OffsetArg,
    QueryArg,
    ReadLimitArg,
)
from app.metrics import MCP_TOOL_CALLS
from app.ratelimit import RateLimiter
from app.schemas import MAX_FILE_IDS, QueryMultipleRequest, capped_file_ids, too_many_file_ids
from app.services import Services
from app.store.chunks import ChunkHit

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

CALLER_SCOPE_KEY = "ragoverlay.mcp_caller"  # where app/mcp/http.py puts the caller on the ASGI scope
UNEXPECTED = "The tool failed unexpectedly; nothing was changed. Try again, or ask the operator (server log)"


def search_arguments(
    mode: Literal["v1", "v2"], query: str, file_ids: list[str] | None, entity_id: str | None, k: int | None
) -> tuple[list[str] | None, int]:
    """A search's file ids (None: every file) and k, checked as `/query_multiple` or `/query_v2` would."""
    if file_ids is not None and len(file_ids) > MAX_FILE_IDS and len(set(file_ids)) > MAX_FILE_IDS:
        # the routes' wording, and what a tool may do instead
        given = len(set(file_ids))
        raise BadRequest(
            f"{too_many_file_ids(given)}, or leave file_ids out to search every file you can read"
        )
    if mode == "v2":
        request = build(
            v2_schemas.QueryV2Request,
            **present(query=query, file_ids=file_ids or [], entity_id=entity_id, k=k),
        )
        request = v2_schemas.check_query_v2(request, files_later=not file_ids)
        return (None if file_ids is None else request.file_ids), request.k
    v1 = build(
        QueryMultipleRequest,
        **present(
            query=query, file_ids=file_ids or [], entity_id=entity_id, k=V1_DEFAULT_K if k is None else k
        ),
    )
    # the route answers a blank query with nothing found (rag_api's way); a tool says what to change
    if not v1.query.strip():
        raise BadRequest("query must not be empty")
    return (None if file_ids is None else capped_file_ids(v1.file_ids)), v1.k


def snippet(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to `limit` characters at a word boundary when one is near; (text, truncated)."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip() + " …", True


def _filename(metadata: dict[str, Any]) -> str:
    source = metadata.get("source")
    if isinstance(source, str) and source:
        return source.replace("\\", "/").rsplit("/", 1)[-1]
    return ""


def _v1_page(metadata: dict[str, Any]) -> int | None:
    page = metadata.get("page")
    if isinstance(page, bool):
        return None
    if isinstance(page, int):
        return page + 1  # stored 0-based (rag_api's); people and PDF viewers count from 1
    if isinstance(page, str) and page.isdigit():
        return int(page) + 1
    return None


def v1_result(hit: ChunkHit, limit: int) -> dict[str, Any]:
    """One V1 hit as a tool result: where it is, how close, and a capped snippet."""
    text, truncated = snippet(hit.text, limit)
    return {
        "file_id": hit.file_id,
        "filename": _filename(hit.metadata),
        "page": _v1_page(hit.metadata),
        "relevance": round(max(0.0, 1.0 - hit.distance), 4),
        "distance": round(hit.distance, 6),
        "snippet": text,
        "truncated": truncated,
    }


def v2_result(item: v2_schemas.EvidenceItem, limit: int) -> dict[str, Any]:
    """One `/query_v2` evidence item as a tool result (its content capped)."""
    text, truncated = snippet(item.content, limit)
    out: dict[str, Any] = {
        "citation_id": item.citation_id,
        "file_id": item.file_id,
        "filename": item.filename,
        "title": item.title,
        "page": item.page,
        "page_label": item.page_label,
        "section": item.section,
        "chunk_kind": item.chunk_kind,
        "score": item.score,
        "snippet": text,
        "truncated": truncated,
    }
    if item.chunk_kind == "table_row":
        out.update(
            table_title=item.table_title,
            row_label=item.row_label,
            headers=item.headers,
            row_values=item.row_values,
            units=item.units,
        )
    return out


class Tools:
    """The tools of one server over the running service's services."""

    def __init__(
        self,
        services: Services,
        *,
        limiter: RateLimiter | None = None,
        stdio: McpCaller | None = None,
    ) -> None:
        self.services = services
        self.limiter = limiter
        self.stdio = stdio

    # --- plumbing ---------------------------------------------------------------------------------
    def caller(self, ctx: Context[Any, Any]) -> McpCaller:
        """Who calls: the request's authenticated caller, or the stdio principal; never anyone else."""
        request = ctx.request_context.request if ctx.request_context is not None else None
        if request is None:
            if self.stdio is not None:
                return self.stdio
        else:
            caller = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
            if isinstance(caller, McpCaller):
                return caller
        # fail closed: a transport that did not authenticate its caller reads nothing
        raise ToolError("This request carries no authenticated caller; nothing was read")

    def limit_search(self, caller: McpCaller) -> None:
        """The HTTP search budget (SEARCH_RATE_PER_MINUTE), counted per caller as on the routes."""
        if self.limiter is None:
            return
        wait = self.limiter.check("search", caller.principal.namespace)
        if wait > 0:
            raise RateLimited(retry_after_s=math.ceil(wait))

    # --- the tools ----------------------------------------------------------------------------------
    async def rag_search(
        self,
        ctx: Context[Any, Any],
        query: str,
        file_ids: list[str] | None,
        entity_id: str | None,
        mode: Literal["v1", "v2"] | None,
        k: int | None,
    ) -> dict[str, Any]:
        """Search the caller's files (V1 vectors or V2 cited evidence)."""
        caller = self.caller(ctx)
        res = self.services
        access = res.access
        entity = access.entity(caller, entity_id)
        namespace = caller.home(entity)
        v2 = res.evidence
        chosen = mode or ("v2" if namespace in v2.enabled_namespaces else "v1")
        ids, k_value = search_arguments(chosen, query, file_ids, entity_id, k)
        self.limit_search(caller)
        search = res.search
        note: str | None = None
        if ids is None:
            # every file the caller can read; the allow-list below narrows them like any list
            ids = await search.file_ids(await access.read_scope(caller, entity, None))
            if chosen == "v2" and len(ids) > MAX_FILE_IDS:
                note = f"searched the first {MAX_FILE_IDS} of {len(ids)} files; pass file_ids to choose"
                ids = ids[:MAX_FILE_IDS]
        scope = await access.read_scope(caller, entity, ids)
        allowed = list(scope.file_ids or ())
        limit = res.settings.search_snippet_max_chars
        if chosen == "v2":
            v2.require_enabled(namespace)
            request = v2_schemas.QueryV2Request(query=query, file_ids=allowed, entity_id=entity, k=k_value)
            if allowed:
                request = v2_schemas.check_query_v2(request)
            answer, _ = await v2.query(request, scope, namespace)
            return {
                "mode": "v2",
                "namespace": namespace,
                "index_version": answer.index_version,
                "results": [v2_result(item, limit) for item in answer.results],
                "degraded": answer.degraded,
                "safe_refusal": answer.safe_refusal,
                "note": note,
            }
        outcome = await search.search(query, scope, k_value)
        return {
            "mode": "v1",
            "namespace": namespace,
            "results": [v1_result(hit, limit) for hit in outcome.hits],
            "note": note,
        }

    async def rag_read(
        self,
        ctx: Context[Any, Any],
        file_id: str,
        offset: int | None,
        limit: int | None,
        entity_id: str | None,
    ) -> dict[str, Any]:
        """A page of a file's full text, as the model reads it in LibreChat (page markers included)."""
        caller = self.caller(ctx)
        res = self.services
        args = build(
            ReadArguments, **present(file_id=file_id, entity_id=entity_id, offset=offset, limit=limit)
        )
        start, size = args.offset, args.limit
        text = await res.search.context(await res.access.read_scope(caller, args.entity_id, [file_id]))
        if text is None:
            # a file outside the caller's scope reads exactly like a file that does not exist
            raise ToolError(f"No file {file_id!r} among the files you can read (see rag_list)")
        filename, _, _ = text.partition("\n")
        piece = text[start : start + size]
        end = start + len(piece)
        return {
            "file_id": file_id,
            "filename": filename,
            "offset": start,
            "total_chars": len(text),
            "text": piece,
            "next_offset": end if end < len(text) else None,
        }

    async def rag_list(
        self, ctx: Context[Any, Any], cursor: str | None, limit: int | None, entity_id: str | None
    ) -> dict[str, Any]:
        """A page of the files the caller can search."""
        caller = self.caller(ctx)
        res = self.services
        args = build(ListArguments, **present(cursor=cursor, entity_id=entity_id, limit=limit))
        size = args.limit
        access = res.access
        # an Agent the caller may not use lists as if not named (as GET /ids)
        entity = await access.listed_entity(caller, args.entity_id)
        rows = await res.search.files(await access.read_scope(caller, entity, None), after=cursor, limit=size)
        allowed = set(await access.searchable(caller, entity, [r.file_id for r in rows]))
        return {
            "files": [
                {
                    "file_id": r.file_id,
                    "filename": r.filename,
                    "content_type": r.content_type,
                    "size_bytes": r.size_bytes,
                    "chunks": r.chunk_count,
                    "namespace": r.owner,
                    "v2_indexed": r.v2_indexed,
                }
                for r in rows
                if r.file_id in allowed
            ],
            "next_cursor": rows[-1].file_id if len(rows) == size else None,
        }

    async def rag_status(self, ctx: Context[Any, Any]) -> dict[str, Any]:
        """Who the service thinks the caller is, what it may read, and whether V2 serves it."""
        caller = self.caller(ctx)
        res = self.services
        owners = caller.owners(None)
        enabled = res.evidence.enabled_namespaces
        out: dict[str, Any] = {
            "principal": caller.principal.namespace,
            "auth": caller.mode,
            "admin": caller.principal.is_admin,
            "namespaces": owners,
            "v2_namespaces": [n for n in owners if n in enabled],
            "catalogue_check": caller.uses_catalogue and res.access.allowlist.enabled,
            "database_up": res.database.up,
        }
        if caller.principal.is_admin:
            stats = await res.jobs.service.queue_stats()
            counts = stats.counts
            out["jobs"] = {
                "queued": counts.queued,
                "running": counts.running,
                "done": counts.done,
                "failed": counts.failed,
            }
        return out

    async def rag_jobs(
        self,
        ctx: Context[Any, Any],
        status: Literal["queued", "running", "done", "failed"] | None,
        before: int | None,
        limit: int | None,
    ) -> dict[str, Any]:
        """The caller's own jobs (admins: every job), newest first."""
        caller = self.caller(ctx)
        res = self.services
        size = build(JobsArguments, **present(before=before, limit=limit)).limit
        admin = caller.principal.is_admin
        rows = await res.jobs.service.list_jobs(
            status=status,
            before_id=before,
            limit=size,
            created_by=None if admin else caller.principal.namespace,
        )
        shown = [(AdminJobOut.of(r) if admin else JobOut.of(r)).model_dump(mode="json") for r in rows]
        return {"jobs": shown, "next_before": rows[-1].id if len(rows) == size else None}

    async def rag_reindex(self, ctx: Context[Any, Any], namespace: str, force: bool) -> dict[str, Any]:
        """Admins: queue the V2 backfill (or a forced rebuild) of a namespace; the job id to follow."""
        caller = self.caller(ctx)
        res = self.services
        require_admin(caller.principal)
        build(ReindexArguments, namespace=namespace)
        added = await res.evidence.reindex(
            namespace=namespace, force=force, created_by=caller.principal.namespace
        )
        return {"job_id": added.id, "created": added.created, "namespace": namespace, "force": force}


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return "invalid"
    if isinstance(exc, RateLimited):
        return "limited"
    return "refused"


def counted(name: str, fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Count the call by outcome, and turn the service's errors into what an MCP client reads."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            result = await fn(*args, **kwargs)
        except (MCPError, ToolError) as exc:
            MCP_TOOL_CALLS.labels(tool=name, outcome=_outcome(exc)).inc()
            raise
        except (BadRequest, InvalidInput) as exc:
            MCP_TOOL_CALLS.labels(tool=name, outcome="invalid").inc()
            raise invalid(_detail(exc)) from None
        except RateLimited as exc:
            MCP_TOOL_CALLS.labels(tool=name, outcome="limited").inc()
            raise ToolError(
                f"Too many searches: SEARCH_RATE_PER_MINUTE is spent; retry in {exc.retry_after_s} s"
            ) from None
        except RagError as exc:
            MCP_TOOL_CALLS.labels(tool=name, outcome="refused").inc()
            raise ToolError(_detail(exc)) from None
        except (asyncpg.QueryCanceledError, TimeoutError):
            MCP_TOOL_CALLS.labels(tool=name, outcome="error").inc()
            raise ToolError("The database did not answer in time; try again shortly") from None
        except Exception as exc:
            MCP_TOOL_CALLS.labels(tool=name, outcome="error").inc()
            if database_unavailable(exc):
                raise ToolError("The database is unavailable right now; try again shortly") from None
            logger.exception("MCP tool %s failed (%s)", name, type(exc).__name__)
            raise ToolError(UNEXPECTED) from None
        MCP_TOOL_CALLS.labels(tool=name, outcome="ok").inc()
        return result

    return call


def _detail(exc: RagError) -> str:
    if isinstance(exc, InvalidInput):
        return "; ".join(str(e.get("msg", "")) for e in exc.errors) or "invalid arguments"
    return str(exc.detail)


def build_server(
    services: Services,
    *,
    limiter: RateLimiter | None = None,
    stdio: McpCaller | None = None,
) -> MCPServer[Any]:
    """The MCP server with its six tools, over `services` (the running service's, or stdio's own)."""
    tools = Tools(services, limiter=limiter, stdio=stdio)
    server: MCPServer[Any] = MCPServer(
        "ragoverlay", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING"
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    async def rag_search(
        query: QueryArg,
        ctx: Context[Any, Any],
        file_ids: FileIdsArg = None,
        entity_id: EntityArg = None,
        mode: ModeArg = None,
        k: KArg = None,
    ) -> dict[str, Any]:
        return await tools.rag_search(ctx, query, file_ids, entity_id, mode, k)

    async def rag_read(
        file_id: FileIdArg,
        ctx: Context[Any, Any],
        offset: OffsetArg = None,
        limit: ReadLimitArg = None,
        entity_id: EntityArg = None,
    ) -> dict[str, Any]:
        return await tools.rag_read(ctx, file_id, offset, limit, entity_id)

    async def rag_list(
        ctx: Context[Any, Any],
        cursor: CursorArg = None,
        limit: ListLimitArg = None,
        entity_id: EntityArg = None,
    ) -> dict[str, Any]:
        return await tools.rag_list(ctx, cursor, limit, entity_id)

    async def rag_status(ctx: Context[Any, Any]) -> dict[str, Any]:
        return await tools.rag_status(ctx)

    async def rag_jobs(
        ctx: Context[Any, Any],
        status: JobStatusArg = None,
        before: BeforeArg = None,
        limit: JobsLimitArg = None,
    ) -> dict[str, Any]:
        return await tools.rag_jobs(ctx, status, before, limit)

    async def rag_reindex(
        namespace: NamespaceArg,
        ctx: Context[Any, Any],
        force: ForceArg = False,
    ) -> dict[str, Any]:
        return await tools.rag_reindex(ctx, namespace, force)

    for fn in (rag_search, rag_read, rag_list, rag_status, rag_jobs):
        server.add_tool(
            counted(fn.__name__, fn),
            name=fn.__name__,
            description=DESCRIPTIONS[fn.__name__],
            annotations=read_only,
        )
    server.add_tool(
        counted("rag_reindex", rag_reindex),
        name="rag_reindex",
        description=DESCRIPTIONS["rag_reindex"],
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    )
    return server
