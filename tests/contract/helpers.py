"""Small helpers the contract tests share: uploads and queries the way LibreChat sends them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx


def agent_id() -> str:
    """A unique id shaped like a LibreChat Agent id (`agent_...`), the only honoured `entity_id`."""
    return f"agent_{uuid.uuid4().hex[:12]}"


async def upload(
    client: httpx.AsyncClient,
    file_id: str,
    filename: str,
    content: bytes,
    headers: dict[str, str] | None = None,
    *,
    entity_id: str | None = None,
    content_type: str = "text/plain",
    route: str = "/embed",
    field: str = "file",
    storage_metadata: str | None = None,
) -> httpx.Response:
    """Multipart upload like LibreChat's `uploadVectors` (form fields + one file part)."""
    data: dict[str, str] = {"file_id": file_id}
    if entity_id is not None:
        data["entity_id"] = entity_id
    if storage_metadata is not None:
        data["storage_metadata"] = storage_metadata
    return await client.post(
        route, data=data, files={field: (filename, content, content_type)}, headers=headers or {}
    )


async def query(
    client: httpx.AsyncClient,
    text: str,
    file_id: str,
    headers: dict[str, str],
    *,
    k: int = 4,
    entity_id: str | None = None,
) -> httpx.Response:
    """`POST /query` as LibreChat's file_search tool sends it."""
    body: dict[str, Any] = {"query": text, "file_id": file_id, "k": k}
    if entity_id is not None:
        body["entity_id"] = entity_id
    return await client.post("/query", json=body, headers=headers)


def texts(pairs: list[list[Any]]) -> list[str]:
    """The page_content of each `[document, distance]` pair."""
    return [p[0]["page_content"] for p in pairs]


def file_ids_of(pairs: list[list[Any]]) -> set[str]:
    """The file ids a result mentions."""
    return {p[0]["metadata"]["file_id"] for p in pairs}
