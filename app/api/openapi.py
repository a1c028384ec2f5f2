"""The OpenAPI document as this app enforces it: the configured ENTITY_ID_PATTERN included.

Routes are declared once at import time, but the entity id pattern is a setting; so `/openapi.json`
is built by FastAPI as usual and every `entity_id` in it (query parameter, JSON property, multipart
field) then gets the pattern this app checks, so a generated client or fuzzer knows the rule.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI


def entity_id_schema_pattern(entity_id_pattern: str) -> str:
    """The JSON Schema `pattern` for `entity_id`: blank (means absent) or a full match of the setting."""
    return rf"^\s*$|^(?:{entity_id_pattern})$"


def _set_pattern(schema: dict[str, Any], pattern: str) -> None:
    if schema.get("type") == "string":
        schema["pattern"] = pattern
    for branch in schema.get("anyOf", []):
        if isinstance(branch, dict):
            _set_pattern(branch, pattern)


def patch_entity_ids(document: dict[str, Any], entity_id_pattern: str) -> None:
    """Give every `entity_id` schema in an OpenAPI `document` the app's pattern (in place)."""
    pattern = entity_id_schema_pattern(entity_id_pattern)
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("name") == "entity_id" and isinstance(node.get("schema"), dict):
                _set_pattern(node["schema"], pattern)
            props = node.get("properties")
            if isinstance(props, dict) and isinstance(props.get("entity_id"), dict):
                _set_pattern(props["entity_id"], pattern)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def install_openapi(app: FastAPI, entity_id_pattern: str) -> None:
    """Make `app.openapi()` (and so `/openapi.json`) carry the app's entity id pattern."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            patch_entity_ids(build(), entity_id_pattern)
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
