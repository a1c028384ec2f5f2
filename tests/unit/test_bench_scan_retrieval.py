"""The scan-retrieval benchmark's pure parts: its keyword questions and how it reads pages from answers."""

from __future__ import annotations

from collections import Counter

from benchmarks.scan_retrieval import _v1_pages, _v2_pages, keyword_query


def test_keyword_questions_take_words_no_other_page_holds_in_reading_order() -> None:
    text = "Mounting filesystems: mounting happens through fstab entries; removable devices automount."
    others = Counter({"filesystems": 1, "devices": 2})
    # six letters or more, once each, not on another chosen page, spread over the page
    assert keyword_query(text, others) == "mounting happens entries removable"
    assert keyword_query(text, others, words=2) == "mounting entries"
    assert keyword_query("short words only", Counter()) == ""


def test_pages_are_read_zero_based_from_both_routes() -> None:
    v1 = [[{"page_content": "x", "metadata": {"file_id": "f", "page": 3}}, 0.1]]
    v2 = {"results": [{"file_id": "f", "page": 4, "metadata": {"physical_page": 4}}, {"file_id": "g"}]}
    assert _v1_pages(v1) == [("f", 3)]
    assert _v2_pages(v2) == [("f", 3), ("g", None)]
