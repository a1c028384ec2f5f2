"""The fallback of /query_v2's one statement, without a database: how a question is split by channel
and how the per-channel answers are put back together (app/evidence/store/retrieve.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.evidence.store.channels import ChannelHit, ChannelQuery, ChannelResult, Retrieval, Visible
from app.evidence.store.retrieve import _merged, _retrieval, alone, retrieve_args

QUERY = np.ones(4, dtype=np.float32)


def ask(**fields: Any) -> ChannelQuery:
    return ChannelQuery(limit=5, k1=1.2, b=0.75, **fields)


def test_each_asked_channel_is_asked_alone() -> None:
    split = alone(ask(keys=["k 28"], phrases=["k 28"], terms=["pump"], trigram_text="k 28", query=QUERY))
    assert list(split) == ["exact", "lexical", "vector"]
    exact = retrieve_args(1, split["exact"])
    assert exact.exact.keys == ["k 28"] and not exact.lexical.asked and exact.nearest.query is None
    lexical = retrieve_args(1, split["lexical"])
    assert not lexical.exact.asked and lexical.lexical.terms == ["pump"] and lexical.lexical.trigram == "k 28"
    assert lexical.nearest.query is None
    vector = retrieve_args(1, split["vector"])
    assert not vector.exact.asked and not vector.lexical.asked and vector.nearest.query is not None
    # a channel with nothing to look up is not asked; empty strings are nothing
    assert list(alone(ask(terms=["", "pump"], phrases=[""]))) == ["lexical"]
    assert alone(ask()) == {}


def part(name: str, hits: list[ChannelHit], frequencies: dict[str, int] | None = None) -> Retrieval:
    """A statement's answer for channel `name` alone (the others empty)."""
    channels = {n: ChannelResult() for n in ("exact", "lexical", "vector")}
    channels[name] = ChannelResult(hits, 1.0)
    return Retrieval(channels, Visible(2, 10, 7.5), frequencies or {}, {}, {"visible": 1.0, "details": 0.5})


def test_the_parts_make_one_retrieval() -> None:
    exact = part("exact", [ChannelHit(1, 0, 1.0, "row_label")])
    lexical = part("lexical", [ChannelHit(1, 2, 3.5, "bm25")], {"pump": 4})
    channels = {
        "exact": exact.channels["exact"],
        "lexical": lexical.channels["lexical"],
        "vector": ChannelResult(),
    }
    merged = _merged(channels, {"exact": exact, "lexical": lexical})
    assert merged.separately and merged.failed == []
    assert merged.channels["lexical"].hits == [ChannelHit(1, 2, 3.5, "bm25")]
    assert merged.visible == Visible(2, 10, 7.5) and merged.document_frequency == {"pump": 4}
    # each part's time counts: two statements each computed what is visible
    assert merged.stages_ms == {"visible": 2.0, "details": 1.0}


def test_a_failed_part_fails_its_channel_and_the_lexical_one_the_statistics() -> None:
    exact = part("exact", [ChannelHit(1, 0, 1.0, "row_label")])
    channels = {
        "exact": exact.channels["exact"],
        "lexical": ChannelResult(ms=300.0, error="QueryCanceledError"),
        "vector": ChannelResult(),
    }
    merged = _merged(channels, {"exact": exact})
    assert merged.failed == ["lexical"] and merged.document_frequency is None
    # the lexical channel not asked: no statistics to know, as in the one statement
    channels["lexical"] = ChannelResult()
    assert _merged(channels, {"exact": exact}).document_frequency == {}
    # no part answered: nothing is known to be visible
    everything_failed = {n: ChannelResult(error="TimeoutError") for n in ("exact", "lexical", "vector")}
    assert _merged(everything_failed, {}).visible == Visible(0, 0, 0.0)


def hit_row(ordinal: int, document_id: int, metadata: str | None) -> dict[str, Any]:
    """A "hit" row of the one statement, as asyncpg gives it (read by key)."""
    place = {"kind": "prose", "page": 1, "page_label": None, "section": ["Ratings"], "table_caption": None,
             "table_index": None, "row_index": None, "row_label": None, "headers": [], "row_values": [],
             "units": [], "footnotes": []}  # fmt: skip
    return {
        "part": "hit", "channel": "lexical", "document_id": document_id, "ordinal": ordinal, "score": 1.0,
        "detail": "bm25", "chunk_id": f"00000000-0000-0000-0000-00000000000{ordinal}", "file_id": "f1",
        "content": "text", "search_text": "text", "entity_keys": [], "filename": "f1.md", "title": "T",
        "language": "en", "publication_date": None, "document_number": None, "source": "original",
        "metadata": metadata, **place,
    }  # fmt: skip


def test_a_documents_metadata_is_decoded_once_for_all_its_chunks() -> None:
    # the statement sends a document's metadata on its first chunk's row only (NULL on the others)
    meta = '{"kind": "pdf", "page_count": 3}'
    rows = [hit_row(1, 7, meta), hit_row(2, 7, None), hit_row(3, 8, '{"kind": "html"}'), hit_row(4, 9, None),
            hit_row(5, 7, meta)]  # fmt: skip
    details = _retrieval(rows).details  # type: ignore[arg-type]
    first, second, other, bare, third = (details[key] for key in [(7, 1), (7, 2), (8, 3), (9, 4), (7, 5)])
    assert first.metadata == {"kind": "pdf", "page_count": 3}
    assert first.metadata is second.metadata is third.metadata
    assert other.metadata == {"kind": "html"} and bare.metadata == {}
