"""The context text of GET /documents/{id}/context, built from chunks (pure)."""

from app.search.context import ContextChunk, build_context, overlap_length


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
