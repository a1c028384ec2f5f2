"""The composition root's shape: every service present, and nothing attached after construction."""

from __future__ import annotations

import ast
import types
import typing
from dataclasses import fields
from pathlib import Path

from app.services import Services

ROOT = Path(__file__).resolve().parents[2] / "app" / "services.py"


def test_services_has_no_optional_field() -> None:
    hints = typing.get_type_hints(Services)
    optional = [
        f.name
        for f in fields(Services)
        if isinstance(hints[f.name], types.UnionType) and type(None) in typing.get_args(hints[f.name])
    ]
    assert optional == []
    # evidence search is one field (`evidence`), not five
    assert len(hints) == len(fields(Services)) >= 14
    assert not [f.name for f in fields(Services) if f.name.startswith("v2")]


def attribute_assignments(source: str) -> list[str]:
    """Every `x.y = ...` (also `+=` and annotated) in `source`, as `line N: x.y`."""
    return [
        f"line {node.lineno}: {ast.unparse(target)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
    ]


def test_the_composition_root_sets_no_attribute_of_what_it_built() -> None:
    # a listener attached after construction (`ingest.listeners = ...`) is an attribute assignment
    assert attribute_assignments(ROOT.read_text(encoding="utf-8")) == []
    planted = "ingest = IngestService()\ningest.listeners = [evidence]\n"
    assert attribute_assignments(planted) == ["line 2: ingest.listeners"]
