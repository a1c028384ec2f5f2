"""Evidence search's SQL with every value bound by name, from typed records.

    EXACT_CALL = named_call("ragoverlay_v2_exact", ExactCall)
    EXACT_CALL.sql    # "ragoverlay_v2_exact(p_scope => <scope>, p_run => $7, p_limit => $8, ...)"
    await conn.fetch(f"SELECT ... FROM {EXACT_CALL.sql}", *EXACT_CALL.bind(record, scope))

    RUN = named_insert("ragoverlay_v2_runs", RunValues)
    RUN.sql           # "INSERT INTO ragoverlay_v2_runs (collection_id, namespace, ...) VALUES ($1, $2, ...)"
    await conn.fetchrow(f"{RUN.sql} RETURNING run_id", *RUN.bind(values))

A call names each argument `p_<field>` after its record's fields, in their order; a field typed as a
record (or a record or None) stands for that record's fields, so a call's record is built of the
parts it shares with other calls (the one retrieve statement takes every channel's part). A scoped
call takes the caller's scope first, as every scoped statement does (`SCOPE_SQL`, $1..$6). An insert
names each column after a field. The text is built once, from the record's type, never from request
data; `tests/unit/v2/test_named_calls.py` checks every call against the SQL function it names.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.store.scope import SCOPE_PARAMS, SCOPE_SQL, Scope

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
Path = tuple[str, ...]  # attribute names from the record to one value


def _record_of(hint: Any) -> type | None:
    """The record type a field's type stands for (`X` or `X | None` with X a dataclass), else None."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        records = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(records) == 1 and dataclasses.is_dataclass(records[0]) and isinstance(records[0], type):
            return records[0]
    return None


def _paths(record: type, prefix: Path = ()) -> Iterator[Path]:
    """The path of every value of `record`, nested records' fields in their place."""
    hints = typing.get_type_hints(record)
    for item in dataclasses.fields(record):
        inner = _record_of(hints[item.name])
        if inner is None:
            yield (*prefix, item.name)
        else:
            yield from _paths(inner, (*prefix, item.name))


def _value(record: object, path: Path) -> object:
    """The value at `path`; None below a nested record that is None."""
    value: Any = record
    for name in path:
        if value is None:
            return None
        value = getattr(value, name)
    return value


@dataclass(frozen=True)
class NamedValues:
    """The values of a record type, each named after its field (the last name of its path)."""

    record: type
    paths: tuple[Path, ...]

    @classmethod
    def of(cls, record: type) -> NamedValues:
        """The value paths of `record`; ValueError for a name that is no plain SQL identifier or repeats."""
        paths = tuple(_paths(record))
        names = [path[-1] for path in paths]
        for name in names:
            if not _IDENTIFIER.match(name):
                raise ValueError(f"not a SQL identifier: {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"{record.__name__} names a value twice: {names}")
        return cls(record, paths)

    @property
    def names(self) -> tuple[str, ...]:
        """Each value's name, in binding order."""
        return tuple(path[-1] for path in self.paths)

    def values(self, record: object) -> list[object]:
        """The record's values in binding order; TypeError for a record of another type."""
        if not isinstance(record, self.record):
            raise TypeError(f"expected a {self.record.__name__}, got {type(record).__name__}")
        return [_value(record, path) for path in self.paths]


@dataclass(frozen=True)
class NamedCall:
    """A call of one SQL function whose arguments are a record's fields, each named `p_<field>`."""

    function: str
    arguments: NamedValues
    scoped: bool = True

    @property
    def sql(self) -> str:
        """`function(p_scope => <scope>, p_a => $7, ...)` (without the scope: from $1)."""
        first = SCOPE_PARAMS + 1 if self.scoped else 1
        named = [f"p_{name} => ${first + i}" for i, name in enumerate(self.arguments.names)]
        return f"{self.function}({', '.join(([f'p_scope => {SCOPE_SQL}'] if self.scoped else []) + named)})"

    def bind(self, record: object, scope: Scope | None = None) -> list[object]:
        """The statement's values: the scope's six (a scoped call), then the record's fields."""
        if self.scoped != (scope is not None):
            raise ValueError(f"{self.function} is {'' if self.scoped else 'not '}called with a scope")
        prefix = list(scope.sql_args()) if scope is not None else []
        return prefix + self.arguments.values(record)


def named_call(function: str, record: type, *, scoped: bool = True) -> NamedCall:
    """The call of `function` with `record`'s fields as its named arguments (see the module)."""
    if not _IDENTIFIER.match(function):
        raise ValueError(f"not a SQL identifier: {function!r}")
    return NamedCall(function, NamedValues.of(record), scoped)


@dataclass(frozen=True)
class NamedInsert:
    """An insert of one row whose columns are a record's fields, in their order."""

    table: str
    columns: NamedValues

    @property
    def sql(self) -> str:
        """`INSERT INTO table (a, b, ...) VALUES ($1, $2, ...)`."""
        names = self.columns.names
        placeholders = ", ".join(f"${i}" for i in range(1, len(names) + 1))
        return f"INSERT INTO {self.table} ({', '.join(names)}) VALUES ({placeholders})"

    def bind(self, record: object) -> list[object]:
        """The statement's values: the record's fields in order."""
        return self.columns.values(record)


def named_insert(table: str, record: type) -> NamedInsert:
    """The insert into `table` of one row of `record`'s fields (see the module)."""
    if not _IDENTIFIER.match(table):
        raise ValueError(f"not a SQL identifier: {table!r}")
    return NamedInsert(table, NamedValues.of(record))
