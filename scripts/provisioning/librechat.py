"""The slice of LibreChat's HTTP API provisioning needs, with retries on 429/5xx."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
)

from app.clients.embeddings.http import parse_retry_after
from scripts.provisioning.plan import LocalFile

VIEWER_ROLE = "agent_viewer"
FILE_SEARCH = "file_search"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class LibreChatError(Exception):
    """LibreChat refused or failed a request (exit 3)."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RetryableError(LibreChatError):
    """A 429/5xx answer or a transport failure: worth another attempt."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry 429/5xx answers and transport failures."""

    attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 30.0

    def wait(self, state: RetryCallState) -> float:
        """Capped exponential backoff; a longer `Retry-After` from the server wins (up to the cap)."""
        delay = float(min(self.cap_s, self.base_s * (2 ** (state.attempt_number - 1))))
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, LibreChatError) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.cap_s))
        return delay

    def retrying(self, log: Callable[[str], None]) -> Retrying:
        """A tenacity loop for this policy, logging each retry."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log(f"  retry {state.attempt_number}/{self.attempts - 1} after: {exc}")

        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=self.wait,
            retry=retry_if_exception_type(RetryableError),
            before_sleep=before_sleep,
            reraise=True,
        )


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, Mapping):
        for key in ("message", "error", "detail"):
            if body.get(key):
                return str(body[key])[:300]
    return str(body)[:200]


class LibreChat:
    """The slice of LibreChat's HTTP API provisioning needs, with retries on 429/5xx."""

    def __init__(
        self,
        base_url: str,
        *,
        policy: RetryPolicy,
        log: Callable[[str], None],
        timeout_s: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self.policy = policy
        self.log = log
        self.token: str | None = None
        self.client = httpx.Client(base_url=base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    # -- plumbing

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            response = self.client.request(method, path, headers=headers, **kwargs)
        except httpx.TransportError as exc:
            raise RetryableError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(
                f"{method} {path}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        return response

    def call(self, method: str, path: str, *, expect: Sequence[int] = (200,), **kwargs: Any) -> Any:
        """One idempotent request with retries; the JSON body of an expected status, else an error."""
        for attempt in self.policy.retrying(self.log):
            with attempt:
                response = self._send(method, path, **kwargs)
        if response.status_code not in expect:
            raise LibreChatError(
                f"{method} {path}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError:
            return response.text

    # -- routes

    def health(self) -> None:
        """GET /health must answer 200."""
        self.call("GET", "/health")

    def login(self, email: str, password: str) -> dict[str, Any]:
        """POST /api/auth/login; keeps the token for every later request."""
        body = self.call("POST", "/api/auth/login", json={"email": email, "password": password})
        if not isinstance(body, Mapping) or not body.get("token"):
            if isinstance(body, Mapping) and body.get("twoFAPending"):
                raise LibreChatError("this admin account uses two-factor login; use an account without it")
            raise LibreChatError("login answered without a token")
        self.token = str(body["token"])
        return dict(body.get("user") or {})

    def preflight(self) -> None:
        """Agents enabled (/api/config) and `file_search` among the agents' capabilities (/api/endpoints)."""
        config = self.call("GET", "/api/config")
        interface = config.get("interface") if isinstance(config, Mapping) else None
        agents_ui = interface.get("agents") if isinstance(interface, Mapping) else None
        if agents_ui is False or (isinstance(agents_ui, Mapping) and agents_ui.get("use") is False):
            raise LibreChatError("Agents are disabled in LibreChat (/api/config interface.agents)")
        endpoints = self.call("GET", "/api/endpoints")
        agents = endpoints.get("agents") if isinstance(endpoints, Mapping) else None
        if not isinstance(agents, Mapping):
            raise LibreChatError(
                "the agents endpoint is not enabled in LibreChat (/api/endpoints has no `agents`)"
            )
        capabilities = agents.get("capabilities") or []
        if FILE_SEARCH not in capabilities:
            raise LibreChatError(
                f"`file_search` is not among the agents' capabilities (/api/endpoints: {list(capabilities)})"
            )

    def find_group(self, name: str) -> dict[str, Any] | None:
        """The group with exactly this name (admin API), or None."""
        offset, limit = 0, 100
        while True:
            body = self.call(
                "GET", "/api/admin/groups", params={"search": name, "limit": limit, "offset": offset}
            )
            groups = body.get("groups") or []
            for group in groups:
                if group.get("name") == name:
                    return dict(group)
            offset += len(groups)
            if not groups or offset >= int(body.get("total") or 0):
                return None

    def create_group(self, name: str, description: str | None) -> dict[str, Any]:
        """POST /api/admin/groups (a local group, no members)."""
        payload: dict[str, Any] = {"name": name, "source": "local"}
        if description:
            payload["description"] = description
        body = self.call("POST", "/api/admin/groups", json=payload, expect=(201,))
        return dict(body["group"])

    def find_agents(self, name: str) -> list[dict[str, Any]]:
        """Agents the admin can see whose name is exactly `name`."""
        matches: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"search": name, "limit": 100}
            if cursor:
                params["cursor"] = cursor
            body = self.call("GET", "/api/agents", params=params)
            matches.extend(dict(a) for a in body.get("data") or [] if a.get("name") == name)
            cursor = body.get("after")
            if not body.get("has_more") or not cursor:
                return matches

    def create_agent(self, name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """POST /api/agents with the plan's settings and the file_search tool."""
        payload = {"name": name, **settings, "tools": [FILE_SEARCH]}
        return dict(self.call("POST", "/api/agents", json=payload, expect=(201,)))

    def update_agent(self, agent_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH /api/agents/:id."""
        return dict(self.call("PATCH", f"/api/agents/{agent_id}", json=dict(changes)))

    def agent_expanded(self, agent_id: str) -> dict[str, Any]:
        """GET /api/agents/:id/expanded: the full Agent, tool resources included (EDIT permission)."""
        return dict(self.call("GET", f"/api/agents/{agent_id}/expanded"))

    def agent_files(self, agent_id: str) -> list[dict[str, Any]]:
        """GET /api/files/agent/:id: file records attached to the Agent (author or editor)."""
        return [dict(f) for f in self.call("GET", f"/api/files/agent/{agent_id}")]

    def permissions(self, agent_db_id: str) -> dict[str, Any]:
        """GET /api/permissions/agent/:_id: principals and public flag."""
        return dict(self.call("GET", f"/api/permissions/agent/{agent_db_id}"))

    def share(self, agent_db_id: str, group_id: str | None, public: bool) -> None:
        """PUT /api/permissions/agent/:_id: the group as viewer; public only when the plan says so."""
        updated = [{"type": "group", "id": group_id, "accessRoleId": VIEWER_ROLE}] if group_id else []
        payload: dict[str, Any] = {"updated": updated, "removed": [], "public": public}
        if public:
            payload["publicAccessRoleId"] = VIEWER_ROLE
        self.call("PUT", f"/api/permissions/agent/{agent_db_id}", json=payload)

    def delete_file(self, agent_id: str, file_id: str, filepath: str) -> None:
        """DELETE /api/files: remove a file from the Agent and from LibreChat."""
        body = {
            "files": [{"file_id": file_id, "filepath": filepath}],
            "agent_id": agent_id,
            "tool_resource": FILE_SEARCH,
        }
        self.call("DELETE", "/api/files", json=body)

    def upload(self, agent_id: str, local: LocalFile, temp_file_id: str) -> dict[str, Any]:
        """POST /api/files once (multipart); the reply must say `embedded: true`.

        LibreChat assigns its own `file_id` and keeps ours as `temp_file_id`, which is how a retry
        recognises an upload that landed although its answer was lost.
        """
        fields = {
            "file_id": temp_file_id,
            "agent_id": agent_id,
            "tool_resource": FILE_SEARCH,
            "endpoint": "agents",
        }
        with local.path.open("rb") as fh:
            # text fields first: LibreChat's multer reads the body in order and needs them before the file
            files = {"file": (local.path.name, fh, "application/octet-stream")}
            response = self._send("POST", "/api/files", data=fields, files=files)
        if response.status_code != 200:
            raise LibreChatError(
                f"upload of {local.name}: HTTP {response.status_code} {_error_text(response)}",
                status=response.status_code,
            )
        body = response.json()
        if not isinstance(body, Mapping) or body.get("embedded") is not True:
            raise LibreChatError(
                f"upload of {local.name} was stored but not embedded (`embedded` is not true)"
            )
        return dict(body)
