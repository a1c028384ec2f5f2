"""The OpenAPI document as this app enforces it: the configured ENTITY_ID_PATTERN, and 400 for bounds.

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


OUT_OF_BOUNDS_DESCRIPTION = (
    "A value out of its bounds (a number, a length, a count of items): `detail` names each"
)


def document_out_of_bounds(document: dict[str, Any]) -> None:
    """Give every operation that validates its input (it lists 422) the 400 that app/validation.py answers."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses") if isinstance(operation, dict) else None
            if isinstance(responses, dict) and "422" in responses and "400" not in responses:
                responses["400"] = {
                    "description": OUT_OF_BOUNDS_DESCRIPTION,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
                    },
                }


def install_openapi(app: FastAPI, entity_id_pattern: str) -> None:
    """Make `app.openapi()` (and so `/openapi.json`) carry the app's entity id pattern."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            patch_entity_ids(document, entity_id_pattern)
            document_out_of_bounds(document)
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
