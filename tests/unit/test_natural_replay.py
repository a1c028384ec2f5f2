"""The natural-question replay harness's pure parts (its capture needs the benchmark's database)."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks.quality.natural import replay
from benchmarks.quality.natural.diagnose import file_rank


def test_settings_overrides_are_nested_by_dots_and_validated_as_the_service_does() -> None:
    tuning = replay.settings_with(
        ["fusion.rrf_k=30", "fusion.prose_weights.vector=3", 'fusion.dense_languages=["*"]']
    )
    assert tuning.fusion.rrf_k == 30 and tuning.fusion.prose_weights.vector == 3
    assert tuning.fusion.dense_languages == ("*",)
    with pytest.raises(ValidationError):
        replay.settings_with(["fusion.rrf_kk=30"])


def test_the_gold_file_rank_counts_files_not_passages() -> None:
    assert file_rank(["a", "a", "b", "c"], ["c"]) == 3
    assert file_rank(["a", "b"], ["z"]) is None


def test_a_capture_written_by_python_m_loads_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = replay.Case("q-1", "c", "paraphrase", "dev", "why?", "kb", ("f",), "x", ["f"], None, {}, None)
    # `python -m ...replay capture` pickles the class as __main__.Case
    monkeypatch.setattr(replay.Case, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "Case", replay.Case, raising=False)
    data = pickle.dumps({"fingerprint": "fp", "cases": [case]})
    monkeypatch.undo()
    assert b"__main__" in data
    path = tmp_path / "capture.pkl"
    path.write_bytes(data)
    assert replay.load(path) == ("fp", [case])
