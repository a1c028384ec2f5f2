"""A small LibreChat stand-in on 127.0.0.1 for the provisioning tests.

Only the routes `scripts/provision_knowledge_bases.py` uses, with LibreChat's status codes and reply
fields (read from LibreChat's routes and controllers): `/health`, `/api/auth/login`, `/api/config`,
`/api/endpoints`, `/api/admin/groups`, `/api/agents` (list, create, expanded, patch),
`/api/files/agent/:id`, `/api/permissions/agent/:_id`, `POST /api/files` and `DELETE /api/files`.
Uploads go to our real service's `/embed` exactly as LibreChat sends them: its own uuid `file_id`,
`entity_id` = the Agent id, a short-lived HS256 token for the uploading user. Faults can be queued
to test retries and crashes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx
import jwt
import uvicorn
from bson import ObjectId
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse

from tests.fixtures.patience import ceiling, wait_until
from tests.fixtures.serve import free_port

ADMIN_EMAIL = "admin@example.test"
ADMIN_PASSWORD = "correct horse battery staple"


@dataclass
class StandinState:
    """LibreChat's catalogue as the stand-in keeps it, plus fault injection and counters."""

    rag_url: str
    jwt_secret: str
    admin_id: str = field(default_factory=lambda: str(ObjectId()))
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)  # by `id`
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # by `file_id`
    acl: list[dict[str, Any]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # consumed one per upload: "503", "502-after", "hold"
    hold_s: float = 30.0
    landed_event: threading.Event = field(default_factory=threading.Event)
    upload_requests: int = 0
    landed: int = 0
    capabilities: list[str] = field(default_factory=lambda: ["file_search", "actions", "tools"])

    def agent_by_db_id(self, db_id: str) -> dict[str, Any] | None:
        """The Agent whose `_id` this is."""
        return next((a for a in self.agents.values() if a["_id"] == db_id), None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status)


def build_app(state: StandinState) -> FastAPI:
    """The stand-in's routes over `state`."""
    app = FastAPI()

    def authorised(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {state.token}"

    @app.middleware("http")
    async def require_jwt(request: Request, call_next: Any) -> Any:
        open_paths = ("/health", "/api/auth/login")
        if (
            request.url.path.startswith("/api/")
            and request.url.path not in open_paths
            and not authorised(request)
        ):
            return PlainTextResponse("Unauthorized", status_code=401)
        return await call_next(request)

    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("OK")

    @app.post("/api/auth/login")
    async def login(request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("email") != ADMIN_EMAIL or body.get("password") != ADMIN_PASSWORD:
            return _error(401, "Email or password is incorrect")
        user = {"_id": state.admin_id, "id": state.admin_id, "email": ADMIN_EMAIL, "role": "ADMIN"}
        return JSONResponse({"token": state.token, "user": user})

    @app.get("/api/config")
    async def config() -> JSONResponse:
        return JSONResponse({"appTitle": "LibreChat", "interface": {"agents": True}})

    @app.get("/api/endpoints")
    async def endpoints() -> JSONResponse:
        return JSONResponse({"agents": {"disableBuilder": False, "capabilities": state.capabilities}})

    @app.get("/api/admin/groups")
    async def list_groups(search: str = "", limit: int = 50, offset: int = 0) -> JSONResponse:
        found = [g for g in state.groups.values() if search.lower() in g["name"].lower()]
        return JSONResponse(
            {"groups": found[offset : offset + limit], "total": len(found), "limit": limit, "offset": offset}
        )

    @app.post("/api/admin/groups")
    async def create_group(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body.get("name"), str) or not body["name"].strip():
            return JSONResponse({"error": "name is required"}, status_code=400)
        group = {
            "_id": str(ObjectId()),
            "name": body["name"].strip(),
            "description": body.get("description"),
            "source": body.get("source") or "local",
            "memberIds": body.get("memberIds") or [],
        }
        state.groups[group["_id"]] = group
        return JSONResponse({"group": group}, status_code=201)

    @app.get("/api/agents")
    async def list_agents(search: str = "", limit: int = 100, cursor: str | None = None) -> JSONResponse:
        found = [a for a in state.agents.values() if search.lower() in a["name"].lower()]
        start = int(base64.b64decode(cursor).decode()) if cursor else 0
        page = found[start : start + limit]
        more = start + limit < len(found)
        after = base64.b64encode(str(start + limit).encode()).decode() if more else None
        listed = [{k: a.get(k) for k in ("_id", "id", "name", "author", "description")} for a in page]
        return JSONResponse(
            {
                "object": "list",
                "data": listed,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": more,
                "after": after,
            }
        )

    @app.post("/api/agents")
    async def create_agent(request: Request) -> JSONResponse:
        body = await request.json()
        if not body.get("provider") or not body.get("model"):
            return JSONResponse({"error": "provider and model are required"}, status_code=400)
        agent = {
            **body,
            "_id": str(ObjectId()),
            "id": f"agent_{uuid.uuid4().hex[:21]}",
            "author": state.admin_id,
            "tool_resources": {},
            "versions": [],
        }
        state.agents[agent["id"]] = agent
        state.acl.append(
            {
                "principalType": "user",
                "principalId": state.admin_id,
                "resourceId": agent["_id"],
                "accessRoleId": "agent_owner",
            }
        )
        return JSONResponse(agent, status_code=201)

    @app.get("/api/agents/{agent_id}/expanded")
    async def expanded(agent_id: str) -> JSONResponse:
        agent = state.agents.get(agent_id)
        return JSONResponse(agent) if agent else JSONResponse({"error": "Agent not found"}, status_code=404)

    @app.patch("/api/agents/{agent_id}")
    async def update_agent(agent_id: str, request: Request) -> JSONResponse:
        agent = state.agents.get(agent_id)
        if agent is None:
            return JSONResponse({"error": "Agent not found"}, status_code=404)
        agent.update(await request.json())
        return JSONResponse(agent)

    @app.get("/api/files/agent/{agent_id}")
    async def agent_files(agent_id: str) -> JSONResponse:
        agent = state.agents.get(agent_id)
        if agent is None:
            return JSONResponse([])
        ids = [fid for r in agent["tool_resources"].values() for fid in r.get("file_ids", [])]
        return JSONResponse([state.files[i] for i in ids if i in state.files])

    @app.get("/api/permissions/agent/{resource_id}")
    async def get_permissions(resource_id: str) -> JSONResponse:
        principals, public = [], False
        for entry in state.acl:
            if entry["resourceId"] != resource_id:
                continue
            if entry["principalType"] == "public":
                public = True
            elif entry["principalType"] == "group" and entry["principalId"] in state.groups:
                group = state.groups[entry["principalId"]]
                principals.append(
                    {
                        "type": "group",
                        "id": group["_id"],
                        "name": group["name"],
                        "source": "local",
                        "accessRoleId": entry["accessRoleId"],
                    }
                )
            elif entry["principalType"] == "user":
                principals.append(
                    {"type": "user", "id": entry["principalId"], "accessRoleId": entry["accessRoleId"]}
                )
        return JSONResponse(
            {"resourceType": "agent", "resourceId": resource_id, "principals": principals, "public": public}
        )

    @app.put("/api/permissions/agent/{resource_id}")
    async def put_permissions(resource_id: str, request: Request) -> JSONResponse:
        if state.agent_by_db_id(resource_id) is None:
            return JSONResponse({"error": "Resource not found"}, status_code=404)
        body = await request.json()
        granted = []
        for principal in body.get("updated") or []:
            state.acl = [
                e
                for e in state.acl
                if not (
                    e["resourceId"] == resource_id
                    and e["principalType"] == principal["type"]
                    and e.get("principalId") == principal["id"]
                )
            ]
            entry = {
                "principalType": principal["type"],
                "principalId": principal["id"],
                "resourceId": resource_id,
                "accessRoleId": principal["accessRoleId"],
            }
            state.acl.append(entry)
            granted.append(principal)
        state.acl = [
            e for e in state.acl if not (e["resourceId"] == resource_id and e["principalType"] == "public")
        ]
        if body.get("public") and body.get("publicAccessRoleId"):
            state.acl.append(
                {
                    "principalType": "public",
                    "principalId": None,
                    "resourceId": resource_id,
                    "accessRoleId": body["publicAccessRoleId"],
                }
            )
        return JSONResponse(
            {
                "message": "Permissions updated successfully",
                "results": {"principals": granted, "public": bool(body.get("public"))},
            }
        )

    @app.post("/api/files")
    async def upload(
        file_id: Annotated[str, Form()],
        agent_id: Annotated[str, Form()],
        tool_resource: Annotated[str, Form()],
        file: Annotated[UploadFile, File()],
    ) -> JSONResponse:
        state.upload_requests += 1
        fault = state.faults.pop(0) if state.faults else None
        if fault == "503":
            return _error(503, "Service Unavailable")
        agent = state.agents.get(agent_id)
        if agent is None:
            return _error(500, "Error processing file")
        server_file_id = str(uuid.uuid4())  # LibreChat's multer assigns its own id; ours is temp_file_id
        data = await file.read()
        token = jwt.encode({"id": state.admin_id, "exp": int(time.time()) + 300}, state.jwt_secret, "HS256")
        async with httpx.AsyncClient(timeout=ceiling(120)) as client:
            reply = await client.post(
                f"{state.rag_url}/embed",
                data={"file_id": server_file_id, "entity_id": agent_id},
                files={
                    "file": (file.filename or "upload", data, file.content_type or "application/octet-stream")
                },
                headers={"Authorization": f"Bearer {token}"},
            )
        body = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
        if reply.status_code != 200 or not body.get("status") or not body.get("known_type"):
            return _error(500, "Error processing file")
        record = {
            "_id": str(ObjectId()),
            "user": state.admin_id,
            "file_id": server_file_id,
            "temp_file_id": file_id,
            "bytes": len(data),
            "filepath": f"/uploads/{state.admin_id}/{server_file_id}__{file.filename}",
            "filename": body.get("filename") or file.filename,
            "context": "agents",
            "type": file.content_type,
            "embedded": True,
            "source": "local",
            "usage": 0,
        }
        resource = agent["tool_resources"].setdefault(tool_resource, {"file_ids": []})
        resource["file_ids"].append(server_file_id)
        state.files[server_file_id] = record
        state.landed += 1
        if fault == "502-after":
            return _error(502, "Bad Gateway")
        if fault == "hold":
            state.landed_event.set()
            await asyncio.sleep(state.hold_s)
        return JSONResponse({"message": "Agent file uploaded and processed successfully", **record})

    @app.delete("/api/files")
    async def delete_files(request: Request) -> JSONResponse:
        body = await request.json()
        files = [f for f in body.get("files") or [] if f.get("file_id") and f.get("filepath")]
        if not files:
            return JSONResponse({"message": "Nothing provided to delete"}, status_code=204)
        ids = [f["file_id"] for f in files]
        agent = state.agents.get(body.get("agent_id") or "")
        if agent and body.get("tool_resource") in agent["tool_resources"]:
            resource = agent["tool_resources"][body["tool_resource"]]
            resource["file_ids"] = [i for i in resource["file_ids"] if i not in ids]
        token = jwt.encode({"id": state.admin_id, "exp": int(time.time()) + 300}, state.jwt_secret, "HS256")
        async with httpx.AsyncClient(timeout=ceiling(60)) as client:
            await client.request(
                "DELETE", f"{state.rag_url}/documents", json=ids, headers={"Authorization": f"Bearer {token}"}
            )
        for fid in ids:
            state.files.pop(fid, None)
        return JSONResponse({"message": "Files deleted successfully"})

    return app


@contextlib.contextmanager
def librechat_standin(rag_url: str, jwt_secret: str) -> Iterator[tuple[str, StandinState]]:
    """Serve the stand-in on a free loopback port in a thread; yield its URL and state."""
    state = StandinState(rag_url=rag_url, jwt_secret=jwt_secret)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(state),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, name="librechat-standin", daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError("the LibreChat stand-in did not start")
        return bool(server.started)

    wait_until(started, what="the LibreChat stand-in to start", within_s=15, every_s=0.05)
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        server.should_exit = True
        thread.join(timeout=10)
