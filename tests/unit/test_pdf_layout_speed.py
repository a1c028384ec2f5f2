"""pdfplumber's resolver with plain values answered first: the same values, the same PDF blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pdfplumber.page
import pytest

from app.ingest.loaders import pdf as pdf_loader
from app.ingest.loaders import pdf_layout_speed
from app.ingest.loaders.pdf import load_pdf
from tests.fixtures import v2_corpus


class _Ref:
    """Stands for a PDF object reference: not a plain value."""


def test_plain_values_are_answered_and_everything_else_is_handed_on() -> None:
    handed: list[Any] = []

    def resolve(value: Any) -> Any:
        handed.append(value)
        return ("resolved", value)

    resolved = pdf_layout_speed.plain_first(resolve)
    matrix = (1.0, 0.0, 0.0, 1.0, 72.5, 700)
    for value in [3, 2.5, "Helvetica", True, None, b"\x00", matrix, ()]:
        assert resolved(value) is value
    ref = _Ref()
    others: list[Any] = [ref, [1.0, 2.0], {"a": 1}, (1.0, ref), ((1.0, 2.0), (3.0, 4.0))]
    assert [resolved(v) for v in others] == [("resolved", v) for v in others]
    assert handed == others


def _uninstall() -> None:
    """pdfplumber's own resolver back."""
    original = getattr(pdfplumber.page.resolve_all, pdf_layout_speed.MARK, None)
    if original is not None:
        setattr(pdfplumber.page, "resolve_all", original)  # noqa: B010 - not exported


def _read(path: Path) -> list[tuple[Any, ...]]:
    doc = load_pdf(path, path.name)
    return [(b.kind, b.text, b.page, b.rows, b.headers, b.title) for b in doc.blocks]


def test_a_pdf_reads_the_same_with_either_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = v2_corpus.manual_pdf(tmp_path / "manual.pdf")  # a ruled table on its second page
    try:
        with monkeypatch.context() as patched:
            patched.setattr(pdf_loader, "install_plain_first", lambda: True)
            _uninstall()
            shipped = _read(path)
            assert not hasattr(pdfplumber.page.resolve_all, "_ragoverlay_plain_first")
        faster = _read(path)  # the loader installs it on its first layout
        resolver = pdfplumber.page.resolve_all
        assert hasattr(resolver, "_ragoverlay_plain_first")
        assert pdf_layout_speed.install() and pdfplumber.page.resolve_all is resolver  # installed once
    finally:
        pdf_layout_speed.install()
    assert faster == shipped
    tables = [block for block in faster if block[0] == "table"]
    assert [t[3] for t in tables] == [[["K 25", "2.5", "10"], ["K 28", "2.8", "12"]]]


def test_another_pdfplumber_without_the_resolver_runs_as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pdfplumber.page, "resolve_all")
    assert pdf_layout_speed.install() is False
