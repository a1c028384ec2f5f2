"""The context text of GET /documents/{id}/context, built from chunks (pure)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from app.search.context import MIN_OVERLAP_CHARS, ContextChunk, build_context, overlap_length


def _every_length(previous: str, current: str, max_overlap: int) -> int:
    """The definition: the longest suffix of previous that starts current, tried length by length."""
    limit = min(len(previous), len(current), max_overlap)
    for size in range(limit, MIN_OVERLAP_CHARS - 1, -1):
        if previous.endswith(current[:size]):
            return size
    return 0


def test_overlap_length_finds_the_splitters_overlap() -> None:
    prev = "alpha beta gamma delta epsilon"
    cur = "delta epsilon zeta eta"
    # "delta epsilon" (13 chars) ends prev and starts cur
    assert overlap_length(prev, cur, 100) == len("delta epsilon")
    assert overlap_length(prev, cur, 5) == 0  # bounded by max_overlap
    assert overlap_length("abc", "xyz", 10) == 0


def test_short_coincidences_are_not_overlaps() -> None:
    # " a" (2 chars) matches but is below MIN_OVERLAP_CHARS
    assert overlap_length("this is a", " a new start", 50) == 0


def test_context_pages_and_overlaps() -> None:
    chunks = [
        ContextChunk("Page one first part. Shared tail text", 0),
        ContextChunk("Shared tail text and the rest of page one.", 0),
        ContextChunk("Page two only.", 1),
    ]
    out = build_context("report.pdf", chunks, max_overlap=100)
    lines = out.split("\n")
    assert lines[0] == "report.pdf"
    assert "# PAGE 1" in out and "# PAGE 2" in out
    assert out.count("Shared tail text") == 1
    assert out.index("# PAGE 1") < out.index("Page one first part") < out.index("# PAGE 2")


def test_context_without_pages_joins_chunks() -> None:
    out = build_context(
        "notes.txt", [ContextChunk("first", None), ContextChunk("second", None)], max_overlap=10
    )
    assert out == "notes.txt\nfirst\nsecond"


# short units repeated, so that long overlaps, repeated probes and near misses are common
_texts = st.lists(
    st.builds(
        lambda unit, times: unit * times, st.text(alphabet="ab", min_size=1, max_size=3), st.integers(0, 12)
    ),
    max_size=4,
).map("".join)


# no per-example time budget: the property is about results, and a busy machine is slow
@settings(deadline=None)
@given(_texts, _texts, _texts, st.integers(min_value=0, max_value=80))
def test_overlap_length_agrees_with_trying_every_length(head: str, shared: str, tail: str, cap: int) -> None:
    previous, current = head + shared, shared + tail
    assert overlap_length(previous, current, cap) == _every_length(previous, current, cap)
    assert overlap_length(current, previous, cap) == _every_length(current, previous, cap)
