"""NUL and lone surrogates in every string a route takes answer 422 with a `detail`, before any SQL.

The string parameters are found by walking the app's own OpenAPI document (path and query
parameters, JSON body properties and array items, multipart text fields and the uploaded file's
name), so a new route or field is covered without touching this file. Each bad request starts from
a baseline request that the route accepts (not 422), with exactly one string replaced.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import httpx
import pytest

from app.config import load_settings
from app.main import create_app
from tests.contract.helpers import agent_id
from tests.fixtures.service import TEST_JWT_SECRET, auth, make_token, new_id

BAD_VALUES = {"nul": "bad\x00value", "surrogate": "bad\ud800value"}


def _openapi() -> dict[str, Any]:
    # the routes and schemas do not depend on the database: build the document without a lifespan
    settings = load_settings(_env_file=None, jwt_secret=TEST_JWT_SECRET)
    return create_app(settings).openapi()


DOC = _openapi()


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow a `$ref` into components."""
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = DOC["components"]["schemas"][name]
    return schema


def non_null(schema: dict[str, Any]) -> dict[str, Any]:
    """The first branch of an `anyOf` that is not `null`."""
    schema = resolve(schema)
    for branch in schema.get("anyOf", []):
        if resolve(branch).get("type") != "null":
            return resolve(branch)
    return schema


def is_string(schema: dict[str, Any]) -> bool:
    s = non_null(schema)
    return s.get("type") == "string" and s.get("format") != "binary"


def is_string_array(schema: dict[str, Any]) -> bool:
    s = non_null(schema)
    return s.get("type") == "array" and is_string(s.get("items", {}))


def sample(schema: dict[str, Any]) -> Any:
    """A small value the schema accepts."""
    s = non_null(schema)
    kind = s.get("type")
    if kind == "string":
        return "x"
    if kind == "integer":
        return int(s.get("minimum", 1))
    if kind == "number":
        return float(s.get("minimum", 1))
    if kind == "boolean":
        return False
    if kind == "array":
        return [sample(s.get("items", {}))]
    if kind == "object":
        return {
            name: sample(sub)
            for name, sub in s.get("properties", {}).items()
            if name in s.get("required", [])
        }
    raise AssertionError(f"no sample for {s}")


@dataclass
class Call:
    """A request, built from the OpenAPI document, that can be changed in one place."""

    method: str
    path: str
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    json_body: Any = None
    form: dict[str, str] | None = None
    file_field: str | None = None
    filename: str = "notes.txt"

    def url(self) -> str:
        path = self.path
        for name, value in self.path_params.items():
            path = path.replace("{" + name + "}", _enc(value))
        pairs = []
        for name, value in self.query.items():
            for item in value if isinstance(value, list) else [value]:
                pairs.append(f"{_enc(name)}={_enc(item)}")
        return path + ("?" + "&".join(pairs) if pairs else "")

    def content(self) -> tuple[bytes | None, dict[str, str]]:
        if self.form is not None:
            return multipart(self.form, self.file_field, self.filename)
        if self.json_body is not None:
            # ensure_ascii: a lone surrogate travels as the escape `\ud800`, as a hostile client sends it
            return json.dumps(self.json_body, ensure_ascii=True).encode(), {
                "Content-Type": "application/json"
            }
        return None, {}


def _enc(value: str) -> str:
    return quote_from_bytes(value.encode("utf-8", "surrogatepass"), safe="")


def multipart(fields: dict[str, str], file_field: str | None, filename: str) -> tuple[bytes, dict[str, str]]:
    """A multipart body built by hand: httpx would percent-escape control characters in names."""
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode("utf-8", "surrogatepass") + b"\r\n"
    if file_field is not None:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="'.encode()
        out += filename.encode("utf-8", "surrogatepass")
        out += b'"\r\nContent-Type: text/plain\r\n\r\nSome harmless text about kites.\r\n'
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


@dataclass(frozen=True)
class Slot:
    """One string the client controls: where it goes, and how to put a value there."""

    operation: str
    location: str  # path | query | body
    name: str

    def __str__(self) -> str:
        return f"{self.operation} {self.location}:{self.name}"


def baseline(method: str, path: str, op: dict[str, Any]) -> Call:
    """The smallest request the schema accepts."""
    call = Call(method.upper(), path)
    for param in op.get("parameters", []):
        if param["in"] == "path":
            # a job id is a number; any other path parameter a string
            call.path_params[param["name"]] = (
                new_id() if is_string(param["schema"]) else str(sample(param["schema"]))
            )
        elif param["in"] == "query" and param.get("required"):
            call.query[param["name"]] = sample(param["schema"])
    body = op.get("requestBody", {}).get("content", {})
    if "application/json" in body:
        call.json_body = sample(body["application/json"]["schema"])
    elif "multipart/form-data" in body:
        schema = resolve(body["multipart/form-data"]["schema"])
        call.form = {}
        for name, prop in schema["properties"].items():
            if prop.get("format") == "binary":
                call.file_field = name
            elif name in schema.get("required", []):
                call.form[name] = new_id()
    return call


def slots(method: str, path: str, op: dict[str, Any]) -> Iterator[Slot]:
    """Every string parameter of one operation."""
    operation = f"{method.upper()} {path}"
    for param in op.get("parameters", []):
        if is_string(param["schema"]) or is_string_array(param["schema"]):
            yield Slot(operation, param["in"], param["name"])
    body = op.get("requestBody", {}).get("content", {})
    if "application/json" in body:
        schema = non_null(body["application/json"]["schema"])
        if is_string_array(schema):
            yield Slot(operation, "body", "[]")
        for name, prop in schema.get("properties", {}).items():
            if is_string(prop) or is_string_array(prop):
                yield Slot(operation, "body", name)
    if "multipart/form-data" in body:
        schema = resolve(body["multipart/form-data"]["schema"])
        for name in schema["properties"]:
            yield Slot(operation, "body", name)  # a binary property stands for the file's name


def with_bad_value(call: Call, op: dict[str, Any], slot: Slot, bad: str) -> Call:
    """`call` with `bad` in `slot` (as the only item of a list where the slot is a list)."""
    call = copy.deepcopy(call)
    if slot.location == "path":
        call.path_params[slot.name] = bad
    elif slot.location == "query":
        schema = next(p["schema"] for p in op["parameters"] if p["name"] == slot.name and p["in"] == "query")
        call.query[slot.name] = [bad] if is_string_array(schema) else bad
    elif call.form is not None:
        if slot.name == call.file_field:
            call.filename = bad
        else:
            call.form[slot.name] = bad
    elif slot.name == "[]":
        call.json_body = [bad]
    else:
        schema = non_null(op["requestBody"]["content"]["application/json"]["schema"])
        call.json_body[slot.name] = [bad] if is_string_array(schema["properties"][slot.name]) else bad
    return call


OPERATIONS = [(m, p, op) for p, ops in DOC["paths"].items() for m, op in ops.items()]
SLOTS = [(m, p, op, s) for m, p, op in OPERATIONS for s in slots(m, p, op)]


def caller(path: str, user: str) -> dict[str, str]:
    """The token of a caller the route serves: an admin for /v2/ and /admin/ routes (others get 403 first)."""
    return auth(user, role="ADMIN") if path.startswith(("/v2/", "/admin/")) else auth(user)


async def send(client: httpx.AsyncClient, call: Call, headers: dict[str, str]) -> httpx.Response:
    content, content_headers = call.content()
    return await client.request(
        call.method, call.url(), content=content, headers={**headers, **content_headers}
    )


def test_the_walk_finds_every_string_parameter() -> None:
    """Guards the walker itself: if it found nothing, the tests below would prove nothing."""
    found = {str(s) for *_, s in SLOTS}
    for expected in [
        "POST /query body:query",
        "POST /query body:file_id",
        "POST /query body:entity_id",
        "POST /query_multiple body:file_ids",
        "GET /documents query:ids",
        "GET /documents query:entity_id",
        "DELETE /documents body:[]",
        "DELETE /documents query:entity_id",
        "GET /documents/{file_id}/context path:file_id",
        "GET /ids query:entity_id",
        "POST /embed body:file_id",
        "POST /embed body:entity_id",
        "POST /embed body:storage_metadata",
        "POST /embed body:file",
        "POST /embed-upload body:uploaded_file",
        "POST /text body:file",
        "POST /local/embed body:filepath",
        "POST /local/embed body:filename",
        "POST /local/embed body:file_content_type",
        "POST /local/embed query:entity_id",
    ]:
        assert expected in found, f"walker missed {expected}; found {sorted(found)}"


@pytest.mark.parametrize(
    ("method", "path", "op"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p, _ in OPERATIONS]
)
async def test_baseline_requests_are_accepted(
    client: httpx.AsyncClient, method: str, path: str, op: dict
) -> None:
    """Each bad request below differs from one of these in one string only."""
    r = await send(client, baseline(method, path, op), caller(path, new_id("user")))
    if path == "/query_v2":
        # this app has V2 switched off: past validation, /query_v2 fails closed (503), as documented
        assert r.status_code == 503 and "RAG_V2_NAMESPACE_IDS" in r.json()["detail"], r.text
        return
    assert r.status_code < 500 and r.status_code != 422, r.text


@pytest.mark.parametrize("kind", list(BAD_VALUES))
@pytest.mark.parametrize(("method", "path", "op", "slot"), SLOTS, ids=[str(s) for *_, s in SLOTS])
async def test_unsafe_strings_are_422_with_a_detail(
    client: httpx.AsyncClient, method: str, path: str, op: dict, slot: Slot, kind: str
) -> None:
    user = new_id("user")
    call = with_bad_value(baseline(method, path, op), op, slot, BAD_VALUES[kind])
    r = await send(client, call, caller(path, user))
    assert r.status_code == 422, f"{slot} with {kind}: {r.status_code} {r.text}"
    body = r.json()
    assert body["message"] == "Request validation failed"
    (error, *_) = body["detail"]
    assert error["msg"] and isinstance(error["msg"], str)
    # the error points at this slot (or, for an undecodable URL, at the URL part it sits in)
    assert error["loc"][0] == slot.location
    assert len(error["loc"]) == 1 or slot.name in error["loc"] or slot.name == "[]", error
    # nothing was stored under the caller
    assert (await client.get("/ids", headers=auth(user))).json() == []


async def test_unsafe_token_claims_are_422(client: httpx.AsyncClient) -> None:
    for user_id in ("user\x00one", "user\ud800one"):
        token = make_token(user_id)
        r = await client.get("/ids", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["header", "Authorization", "id"]
    admin_with_nul = make_token("u1", role="ADMIN\x00")
    r = await client.get("/ids", headers={"Authorization": f"Bearer {admin_with_nul}"})
    assert r.status_code == 422


async def test_two_authorization_headers_are_401(client: httpx.AsyncClient) -> None:
    valid = f"Bearer {make_token(new_id('user'))}"
    forged = "Bearer eyJhbGciOiJub25lIn0.eyJpZCI6ImFkbWluIn0."
    for pair in ([valid, forged], [forged, valid], [valid, valid]):
        r = await client.get("/ids", headers=[("Authorization", pair[0]), ("Authorization", pair[1])])
        assert r.status_code == 401
        assert r.json() == {"detail": "Missing or invalid Authorization header"}
    assert (await client.get("/ids", headers={"Authorization": valid})).status_code == 200


async def test_invalid_utf8_json_is_422(client: httpx.AsyncClient) -> None:
    body = b'{"query": "caf\xe9", "file_id": "f"}'  # latin-1, not UTF-8
    r = await client.post(
        "/query", content=body, headers={**auth(new_id("user")), "Content-Type": "application/json"}
    )
    assert r.status_code == 422
    assert r.json()["message"] == "Request validation failed"
    assert "UTF-8" in r.json()["detail"][0]["msg"]


async def test_nul_in_storage_metadata_values_is_422(client: httpx.AsyncClient) -> None:
    # a JSON escape inside the string: valid UTF-8, but jsonb refuses \u0000 and lone surrogates
    for meta in ('{"key": "a\\u0000b"}', '{"a\\u0000": 1}', '{"k": ["\\ud800"]}', "[" * 5000 + "]" * 5000):
        r = await httpx_upload(client, meta)
        assert r.status_code == 422, (meta[:40], r.text)
        assert r.json()["detail"][0]["loc"] == ["body", "storage_metadata"]


async def httpx_upload(client: httpx.AsyncClient, storage_metadata: str) -> httpx.Response:
    return await client.post(
        "/embed",
        data={"file_id": new_id(), "storage_metadata": storage_metadata},
        files={"file": ("a.txt", b"Text about kites.", "text/plain")},
        headers=auth(new_id("user")),
    )


async def test_rfc5987_filename_charsets_other_than_utf8_and_latin1_are_ignored(
    client: httpx.AsyncClient,
) -> None:
    # `unicode_escape` would decode to any code point, a lone surrogate included
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file_id"\r\n\r\n{new_id()}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="plain.txt"; '
        f"filename*=unicode_escape''%5Cud800.txt\r\nContent-Type: text/plain\r\n\r\nKites fly.\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    r = await client.post(
        "/embed",
        content=body,
        headers={**auth(new_id("user")), "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["filename"] == "plain.txt"


# --- /local/embed: a path the OS cannot open is a 4xx -------------------------------------------


async def test_local_embed_paths_the_os_refuses_are_4xx(client: httpx.AsyncClient) -> None:
    upload_dir: Path = client.app.state.settings.upload_dir  # type: ignore[attr-defined]
    upload_dir.mkdir(parents=True, exist_ok=True)
    loop = upload_dir / f"loop-{uuid.uuid4().hex[:8]}"
    os.symlink(loop.name, loop)  # points at itself: ELOOP
    a_file = upload_dir / f"plain-{uuid.uuid4().hex[:8]}.txt"
    a_file.write_text("text")
    h = auth(new_id("user"))
    cases = {
        "x" * 300: 400,  # one component longer than NAME_MAX: ENAMETOOLONG
        "/".join(["y" * 200] * 20) + "/" + "z" * 70: 400,  # 4,090 chars: with the folder, over PATH_MAX
        loop.name: 400,
        f"{a_file.name}/below": 404,  # ENOTDIR on the way: nothing there
        "missing.txt": 404,
        ".": 404,  # a directory is not a file
    }
    for filepath, status in cases.items():
        body = {"filepath": filepath, "filename": "a.txt", "file_id": new_id()}
        r = await client.post("/local/embed", json=body, headers=h)
        assert r.status_code == status, (filepath[:40], r.text)
        assert r.json()["detail"]
    r = await client.post(
        "/local/embed", json={"filepath": "x" * 5000, "filename": "a", "file_id": "f"}, headers=h
    )
    assert r.status_code == 400  # longer than the schema allows: a bound (app/validation.py)
    assert "filepath must have at most 4096 characters" in r.json()["detail"]


def test_agent_helper_matches_the_default_pattern() -> None:
    assert load_settings(_env_file=None).entity_id_regex.fullmatch(agent_id())


JSON_OPERATIONS = [
    (m, p, op)
    for m, p, op in OPERATIONS
    if "application/json" in op.get("requestBody", {}).get("content", {})
]


def test_the_walk_finds_every_json_body() -> None:
    found = {f"{m.upper()} {p}" for m, p, _ in JSON_OPERATIONS}
    assert {"POST /query", "POST /query_multiple", "DELETE /documents", "POST /local/embed"} <= found


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
@pytest.mark.parametrize(
    ("method", "path", "op"), JSON_OPERATIONS, ids=[f"{m.upper()} {p}" for m, p, _ in JSON_OPERATIONS]
)
async def test_json_without_its_content_type_is_told_to_send_it(
    client: httpx.AsyncClient, method: str, path: str, op: dict, content_type: str | None
) -> None:
    """The accepted baseline body, sent as curl -d sends it (a form) or with no type at all.

    Before: 422 "Input should be a valid dictionary or object to extract fields from" (or "a valid
    list"), which said neither that the body must be JSON nor which header was missing.
    """
    call = baseline(method, path, op)
    content, _ = call.content()
    headers = caller(path, new_id("user"))
    if content_type is not None:
        headers["Content-Type"] = content_type
    r = await client.request(call.method, call.url(), content=content, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["message"] == "Request validation failed"
    (error, *_) = r.json()["detail"]
    assert error["loc"] == ["body"] and error["type"] == "json_content_type"
    assert error["msg"].startswith(
        "The request body must be JSON sent with the header Content-Type: application/json"
    )
    said = f"said Content-Type: {content_type}" if content_type else "had no Content-Type"
    assert f"(this request {said})" in error["msg"]


async def test_a_json_body_of_the_wrong_shape_keeps_its_field_errors(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/query", content=b"[]", headers={**auth(new_id("user")), "Content-Type": "application/json"}
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] == "model_attributes_type"  # sent as JSON: not the header's fault
