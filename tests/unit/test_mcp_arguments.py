"""The MCP tools check their arguments with the routes' own models: the same limits, the same words."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from app.errors import BadRequest
from app.evidence.query import schemas as v2_schemas
from app.mcp.arguments import JobsArguments, ListArguments, ReadArguments, ReindexArguments, build, present
from app.mcp.describe import READ_DEFAULT_CHARS, V1_DEFAULT_K
from app.mcp.server import search_arguments
from app.schemas import MAX_FILE_ID_CHARS, MAX_QUERY_CHARS, QueryMultipleRequest
from app.validation import bounds_detail


def route_sentence(**body: Any) -> str:
    """What `/query_multiple` answers (400) for this body."""
    with pytest.raises(ValidationError) as caught:
        QueryMultipleRequest.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]
    sentence = bounds_detail(errors)
    assert sentence is not None
    return sentence


@pytest.mark.parametrize(
    "body",
    [
        {"query": "q", "file_ids": ["f"], "k": 0},
        {"query": "q", "file_ids": ["f"], "k": 101},
        {"query": "x" * (MAX_QUERY_CHARS + 1), "file_ids": ["f"]},
        {"query": "q", "file_ids": ["f" * (MAX_FILE_ID_CHARS + 1)]},
    ],
)
def test_v1_search_refuses_what_query_multiple_refuses_in_its_words(body: dict[str, Any]) -> None:
    with pytest.raises(MCPError) as caught:
        search_arguments("v1", body["query"], body["file_ids"], None, body.get("k"))
    assert caught.value.code == INVALID_PARAMS
    assert caught.value.message == route_sentence(**body)


def test_v2_search_uses_query_v2s_own_bounds() -> None:
    for query, ids, k, words in [
        ("x" * (v2_schemas.MAX_QUERY_CHARS + 1), ["f"], None, "query must be at most 4000 characters"),
        ("q", ["f" * (v2_schemas.MAX_FILE_ID_CHARS + 1)], None, "each file id must be 1 to 200 characters"),
        ("q", ["f"], v2_schemas.MAX_K + 1, "k must be between 1 and 10"),
        ("   ", None, None, "query must not be empty"),
    ]:
        with pytest.raises(BadRequest, match=words):
            search_arguments("v2", query, ids, None, k)


def test_search_defaults_and_every_file() -> None:
    assert search_arguments("v1", "q", None, None, None) == (None, V1_DEFAULT_K)
    assert search_arguments("v2", "q", None, None, None) == (None, v2_schemas.DEFAULT_K)
    # V2 de-duplicates as /query_v2 does; V1 leaves repeats below the cap to the scope, as the route
    assert search_arguments("v2", "q", ["a", "b", "a"], None, 3) == (["a", "b"], 3)
    assert search_arguments("v1", "q", ["a", "a"], None, 3) == (["a", "a"], 3)
    with pytest.raises(BadRequest, match="At most 1000 file_ids"):
        search_arguments("v1", "q", [f"f{i}" for i in range(1001)], None, None)
    with pytest.raises(BadRequest, match="query must not be empty"):
        search_arguments("v1", " ", ["a"], None, None)


def test_the_tools_own_arguments() -> None:
    read = build(ReadArguments, **present(file_id="f", entity_id=None, offset=None, limit=None))
    assert (read.offset, read.limit) == (0, READ_DEFAULT_CHARS)
    for model, arguments, words in [
        (ReadArguments, {"file_id": "f", "limit": 10**6}, "limit must be at most 100000"),
        (ReadArguments, {"file_id": ""}, "file_id must not be empty"),
        (ListArguments, {"limit": 0}, "limit must be at least 1"),
        (JobsArguments, {"before": 0}, "before must be at least 1"),
        (ReindexArguments, {"namespace": "n" * 513}, "namespace must have at most 512 characters"),
        (ReadArguments, {"file_id": "a\x00b"}, "file_id: String contains a NUL"),
    ]:
        with pytest.raises(MCPError, match=words) as caught:
            build(model, **arguments)
        assert caught.value.code == INVALID_PARAMS
