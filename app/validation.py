"""One status per kind of mistake: 422 for the wrong shape or type, 400 for a value out of its bounds.

FastAPI answers every failed check of a route's declared inputs with 422, whether the input had the
wrong type (`"k": "many"`, a body that is not an array) or was well typed but outside its bounds
(`k` of 0, 1,001 file ids, a 5,000-character path). The routes that check bounds in code answer
400 for the second kind, so the same limit answered differently from route to route. The rule here,
applied by the app's one validation handler: when every error of a request is a bound (a number
past its minimum or maximum, a string or list longer or shorter than allowed), the answer is 400
with a sentence naming each bound; any other error (missing, wrong type, malformed JSON, unsafe
characters, a pattern) keeps the 422 list of field errors. docs/routes.md has the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# pydantic v2 error types that mean "well typed, out of bounds"
_NUMBER_BOUNDS = {
    "greater_than": "greater than {gt}",
    "greater_than_equal": "at least {ge}",
    "less_than": "less than {lt}",
    "less_than_equal": "at most {le}",
}
_LENGTH_BOUNDS = {"too_short", "too_long", "string_too_short", "string_too_long"}
BOUND_ERROR_TYPES = frozenset(_NUMBER_BOUNDS) | _LENGTH_BOUNDS
# where FastAPI says the input came from; not part of the field's name
_SOURCES = {"body", "query", "path", "header", "cookie", "form"}


def _field(loc: Sequence[Any]) -> str:
    parts = list(loc)
    source = parts.pop(0) if parts and parts[0] in _SOURCES else None
    if not parts:
        return "the request body" if source == "body" else "the value"
    name = str(parts[0])
    for part in parts[1:]:
        name += f"[{part}]" if isinstance(part, int) else f".{part}"
    return name


def _sentence(error: dict[str, Any]) -> str:
    kind, ctx, field = error["type"], error.get("ctx") or {}, _field(error.get("loc", ()))
    if kind in _NUMBER_BOUNDS:
        return f"{field} must be {_NUMBER_BOUNDS[kind].format(**ctx)}"
    unit = "characters" if kind.startswith("string_") else "items"
    if kind.endswith("too_short"):
        least = int(ctx.get("min_length", 1))
        return f"{field} must not be empty" if least == 1 else f"{field} must have at least {least} {unit}"
    most = ctx.get("max_length")
    given = ctx.get("actual_length")
    tail = f" ({given} given)" if given is not None else ""
    return f"{field} must have at most {most} {unit}{tail}"


def bounds_detail(errors: Sequence[dict[str, Any]]) -> str | None:
    """The 400 detail when every error is an out-of-bounds value; None when the request is malformed (422)."""
    if not errors or any(e.get("type") not in BOUND_ERROR_TYPES for e in errors):
        return None
    return "; ".join(dict.fromkeys(_sentence(e) for e in errors))
