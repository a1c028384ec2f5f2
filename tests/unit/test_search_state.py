"""The search planner's statistics keep every upload acknowledged while a catalogue read ran
(app/search/state.py). Pure: statistics are built by hand, as a catalogue read would give them."""

from __future__ import annotations

from app.search.planner import CatalogueStats
from app.search.state import SearchState
from app.store.chunks import FileRecord


def record(file_id: str, chunks: int = 3, owner: str = "agent_a") -> FileRecord:
    return FileRecord(file_id, owner, owner, f"{file_id}.txt", "text/plain", 10, None, None, chunks, "m", 384)


def read(*records: FileRecord) -> CatalogueStats:
    """What a catalogue read of these files gives."""
    stats = CatalogueStats(file_chunks={})
    for r in records:
        stats = stats.with_file(r)
    return stats


async def test_a_file_stored_while_a_read_ran_is_kept_when_the_read_is_applied() -> None:
    state = SearchState()
    before = record("before")
    await state.file_stored(before)
    began = state.read_begins()
    await state.file_stored(record("during"))  # committed after the read's snapshot was taken
    state.set_stats(read(before), began)
    assert state.stats.files == 2 and state.stats.chunks == 6
    assert state.stats.file_chunks is not None and set(state.stats.file_chunks) == {"before", "during"}
    # the next read holds it: counted once, and the log of stored files is emptied
    state.set_stats(read(before, record("during")), state.read_begins())
    assert state.stats.files == 2 and state.stats.chunks == 6
    state.set_stats(read(before), state.read_begins())  # deleted meanwhile: no longer put back
    assert state.stats.files == 1


async def test_a_read_that_began_before_the_applied_one_is_dropped() -> None:
    state = SearchState()
    older = state.read_begins()
    newer = state.read_begins()
    state.set_stats(read(record("a"), record("b")), newer)
    state.set_stats(read(record("a")), older)  # finished last, but read less
    assert state.stats.files == 2


async def test_statistics_given_without_a_mark_are_taken_as_they_are() -> None:
    state = SearchState()
    await state.file_stored(record("x"))
    state.set_stats(read())
    assert state.stats.files == 0 and state.catalogue_ready.is_set()
