"""Checks every string from a request passes before it can reach SQL, the filesystem or a log.

PostgreSQL cannot store NUL in `text` or `jsonb`, and a lone surrogate (`"\\ud800"` in JSON) is not
encodable as UTF-8 at all: either one used to surface as a 500 from deep inside the database driver.
Refusing them here, once, as a 422 with a clear message, keeps every route and every future route safe.

    unsafe_reason(text)        pure check; None when the string is storable
    SafeStr                    a pydantic/FastAPI string type that refuses unsafe strings (422)
    safe_str(...)              the same with length bounds (checked first, so their errors read well)
    safe_str_list(...)         the same for lists of ids (one C-speed check for the whole list)
    unsafe_in_json(value)      the same check over every key and string of a parsed JSON value
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, GetJsonSchemaHandler, StringConstraints
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

# What the OpenAPI document says about every safe string: no NUL (JSON Schema has no way to say
# "no lone surrogates", and well-formed JSON generators never produce them).
NUL_FREE_PATTERN = r"^[^\u0000]*$"
# A safe string that must also hold something other than whitespace (multipart `file_id`).
NON_BLANK_NUL_FREE_PATTERN = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"

UNSAFE_ERROR_TYPE = "string_unsafe"


def unsafe_reason(value: str) -> str | None:
    """Why `value` cannot be stored (NUL or invalid Unicode), or None when it is fine."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store; remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return (
            "contains invalid Unicode (a lone surrogate such as \\ud800, not valid UTF-8); "
            "send well-formed UTF-8 text"
        )
    return None


def _check_str(value: str) -> str:
    reason = unsafe_reason(value)
    if reason is not None:
        raise PydanticCustomError(UNSAFE_ERROR_TYPE, "String {reason}", {"reason": reason})
    return value


def _check_list(values: list[str]) -> list[str]:
    # one pass over the joined ids in C; item by item only to name the bad one
    joined = "".join(values)
    if "\x00" not in joined:
        try:
            joined.encode("utf-8")
            return values
        except UnicodeEncodeError:
            pass
    for index, value in enumerate(values):
        reason = unsafe_reason(value)
        if reason is not None:
            raise PydanticCustomError(
                UNSAFE_ERROR_TYPE, "Item {index} {reason}", {"index": index, "reason": reason}
            )
    return values  # pragma: no cover - the joined check and the item check agree


@dataclass(frozen=True)
class JsonSchemaPattern:
    """Adds `pattern` to a string's JSON schema without validating it again (the validator does)."""

    pattern: str

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The string's schema plus the pattern."""
        schema = handler(core_schema)
        schema["pattern"] = self.pattern
        return schema


_NUL_FREE = JsonSchemaPattern(NUL_FREE_PATTERN)

SafeStr = Annotated[str, AfterValidator(_check_str), _NUL_FREE]


def safe_str(*, min_length: int = 0, max_length: int | None = None) -> Any:
    """A safe string with length bounds checked before it (for Query/Path parameters)."""
    return Annotated[
        str,
        StringConstraints(min_length=min_length, max_length=max_length),
        AfterValidator(_check_str),
        _NUL_FREE,
    ]


def safe_str_list(*, min_length: int = 0, max_length: int | None = None) -> Any:
    """A list of safe strings, each `min_length`..`max_length` characters (the list is checked at once)."""
    item = Annotated[str, StringConstraints(min_length=min_length, max_length=max_length), _NUL_FREE]
    return Annotated[list[item], AfterValidator(_check_list)]


def unsafe_in_json(value: Any) -> str | None:
    """The first unsafe key or string anywhere in a parsed JSON value, described; None when clean."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            reason = unsafe_reason(item)
            if reason is not None:
                return f"{where or 'value'} {reason}"
        elif isinstance(item, Mapping):
            for key, sub in item.items():
                path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and (reason := unsafe_reason(key)) is not None:
                    return f"a key {reason}"
                stack.append((path, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
    return None
