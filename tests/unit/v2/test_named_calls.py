"""Evidence search's SQL binds values by name: the named-call helper (app/evidence/store/calls.py),
and every statement of app/evidence/store/ checked against the SQL functions it calls, read from
the SQL code files (no database)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import uuid
from dataclasses import dataclass

import pytest

import app.evidence.store as evidence_store
from app.evidence.store import documents, runs
from app.evidence.store.calls import named_call, named_insert
from app.store.migrate import load_code
from app.store.scope import Scope

# the bar: no statement binds more than this many values by position alone
MAX_POSITIONAL = 8


@dataclass(frozen=True)
class Inner:
    a: int
    b: str | None


@dataclass(frozen=True)
class Outer:
    run: int
    inner: Inner | None
    last: list[str]


@dataclass(frozen=True)
class Twice:
    a: int
    inner: Inner


def test_a_call_names_each_field_nested_records_in_their_place() -> None:
    flat = named_call("ragoverlay_v2_demo", Inner, scoped=False)
    assert flat.sql == "ragoverlay_v2_demo(p_a => $1, p_b => $2)"
    assert flat.bind(Inner(3, None)) == [3, None]
    call = named_call("ragoverlay_v2_demo", Outer)
    assert call.sql.startswith("ragoverlay_v2_demo(p_scope => ragoverlay_caller_scope(p_collection => $1,")
    assert call.sql.endswith("p_any_owner => $6), p_run => $7, p_a => $8, p_b => $9, p_last => $10)")
    scope = Scope.of(uuid.uuid4(), ["owner"], file_ids=["f1"])
    assert call.bind(Outer(5, Inner(1, "b"), []), scope) == [*scope.sql_args(), 5, 1, "b", []]
    # a nested record that is None binds None for each of its fields
    assert call.bind(Outer(5, None, ["x"]), scope)[6:] == [5, None, None, ["x"]]


def test_a_call_refuses_a_repeated_name_another_record_and_a_missing_scope() -> None:
    with pytest.raises(ValueError, match="twice"):
        named_call("ragoverlay_v2_demo", Twice)
    with pytest.raises(ValueError, match="identifier"):
        named_call("drop table x; --", Inner)
    call = named_call("ragoverlay_v2_demo", Outer)
    scope = Scope.of(uuid.uuid4(), ["owner"], file_ids=["f1"])
    with pytest.raises(TypeError):
        call.bind(Inner(1, "b"), scope)
    with pytest.raises(ValueError, match="with a scope"):
        call.bind(Outer(5, None, []))


def test_an_insert_names_each_column_after_a_field() -> None:
    insert = named_insert("ragoverlay_v2_demo", Inner)
    assert insert.sql == "INSERT INTO ragoverlay_v2_demo (a, b) VALUES ($1, $2)"
    assert insert.bind(Inner(1, None)) == [1, None]


# --- every statement against the SQL functions it calls ----------------------------------------

_SIGNATURE = re.compile(r"CREATE FUNCTION (\w+)\((.*?)\)\s*\n(?:RETURNS|LANGUAGE)", re.DOTALL)


def _split(arguments: str) -> list[str]:
    """A call's or a signature's arguments, split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in arguments:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


def _functions() -> dict[str, tuple[set[str], set[str]]]:
    """Each SQL function of the code files: (its input parameters, those without a default)."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for code in load_code():
        for name, params in _SIGNATURE.findall(re.sub(r"--[^\n]*", "", code.sql)):
            inputs = [p.split() for p in _split(params) if p and not p.startswith(("OUT ", "INOUT "))]
            found[name] = ({p[0] for p in inputs}, {p[0] for p in inputs if "DEFAULT" not in p})
    return found


def _calls(sql: str) -> list[tuple[str, list[str]]]:
    """Each call of one of our SQL functions in `sql`: its name and its arguments as written."""
    calls = []
    for match in re.finditer(r"\b(ragoverlay_\w+)\(", sql):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        calls.append((match.group(1), _split(sql[match.end() : end - 1])))
    return calls


def _statements() -> dict[str, str]:
    """Every statement constant of app/evidence/store/'s modules, by module.NAME."""
    found = {}
    for module in pkgutil.iter_modules(evidence_store.__path__):
        loaded = importlib.import_module(f"{evidence_store.__name__}.{module.name}")
        for name, value in vars(loaded).items():
            if name.isupper() and isinstance(value, str) and "$" in value and name != "SCOPE_SQL":
                found[f"{module.name}.{name}"] = value
    return found


def test_every_call_of_evidence_sql_names_its_arguments_as_the_function_does() -> None:
    functions = _functions()
    statements = _statements()
    assert {"retrieve.RETRIEVE", "channels.EXACT", "channels.NEAREST", "channels.LEXICAL"} <= set(statements)
    for where, sql in statements.items():
        for function, arguments in _calls(sql):
            assert function in functions, (where, function)
            names = [a.split("=>")[0].strip() for a in arguments]
            assert all("=>" in a for a in arguments), (where, function, arguments)
            params, required = functions[function]
            assert set(names) <= params and required <= set(names), (where, function, names)


def test_no_statement_binds_more_than_eight_values_by_position() -> None:
    # the two inserts list their columns from a record's fields, each value's place generated beside
    # its column's name (app/evidence/store/calls.py)
    by_column = {
        "documents.INSERT_DOCUMENT": documents.DOCUMENT_INSERT.sql,
        "runs.INSERT_RUN": runs.RUN_INSERT.sql,
    }
    for where, sql in _statements().items():
        if where in by_column:
            assert sql.startswith(by_column[where]), where
            continue
        positional = set(re.findall(r"\$(\d+)", sql)) - set(re.findall(r"=>\s*\$(\d+)", sql))
        assert len(positional) <= MAX_POSITIONAL, (where, sorted(positional, key=int))


def test_the_channels_sql_calls_its_own_functions_by_name() -> None:
    """Inside 60_v2_channels.sql too: every call of a ragoverlay_v2_ function names its arguments
    (the row predicate ragoverlay_in_scope keeps V1's positional form, everywhere the same)."""
    (code,) = [c for c in load_code() if c.name == "60_v2_channels.sql"]
    functions = _functions()
    body = re.sub(r"--[^\n]*", "", code.sql)
    body = re.sub(r"(CREATE|DROP) FUNCTION (IF EXISTS )?\w+", "", body)
    calls = [(f, a) for f, a in _calls(body) if f.startswith("ragoverlay_v2_")]
    assert len(calls) > 20
    for function, arguments in calls:
        assert all("=>" in a for a in arguments), (function, arguments)
        names = {a.split("=>")[0].strip() for a in arguments}
        params, required = functions[function]
        assert names <= params and required <= names, (function, names)
