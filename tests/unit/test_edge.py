"""Edge checks without a database: safe strings, the body guard on a bare ASGI app, the OpenAPI patch."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.api.body_limits import BodyGuardMiddleware
from app.api.openapi import entity_id_schema_pattern, patch_entity_ids
from app.config import load_settings
from app.config_tuning import DEFAULT_ENTITY_ID_PATTERN
from app.errors import ConfigError
from app.safe_text import SafeStr, safe_str_list, unsafe_in_json, unsafe_reason


@pytest.mark.parametrize("value", ["", "plain", "ünïcödé ✓", "emoji 😀", "tab\tnew\nline"])
def test_storable_strings(value: str) -> None:
    assert unsafe_reason(value) is None


@pytest.mark.parametrize(
    ("value", "word"), [("a\x00b", "NUL"), ("a\ud800", "surrogate"), ("\udfff", "surrogate")]
)
def test_unstorable_strings(value: str, word: str) -> None:
    reason = unsafe_reason(value)
    assert reason is not None and word in reason


def test_unsafe_in_json_walks_keys_lists_and_nesting() -> None:
    assert unsafe_in_json({"a": [1, {"b": "fine"}], "c": None}) is None
    assert "NUL" in str(unsafe_in_json({"a": [1, {"b": "x\x00"}]}))
    assert "a[1].b" in str(unsafe_in_json({"a": [1, {"b": "x\x00"}]}))
    assert "key" in str(unsafe_in_json({"k\ud800": 1}))
    deep: Any = "x\x00"
    for _ in range(5000):  # iterative: no recursion limit
        deep = [deep]
    assert unsafe_in_json(deep) is not None


class Model(BaseModel):
    text: SafeStr
    ids: safe_str_list(min_length=1, max_length=5)  # type: ignore[valid-type]


def test_safe_types_in_a_model() -> None:
    assert Model(text="ok", ids=["a", "b"]).ids == ["a", "b"]
    with pytest.raises(ValidationError) as exc:
        Model(text="o\x00k", ids=["a"])
    assert exc.value.errors()[0]["type"] == "string_unsafe"
    with pytest.raises(ValidationError) as exc:
        Model(text="ok", ids=["a", "b", "c\x00"])
    assert exc.value.errors()[0]["msg"].startswith("Item 2 ")
    with pytest.raises(ValidationError) as exc:
        # pydantic refuses this one itself once a length bound applies; either way a 422
        Model(text="ok", ids=["a", "c\ud800"])
    assert exc.value.errors()[0]["type"] in ("string_unicode", "string_unsafe")
    with pytest.raises(ValidationError) as exc:
        Model(text="ok", ids=["toolong"])
    assert exc.value.errors()[0]["type"] == "string_too_long"
    schema = Model.model_json_schema()
    assert schema["properties"]["text"]["pattern"] == "^[^\\u0000]*$"
    assert schema["properties"]["ids"]["items"]["pattern"] == "^[^\\u0000]*$"


# --- the body guard on a bare ASGI app ---------------------------------------------------------


class Echo:
    """An app that reads the whole body and answers its length (what a JSON route does first)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})


async def drive(
    chunks: list[bytes], *, headers: list[tuple[bytes, bytes]] = (), method: str = "POST", **scope: Any
) -> tuple[int, bytes, int]:
    """Status, body and how many chunks the guard pulled."""
    guard = BodyGuardMiddleware(Echo(), max_body_bytes=100, exempt_paths={"/upload"})
    pulled = 0

    async def receive() -> dict:
        nonlocal pulled
        pulled += 1
        index = pulled - 1
        return {"type": "http.request", "body": chunks[index], "more_body": index < len(chunks) - 1}

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    full = {"type": "http", "method": method, "path": "/query", "raw_path": b"/query", "query_string": b""}
    full.update(scope)
    full["headers"] = list(headers)
    await guard(full, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body, pulled


async def test_a_body_within_the_cap_passes() -> None:
    assert (await drive([b'{"a": ', b'"b"}']))[:2] == (200, b"10")


async def test_content_length_over_the_cap_reads_nothing() -> None:
    status, body, pulled = await drive([b"x" * 50] * 10, headers=[(b"content-length", b"500")])
    assert (status, pulled) == (413, 0)
    assert "MAX_JSON_BODY_BYTES (100 bytes)" in json.loads(body)["detail"]


async def test_a_streamed_body_stops_at_the_chunk_that_crosses() -> None:
    status, _, pulled = await drive([b"x" * 40] * 1000)
    assert (status, pulled) == (413, 3)  # 40, 80, 120 > 100


async def test_exempt_paths_and_bodyless_methods_pass() -> None:
    assert (await drive([b"x" * 60] * 5, path="/upload"))[:2] == (200, b"300")
    assert (await drive([b"x" * 60] * 5, method="GET"))[:2] == (200, b"300")


async def test_invalid_utf8_json_is_422_even_split_across_chunks() -> None:
    status, body, _ = await drive(
        [b'{"q": "\xc3', b'\xa9"}'], headers=[(b"content-type", b"application/json")]
    )
    assert status == 200  # é split over two chunks is fine
    status, body, _ = await drive([b'{"q": "\xe9"}'], headers=[(b"content-type", b"application/json")])
    assert status == 422
    assert json.loads(body)["message"] == "Request validation failed"
    # a body that is not JSON is not the guard's to judge
    assert (await drive([b"\xe9"], headers=[(b"content-type", b"application/octet-stream")]))[0] == 200


@pytest.mark.parametrize(
    ("raw_path", "query"),
    [(b"/documents/%ED%A0%80/context", b""), (b"/ids", b"entity_id=%FF"), (b"/ids", b"a=%C3")],
)
async def test_urls_must_decode_to_utf8(raw_path: bytes, query: bytes) -> None:
    status, body, pulled = await drive([b""], method="GET", raw_path=raw_path, query_string=query)
    assert (status, pulled) == (422, 0)
    assert "not valid UTF-8" in json.loads(body)["detail"][0]["msg"]
    assert (await drive([b""], method="GET", raw_path=b"/documents/caf%C3%A9", query_string=b"x=%C3%A9"))[
        0
    ] == 200


# --- OpenAPI and settings ------------------------------------------------------------------------


def test_every_entity_id_gets_the_pattern() -> None:
    doc = {
        "paths": {
            "/a": {
                "get": {
                    "parameters": [
                        {"name": "entity_id", "schema": {"anyOf": [{"type": "string"}, {"type": "null"}]}}
                    ]
                }
            },
            "/b": {
                "post": {
                    "requestBody": {
                        "content": {
                            "multipart/form-data": {
                                "schema": {"properties": {"entity_id": {"type": "string"}}}
                            }
                        }
                    }
                }
            },
        },
        "components": {
            "schemas": {
                "Q": {
                    "properties": {
                        "entity_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        "x": {"type": "string"},
                    }
                }
            }
        },
    }
    patch_entity_ids(doc, DEFAULT_ENTITY_ID_PATTERN)
    want = entity_id_schema_pattern(DEFAULT_ENTITY_ID_PATTERN)
    assert doc["paths"]["/a"]["get"]["parameters"][0]["schema"]["anyOf"][0]["pattern"] == want
    assert (
        doc["paths"]["/b"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"][
            "entity_id"
        ]["pattern"]
        == want
    )
    assert doc["components"]["schemas"]["Q"]["properties"]["entity_id"]["anyOf"][0]["pattern"] == want
    assert "pattern" not in doc["components"]["schemas"]["Q"]["properties"]["x"]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("", True),
        ("  ", True),
        ("agent_abc", True),
        ("user-1", False),
        ("agent_abc\n", False),
        ("xagent_a", False),
    ],
)
def test_the_schema_pattern_says_what_the_route_accepts(value: str, allowed: bool) -> None:
    # JSON Schema `pattern` is a search; Python's re.search is what generators use
    assert bool(re.search(entity_id_schema_pattern(DEFAULT_ENTITY_ID_PATTERN), value)) in (
        allowed,
        value.endswith("\n"),
    )


def test_entity_id_pattern_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_env_file=None).entity_id_regex.pattern == DEFAULT_ENTITY_ID_PATTERN
    monkeypatch.setenv("ENTITY_ID_PATTERN", "")
    assert load_settings(_env_file=None).entity_id_regex.pattern == DEFAULT_ENTITY_ID_PATTERN
    monkeypatch.setenv("ENTITY_ID_PATTERN", "^team_[a-z]+$")
    assert load_settings(_env_file=None).entity_id_regex.fullmatch("team_red")
    monkeypatch.setenv("ENTITY_ID_PATTERN", "agent_(")
    with pytest.raises(ConfigError) as exc:
        load_settings(_env_file=None)
    assert "ENTITY_ID_PATTERN" in str(exc.value) and "regular expression" in str(exc.value)


def test_max_json_body_bytes_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_env_file=None).max_json_body_bytes == 512 * 1024
    monkeypatch.setenv("MAX_JSON_BODY_BYTES", "10")
    with pytest.raises(ConfigError) as exc:
        load_settings(_env_file=None)
    assert "MAX_JSON_BODY_BYTES" in str(exc.value)
