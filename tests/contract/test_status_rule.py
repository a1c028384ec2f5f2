"""One status per kind of mistake on every route: 400 for a well-typed value out of bounds, 422 if malformed.

The bounded inputs are found by walking the app's OpenAPI document (path and query parameters, JSON
body properties, a JSON array body, multipart text fields: each `maximum`, `minimum`, `maxLength`,
`minLength`, `maxItems`, `minItems`), so a new route or bound is covered without touching this file.
Each request starts from the walk's baseline (tests/contract/test_input_hygiene.py, which the route
accepts) with one value pushed past one bound. The bounds a route checks in code, which the schema
does not show (the count of distinct file ids, `/query_v2`'s `k` and query length), are listed too.
docs/routes.md, "Which status for which mistake", is the table this pins.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.contract.test_input_hygiene import (
    OPERATIONS,
    Call,
    baseline,
    caller,
    non_null,
    resolve,
    send,
)
from tests.fixtures.service import new_id

# a violation that would make the request larger than this is taken on the other side of the bound
# (an empty list rather than 100,001 ids, which MAX_JSON_BODY_BYTES answers 413 first)
MAX_VIOLATION_SIZE = 20_000


@dataclass(frozen=True)
class Bound:
    """One bounded input of one operation, and the value that breaks it."""

    operation: str
    location: str  # path | query | body | form
    name: str  # "[]" for a JSON array body
    value: Any

    def __str__(self) -> str:
        return f"{self.operation} {self.location}:{self.name}"


def _violation(schema: dict[str, Any]) -> Any:
    """A value of the right type just outside the schema's bounds, or None when it has none."""
    s = non_null(schema)
    kind = s.get("type")
    if kind in ("integer", "number"):
        if "maximum" in s:
            return int(s["maximum"]) + 1
        if "minimum" in s:
            return int(s["minimum"]) - 1
    if kind == "string":
        if "maxLength" in s and s["maxLength"] < MAX_VIOLATION_SIZE:
            return "x" * (s["maxLength"] + 1)
        if s.get("minLength", 0) >= 1:
            return ""
    if kind == "array":
        if "maxItems" in s and s["maxItems"] < MAX_VIOLATION_SIZE // 10:
            return [f"id-{i}" for i in range(s["maxItems"] + 1)]
        if s.get("minItems", 0) >= 1:
            return []
    return None


def bounds(method: str, path: str, op: dict[str, Any]) -> Iterator[Bound]:
    """Every input of one operation whose schema bounds it, with a value that breaks the bound."""
    operation = f"{method.upper()} {path}"
    for param in op.get("parameters", []):
        value = _violation(param["schema"])
        if value is not None and not (param["in"] == "path" and value == ""):  # "" is another route
            yield Bound(operation, param["in"], param["name"], value)
    body = op.get("requestBody", {}).get("content", {})
    if "application/json" in body:
        schema = non_null(body["application/json"]["schema"])
        if schema.get("type") == "array" and (value := _violation(schema)) is not None:
            yield Bound(operation, "body", "[]", value)
        for name, prop in schema.get("properties", {}).items():
            if (value := _violation(prop)) is not None:
                yield Bound(operation, "body", name, value)
    if "multipart/form-data" in body:
        for name, prop in resolve(body["multipart/form-data"]["schema"])["properties"].items():
            if prop.get("format") != "binary" and (value := _violation(prop)) is not None:
                yield Bound(operation, "form", name, value)


def with_value(call: Call, bound: Bound) -> Call:
    """`call` with the bound's value in its place."""
    call = copy.deepcopy(call)
    if bound.location == "path":
        call.path_params[bound.name] = str(bound.value)
    elif bound.location == "query":
        call.query[bound.name] = (
            [str(v) for v in bound.value] if isinstance(bound.value, list) else str(bound.value)
        )
    elif bound.location == "form":
        assert call.form is not None
        if "run_id" in call.form and bound.name != "run_id":
            call.form["run_id"] = "1"  # a run's id is a number: the baseline's text would be refused first
        call.form[bound.name] = bound.value
    elif bound.name == "[]":
        call.json_body = bound.value
    else:
        call.json_body[bound.name] = bound.value
    return call


BOUNDS = [(m, p, op, b) for m, p, op in OPERATIONS for b in bounds(m, p, op)]
IDS_1001 = [f"id-{i}" for i in range(1001)]
# bounds checked in code (not in the schema), in the request each route takes
CODE_BOUNDS = [
    ("POST", "/query_multiple", {"query": "q", "file_ids": IDS_1001}),
    ("POST", "/query_multiple", {"query": "q", "file_ids": []}),
    ("POST", "/query_v2", {"query": "q", "file_ids": IDS_1001}),
    ("POST", "/query_v2", {"query": "q", "file_ids": []}),
    ("POST", "/query_v2", {"query": "q", "file_ids": ["a"], "k": 0}),
    ("POST", "/query_v2", {"query": "q", "file_ids": ["a"], "k": 11}),
    ("POST", "/query_v2", {"query": "x" * 4001, "file_ids": ["a"]}),
]
# the same routes, a value of the wrong type or shape: 422 with the list of field errors
MALFORMED = [
    ("POST", "/query", {"query": "q", "file_id": "f", "k": "many"}),
    ("POST", "/query", {"query": "q"}),
    ("POST", "/query_multiple", {"query": "q", "file_ids": "f", "k": 4}),
    ("POST", "/query_multiple", {"query": "q", "file_ids": ["f"], "k": 2.5}),
    ("POST", "/query_v2", {"query": "q", "file_ids": ["f"], "k": "many"}),
    ("POST", "/query_v2", {"query": "q", "file_ids": "f"}),
    ("DELETE", "/documents", {"file_ids": ["f"]}),
]


def test_the_walk_finds_the_limits_of_every_route() -> None:
    """Guards the walker: the limits the issue named, and every route that has a bounded input."""
    found = {str(b) for *_, b in BOUNDS}
    for expected in [
        "POST /query body:k",
        "POST /query_multiple body:k",
        "GET /documents query:ids",
        "DELETE /documents body:[]",
        "GET /documents/{file_id}/context path:file_id",
        "POST /embed form:file_id",
        "POST /local/embed body:filepath",
        "GET /admin/jobs query:limit",
        "GET /jobs/{job_id} path:job_id",
        "POST /v2/runs body:file_ids",
    ]:
        assert expected in found, f"walker missed {expected}; found {sorted(found)}"
    walked = {f"{m.upper()} {p}" for m, p, _ in OPERATIONS}
    unbounded = walked - {b.operation for *_, b in BOUNDS}
    assert unbounded == {"GET /health", "GET /metrics", "GET /v2/status", "GET /admin/status"}


@pytest.mark.parametrize(("method", "path", "op", "bound"), BOUNDS, ids=[str(b) for *_, b in BOUNDS])
async def test_a_value_out_of_bounds_is_400_with_a_sentence(
    client: httpx.AsyncClient, method: str, path: str, op: dict[str, Any], bound: Bound
) -> None:
    r = await send(client, with_value(baseline(method, path, op), bound), caller(path, new_id("user")))
    assert r.status_code == 400, f"{bound}: {r.status_code} {r.text[:300]}"
    detail = r.json()["detail"]
    assert (isinstance(detail, str) and bound.name.strip("[]") in detail) or bound.name == "[]", detail


@pytest.mark.parametrize(("method", "path", "body"), CODE_BOUNDS, ids=lambda v: str(v)[:40])
async def test_bounds_checked_in_code_are_400_too(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]
) -> None:
    r = await client.request(method, path, json=body, headers=caller(path, new_id("user")))
    assert r.status_code == 400, r.text[:300]
    assert isinstance(r.json()["detail"], str)


@pytest.mark.parametrize(("method", "path", "body"), MALFORMED, ids=lambda v: str(v)[:40])
async def test_a_malformed_value_is_422_with_the_field_errors(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]
) -> None:
    r = await client.request(method, path, json=body, headers=caller(path, new_id("user")))
    assert r.status_code == 422, r.text[:300]
    assert r.json()["message"] == "Request validation failed"
    assert isinstance(r.json()["detail"], list) and r.json()["detail"][0]["loc"]


# 1,001 file ids on every route that caps them. Before, three wordings: "At most 1000 file_ids are
# allowed", "the request body must have at most 1000 items (1001 given)" and "ids must have at most
# 1000 items (1001 given)".
TOO_MANY = [
    ("POST", "/query_multiple", {"json": {"query": "q", "file_ids": IDS_1001}}),
    ("POST", "/query_v2", {"json": {"query": "q", "file_ids": IDS_1001}}),
    ("GET", "/documents", {"params": {"ids": IDS_1001}}),
    ("DELETE", "/documents", {"json": IDS_1001}),
]


@pytest.mark.parametrize(("method", "path", "kwargs"), TOO_MANY, ids=[f"{m} {p}" for m, p, _ in TOO_MANY])
async def test_too_many_file_ids_are_refused_in_one_wording(
    client: httpx.AsyncClient, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    r = await client.request(method, path, headers=caller(path, new_id("user")), **kwargs)
    assert r.status_code == 400, r.text[:300]
    if path == "/query_multiple":  # CONTRACT.md pins its words exactly: the same sentence, no count
        assert r.json() == {"detail": "At most 1000 file_ids are allowed"}
    else:
        assert r.json() == {
            "detail": "At most 1000 file_ids are allowed (1001 given); send at most 1000 per request"
        }
