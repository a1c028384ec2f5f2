"""Wire models of the V1 (rag_api-compatible) routes. Field names are the contract."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_QUERY_CHARS = 20_000
MAX_FILE_ID_CHARS = 512
MAX_FILE_IDS = 1000


class _Body(BaseModel):
    # unknown keys are ignored, as rag_api does
    model_config = ConfigDict(extra="ignore")


class QueryRequest(_Body):
    """`POST /query`."""

    query: str = Field(max_length=MAX_QUERY_CHARS)
    file_id: str = Field(min_length=1, max_length=MAX_FILE_ID_CHARS)
    k: int = Field(4, ge=1, le=100)
    entity_id: str | None = Field(None, max_length=MAX_FILE_ID_CHARS)


class QueryMultipleRequest(_Body):
    """`POST /query_multiple`: k is global across all files."""

    query: str = Field(max_length=MAX_QUERY_CHARS)
    # emptiness and the 1,000 cap are checked by the route, to answer 400 as the contract says
    file_ids: list[str]
    k: int = Field(4, ge=1, le=100)
    entity_id: str | None = Field(None, max_length=MAX_FILE_ID_CHARS)


class LocalEmbedRequest(_Body):
    """`POST /local/embed`: a file already in RAG_UPLOAD_DIR."""

    filepath: str = Field(min_length=1, max_length=4096)
    filename: str = Field(min_length=1, max_length=1024)
    file_content_type: str | None = Field(None, max_length=255)
    file_id: str = Field(min_length=1, max_length=MAX_FILE_ID_CHARS)


class EmbedResponse(BaseModel):
    """Success answer of the embed routes (LibreChat needs truthy `status` and `known_type`)."""

    status: bool = True
    message: str = "File processed successfully."
    file_id: str
    filename: str
    known_type: bool = True


class TextResponse(BaseModel):
    """`POST /text`."""

    text: str
    file_id: str
    filename: str
    known_type: bool = True


class DocumentOut(BaseModel):
    """A chunk as `GET /documents` returns it."""

    page_content: str
    metadata: dict[str, Any]


class SearchDocument(BaseModel):
    """A chunk inside a query result pair (langchain's Document serialisation)."""

    id: str | None
    page_content: str
    metadata: dict[str, Any]
    type: Literal["Document"] = "Document"


class MessageResponse(BaseModel):
    """`DELETE /documents`."""

    message: str


class HealthResponse(BaseModel):
    """`GET /health`."""

    status: Literal["UP", "DOWN"]
