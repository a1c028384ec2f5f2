"""The visible-row estimate behind the exact/index path choice (pure, no database)."""

from __future__ import annotations

from app.store.chunks import CatalogueStats


def stats() -> CatalogueStats:
    # two of my files, one Agent file, one file both of us hold under the same id
    files = {"a": {"me": 10}, "b": {"me": 30}, "kb": {"agent": 50}, "shared": {"me": 4, "agent": 6}}
    return CatalogueStats(files=5, chunks=100, uniform_dims=384, file_chunks=files)


def test_counts_only_what_the_owners_hold() -> None:
    s = stats()
    assert s.estimate(["a", "b"], ["me"]) == 40
    # a knowledge base listed without its entity_id: nothing of it is visible
    assert s.estimate(["kb"], ["me"]) == 0
    assert s.estimate(["kb", "shared"], ["me", "agent"]) == 60
    assert s.estimate(["shared"], ["agent"]) == 6


def test_unknown_files_count_the_average() -> None:
    s = stats()
    assert s.chunks_per_file == 20
    assert s.estimate(["a", "not-catalogued-yet"], ["me"]) == 30


def test_without_a_file_map_files_times_average() -> None:
    s = CatalogueStats(files=4, chunks=100)
    assert s.estimate(["a", "kb", "x"], ["me"]) == 75


def test_with_file_adds_and_replaces() -> None:
    s = stats().with_file("c", "me", 384, 7)
    assert (s.files, s.chunks, s.uniform_dims) == (6, 107, 384)
    assert s.estimate(["c"], ["me"]) == 7
    # a new version of the same file replaces its count, it is not a new file
    s = s.with_file("c", "me", 384, 12)
    assert (s.files, s.chunks) == (6, 112)
    assert s.estimate(["c"], ["me"]) == 12
    # another dimension: no longer uniform
    assert s.with_file("d", "me", 768, 1).uniform_dims is None


def test_first_file_sets_the_dimension() -> None:
    s = CatalogueStats().with_file("a", "me", 1536, 3)
    assert (s.files, s.chunks, s.uniform_dims) == (1, 3, 1536)
    assert s.file_chunks is None  # no map before the first refresh: averages until then
