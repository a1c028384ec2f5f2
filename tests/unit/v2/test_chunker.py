"""The structure-aware V2 chunker: sections, pages, tables, sizes, boilerplate, ids."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from app.clients.embeddings.local import local_model_counter
from app.evidence.index.boilerplate import block_fingerprint
from app.evidence.index.chunk_writer import ChunkerConfig
from app.evidence.index.chunker import chunk_document
from app.ingest.types import Block, LoadedDocument
from app.text.chunk_records import ChunkPlace, ChunkRecord
from app.text.entities import EntityExtractor, split_header_unit
from app.text.normalize import normalize
from app.text.tokens import SimpleTokenCounter

COUNTER = SimpleTokenCounter()


def doc(blocks: Sequence[Block]) -> LoadedDocument:
    return LoadedDocument(sections=[], blocks=list(blocks), kind="html", content_type="text/html")


def chunk(blocks: Sequence[Block], **config: int) -> list[ChunkRecord]:
    result = chunk_document(
        doc(blocks), title="T", document_key="doc-1", counter=COUNTER, config=ChunkerConfig(**config)
    )
    return result.chunks


def sentence(i: int) -> str:
    return f"a{i} b{i} c{i} d{i}."  # 5 tokens: four words and the point


def test_packing_and_overlap_arithmetic() -> None:
    # breadcrumb "T › H" + newline = 3 tokens (T, ›, H); budget = 20 - 3 = 17 tokens = 3 sentences.
    # chunk 1: s0 s1 s2 (15; s3 would make 20). Overlap 5 tokens = the last sentence, s2.
    # chunk 2: s2 s3 s4 (15). chunk 3: s4 s5 (10).
    text = " ".join(sentence(i) for i in range(6))
    chunks = chunk(
        [Block("heading", "H", 0, level=1), Block("paragraph", text, 0)], chunk_tokens=20, overlap_tokens=5
    )
    assert [c.content for c in chunks] == [
        " ".join(sentence(i) for i in (0, 1, 2)),
        " ".join(sentence(i) for i in (2, 3, 4)),
        " ".join(sentence(i) for i in (4, 5)),
    ]
    assert all(c.embed_text.startswith("T › H\n") for c in chunks)
    assert all(c.tokens <= 20 for c in chunks)
    assert [c.ordinal for c in chunks] == [0, 1, 2]


def test_sections_and_pages_are_never_crossed() -> None:
    blocks = [
        Block("heading", "Intro", 0, level=1),
        Block("paragraph", sentence(0), 0),
        Block("paragraph", sentence(1), 1, page_label="ii"),  # next page, same section
        Block("heading", "Setup", 1, level=2, page_label="ii"),
        Block("paragraph", sentence(2), 1, page_label="ii"),
        Block("heading", "Usage", 2, level=1, page_label="1"),
        Block("list_item", "first item", 2, page_label="1"),
    ]
    chunks = chunk(blocks, chunk_tokens=200, overlap_tokens=50)
    got = [(c.place.section, c.place.page, c.place.page_label, c.content) for c in chunks]
    assert got == [
        (("Intro",), 1, None, sentence(0)),  # pages are 1-based in V2
        (("Intro",), 2, "ii", sentence(1)),  # no overlap across the page break
        (("Intro", "Setup"), 2, "ii", sentence(2)),  # nor across the heading
        (("Usage",), 3, "1", "- first item"),
    ]
    assert chunks[1].embed_text == f"T › Intro\n{sentence(1)}"
    assert chunks[2].embed_text == f"T › Intro › Setup\n{sentence(2)}"


def test_chunks_start_on_list_items_not_inside_them() -> None:
    # each item is two sentences: "- item i." (4 tokens) and "more i." (3 tokens) = 7 tokens.
    # Budget 20 - 3 = 17: two items per chunk. The overlap budget (4 tokens) would fit the last
    # sentence "more i." alone, which would start the next chunk inside an item: it is not taken.
    items = [Block("list_item", f"item {i}. more {i}.", 0) for i in range(6)]
    chunks = chunk([Block("heading", "H", 0, level=1), *items], chunk_tokens=20, overlap_tokens=4)
    assert [c.content for c in chunks] == [
        f"- item {i}. more {i}.\n- item {i + 1}. more {i + 1}." for i in (0, 2, 4)
    ]
    # with room for a whole item (7 tokens), the overlap repeats it whole
    chunks = chunk([Block("heading", "H", 0, level=1), *items], chunk_tokens=20, overlap_tokens=7)
    assert chunks[1].content.startswith("- item 1. more 1.\n- item 2.")
    assert all(c.content.startswith("- item") and c.tokens <= 20 for c in chunks)


def test_an_entry_that_would_be_cut_moves_to_the_next_chunk_whole() -> None:
    # a paragraph of 10 tokens, then an item of three sentences of 3 tokens ("- x." 3, "y z." 3,
    # "w v." 3 = 9). Budget 20 - 3 = 17: after the paragraph and two sentences of the item (16),
    # the third does not fit; the item's start fits the next chunk, so the whole item moves.
    blocks = [
        Block("heading", "H", 0, level=1),
        Block("paragraph", "one two three four five six seven eight nine.", 0),
        Block("list_item", "x. y z. w v.", 0),
    ]
    chunks = chunk(blocks, chunk_tokens=20, overlap_tokens=0)
    assert [c.content for c in chunks] == ["one two three four five six seven eight nine.", "- x. y z. w v."]


def test_a_long_definition_repeats_its_term_when_split() -> None:
    text = " ".join(sentence(i) for i in range(10))  # 50 tokens, budget 17
    chunks = chunk([Block("definition", text, 0, term="max_size")], chunk_tokens=20, overlap_tokens=0)
    assert len(chunks) > 1
    assert all(c.content.startswith("max_size: ") for c in chunks)
    assert all(c.tokens <= 20 for c in chunks)
    assert all(any(e.normalized == "max size" for e in c.entities) for c in chunks)


def test_no_text_is_lost_and_nothing_exceeds_the_window() -> None:
    # a sentence longer than a whole chunk is cut on token boundaries, never dropped
    giant = " ".join(f"g{i}" for i in range(100))
    blocks = [
        Block("heading", "H", 0, level=1),
        Block("paragraph", giant, 0),
        Block("code", "line one\nline two\n" + "\n".join(f"x{i} = {i}" for i in range(30)), 0),
        Block("list_item", giant, 0),
    ]
    chunks = chunk(blocks, chunk_tokens=30, window_tokens=30, overlap_tokens=4)
    assert all(c.tokens <= 30 for c in chunks)
    text = " ".join(c.content for c in chunks)
    for token in [f"g{i}" for i in range(100)] + [f"x{i}" for i in range(30)]:
        assert re.search(rf"\b{token}\b", text), token


def test_table_rows_carry_caption_headers_units_and_footnotes() -> None:
    table = Block(
        "table",
        "rendered",
        3,
        rows=[["K 25", "12", "3,5"], ["K 28", "14", ""]],
        headers=["Type", "Length (mm)", "Weight [kg]"],
        footnotes=("Measured at 20 °C.",),
        page_label="4",
    )
    blocks = [
        Block("heading", "Dimensions", 3, level=1),
        Block("paragraph", "Table 3: Sizes of the types", 3),  # the caption written before the table
        table,
    ]
    chunks = chunk(blocks, chunk_tokens=200, small_table_rows=0)
    assert [c.place.kind for c in chunks] == ["table_row", "table_row"]  # the caption is not a prose chunk
    first, second = chunks
    assert first.content == (
        "Table 3: Sizes of the types\nType: K 25\nLength (mm): 12\nWeight [kg]: 3,5\n"
        "Notes: Measured at 20 °C."
    )
    assert (
        second.content
        == "Table 3: Sizes of the types\nType: K 28\nLength (mm): 14\nNotes: Measured at 20 °C."
    )
    assert first.embed_text.startswith("T › Dimensions\nTable 3")
    assert first.place == ChunkPlace(
        kind="table_row",
        page=4,
        page_label="4",
        section=("Dimensions",),
        table_caption="Table 3: Sizes of the types",
        table_index=0,
        row_index=0,
        row_label="K 25",
        headers=("Type", "Length (mm)", "Weight [kg]"),
        units=(None, "mm", "kg"),
        row_values=("K 25", "12", "3,5"),
        footnotes=("Measured at 20 °C.",),
    )
    assert (second.place.row_label, second.place.row_index) == ("K 28", 1)
    assert second.place.row_values == ("K 28", "14", "")
    # header units turn bare cells into quantities, searchable as "12 mm"
    quantities = {e.normalized for e in first.entities if e.kind == "quantity"}
    assert quantities == {"12 mm", "3.5 kg", "20 °C"}
    assert " 12 mm" in first.search_text
    assert "k 25" in first.search_text


def test_small_tables_are_also_kept_whole() -> None:
    table = Block("table", "r", 0, rows=[["a", "1"], ["b", "2"]], headers=["Name", "Value"], title="Tiny")
    chunks = chunk([table], chunk_tokens=200, small_table_rows=2)
    assert [(c.place.kind, c.whole_table) for c in chunks] == [
        ("prose", True),
        ("table_row", False),
        ("table_row", False),
    ]
    assert chunks[0].content == "Tiny\nName | Value\na | 1\nb | 2"
    assert chunks[0].place.table_caption == "Tiny" and chunks[0].place.headers == ("Name", "Value")
    assert len(chunk([table], chunk_tokens=200, small_table_rows=1)) == 2  # over the limit: rows only


def test_a_long_row_continues_with_its_label_and_caption() -> None:
    cells = [f"v{i} " * 6 for i in range(6)]
    table = Block(
        "table", "r", 0, rows=[["R1", *cells]], headers=["Key", *[f"h{i}" for i in range(6)]], title="Cap"
    )
    chunks = chunk([table], chunk_tokens=30, window_tokens=30, small_table_rows=0)
    assert len(chunks) > 1
    assert all((c.place.kind, c.place.row_label, c.place.row_index) == ("table_row", "R1", 0) for c in chunks)
    assert all(c.content.startswith("Cap\nKey: R1") for c in chunks)
    assert all(c.tokens <= 30 for c in chunks)
    text = "\n".join(c.content for c in chunks)
    assert all(f"h{i}: " in text for i in range(6))


def test_long_footnotes_become_one_chunk_instead_of_joining_every_row() -> None:
    notes = (" ".join(f"n{i}" for i in range(40)),)
    table = Block("table", "r", 0, rows=[["a", "1"], ["b", "2"]], headers=["K", "V"], footnotes=notes)
    chunks = chunk([table], chunk_tokens=100, small_table_rows=0, footnote_tokens=10)
    assert [c.place.kind for c in chunks] == ["table_row", "table_row", "prose"]
    assert "Notes" not in chunks[0].content and chunks[0].place.footnotes == notes
    assert chunks[2].content.startswith("Notes: n0")


def test_a_table_given_as_text_only_is_still_indexed() -> None:
    chunks = chunk([Block("table", "a | 1\nb | 2", 0, title="Cap")])
    assert [(c.place.kind, c.content, c.place.table_caption) for c in chunks] == [
        ("prose", "Cap\na | 1\nb | 2", "Cap")
    ]


def test_boilerplate_never_reaches_a_chunk() -> None:
    blocks = [
        Block("list_item", "Home", 0, boilerplate="nav"),
        Block("paragraph", "Contents: Intro, Setup", 0, boilerplate="toc"),
        Block("heading", "Intro", 0, level=1),
        Block("paragraph", "Real content here.", 0),
        Block("paragraph", "Previous | Up | Next", 0, boilerplate="prev_next"),
        Block("paragraph", "© Example site menu", 0),  # repeated across the namespace
    ]
    repeated = frozenset({block_fingerprint(blocks[-1])})
    result = chunk_document(doc(blocks), title="T", document_key="k", counter=COUNTER, repeated=repeated)
    text = " ".join(c.embed_text + c.search_text for c in result.chunks)
    for word in ("Home", "Contents", "Previous", "menu"):
        assert word.lower() not in text.lower()
    assert [c.content for c in result.chunks] == ["Real content here."]
    assert result.stats.boilerplate_blocks == 4
    assert result.stats.boilerplate_by_kind == {"nav": 1, "toc": 1, "prev_next": 1, "repeated": 1}


def test_a_heading_with_nothing_under_it_is_still_indexed() -> None:
    chunks = chunk([Block("heading", "Lonely heading", 0, level=1)])
    assert [(c.content, c.place.section) for c in chunks] == [("Lonely heading", ("Lonely heading",))]


def test_an_overlong_heading_is_read_as_a_paragraph() -> None:
    long = "word " * 60
    chunks = chunk([Block("heading", long, 0, level=1)], max_heading_chars=100)
    assert chunks[0].place.section == () and chunks[0].content == long.strip()


def test_ids_are_deterministic_and_follow_content_and_position() -> None:
    blocks = [
        Block("heading", "H", 0, level=1),
        Block("paragraph", "alpha beta.", 0),
        Block("paragraph", "x.", 1),
    ]
    first = [c.id for c in chunk(blocks)]
    assert first == [c.id for c in chunk(blocks)]
    assert len(set(first)) == len(first)
    changed = [c.id for c in chunk([*blocks[:1], Block("paragraph", "alpha gamma.", 0), blocks[2]])]
    assert changed[0] != first[0] and changed[1] == first[1]
    other_doc = chunk_document(doc(blocks), title="T", document_key="doc-2", counter=COUNTER).chunks
    assert other_doc[0].id != first[0]


def test_search_text_is_the_normalised_embedded_text() -> None:
    chunks = chunk([Block("heading", "Größe", 0, level=1), Block("paragraph", "B-DETECTION_PLUS / K 28", 0)])
    assert chunks[0].search_text == normalize(chunks[0].embed_text) == "t groeße b detection plus k 28"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Length (mm)", ("Length", "mm")),
        ("Torque [Nm]", ("Torque", "Nm")),
        ("Weight in kg", ("Weight", "kg")),
        ("Name (optional)", ("Name (optional)", None)),  # not a unit
        ("Voltage", ("Voltage", None)),
    ],
)
def test_split_header_unit(header: str, expected: tuple[str, str | None]) -> None:
    assert split_header_unit(header, EntityExtractor()) == expected


def test_with_the_model_tokenizer_no_chunk_exceeds_the_window() -> None:
    counter, window = local_model_counter()
    prose = " ".join(
        f"The parameter setting_{i} controls subsystem {i} of the B-DETECTION_PLUS unit." for i in range(80)
    )
    rows = [[f"K {i}", f"{i * 1.5}", "x" * 300] for i in range(5)]
    blocks = [
        Block("heading", "Reference " * 30, 0, level=1),  # a long heading: shortened in the breadcrumb only
        Block("paragraph", prose, 0),
        Block("table", "t", 0, rows=rows, headers=["Type", "Length (mm)", "Blob"], title="Sizes"),
    ]
    result = chunk_document(
        doc(blocks),
        title="A manual",
        document_key="k",
        counter=counter,
        config=ChunkerConfig(window_tokens=window),
    )
    assert all(counter.count(c.embed_text) + counter.special_tokens <= window for c in result.chunks)
    assert result.stats.over_window == 0
    text = " ".join(c.content for c in result.chunks)
    assert all(f"setting_{i} " in text for i in range(80))
    assert result.stats.table_rows >= 5
