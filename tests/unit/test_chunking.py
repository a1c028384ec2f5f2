"""Chunking: same chunks as rag_api's splitter, never across sections, overlap honoured."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from app.ingest.chunking import clean_text, md5_digest, split_sections
from app.ingest.types import Chunk, LoadedDocument, Section


def words(start: int, count: int) -> str:
    """`count` four-character words ("w000"...), one space apart: 5 * count - 1 characters."""
    return " ".join(f"w{i:03d}" for i in range(start, start + count))


def test_word_arithmetic() -> None:
    # 100 words of 4 chars + 99 spaces = 499 chars. chunk_size 50 fits 10 words (10*4 + 9 = 49;
    # 11 words would be 54). Overlap 10 keeps the last 2 words (4 + 1 + 4 = 9 <= 10; 3 words = 14).
    # So chunk k covers words 8k .. 8k+9 and the last one starts at word 96: 13 chunks.
    chunks = split_sections([Section(text=words(0, 100))], chunk_size=50, chunk_overlap=10)
    assert len(chunks) == 13
    assert chunks[0].text == words(0, 10)
    assert chunks[1].text == words(8, 10)
    assert chunks[-1].text == words(96, 4)
    assert all(len(c.text) <= 50 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        # The overlap: the last two words of a chunk open the next one.
        assert after.text.startswith(" ".join(before.text.split()[-2:]))


def test_same_chunks_as_split_documents() -> None:
    sections = [
        Section(text="Intro paragraph.\n\n" + words(0, 400), page=0, metadata={"total_pages": 3}),
        Section(text=words(400, 50) + "\n" + words(450, 300), page=1),
        Section(text="Short last page.", page=2),
    ]
    ours = split_sections(sections, chunk_size=300, chunk_overlap=40)
    splitter = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=40)
    documents = [Document(page_content=s.text, metadata={**s.metadata, "page": s.page}) for s in sections]
    theirs = splitter.split_documents(documents)
    assert [c.text for c in ours] == [d.page_content for d in theirs]
    assert [dict(c.metadata) for c in ours] == [d.metadata for d in theirs]


def test_never_across_sections() -> None:
    # Two tiny pages fit one 1,000-char chunk together, but each page stays its own chunk.
    chunks = split_sections(
        [Section(text="alpha page", page=0), Section(text="beta page", page=1)],
        chunk_size=1000,
        chunk_overlap=100,
    )
    assert [(c.text, c.page) for c in chunks] == [("alpha page", 0), ("beta page", 1)]


def test_index_and_metadata() -> None:
    sections = [
        Section(text=words(0, 30), metadata={"row": 0}),
        Section(text=words(30, 30), metadata={"row": 1}),
    ]
    # 30 words = 149 chars; chunk_size 100 fits 20 words (99 chars): 2 chunks per row.
    chunks = split_sections(sections, chunk_size=100, chunk_overlap=0)
    assert [c.index for c in chunks] == [0, 1, 2, 3]
    assert [c.metadata["row"] for c in chunks] == [0, 0, 1, 1]
    assert all(c.page is None and "page" not in c.metadata for c in chunks)
    # Each chunk owns its metadata: changing one changes no other.
    chunks[0].metadata["row"] = 99  # type: ignore[index]
    assert chunks[1].metadata["row"] == 0


def test_page_in_metadata() -> None:
    (chunk,) = split_sections([Section(text="text", page=4, metadata={"page_label": "5"})], 100, 10)
    assert chunk == Chunk(text="text", index=0, page=4, metadata={"page_label": "5", "page": 4})


def test_whitespace_only_sections_give_no_chunks() -> None:
    assert split_sections([Section(text=" \n\n \t "), Section(text="")], 100, 10) == []


def test_newline_separators_preferred() -> None:
    # Paragraphs of 60 chars; chunk_size 130 fits two paragraphs and the "\n\n" between them
    # (60 + 2 + 60 = 122), never a paragraph cut in half.
    paragraphs = [f"{i}" * 60 for i in range(4)]
    chunks = split_sections([Section(text="\n\n".join(paragraphs))], chunk_size=130, chunk_overlap=0)
    assert [c.text for c in chunks] == ["\n\n".join(paragraphs[:2]), "\n\n".join(paragraphs[2:])]


def test_clean_text() -> None:
    assert clean_text("a\x00b") == "ab"
    assert clean_text("ok\ud800 fine") == "ok fine"  # a lone surrogate cannot be UTF-8
    assert clean_text("Grüße 日本 🙂") == "Grüße 日本 🙂"


@pytest.mark.parametrize("text", ["hello", "", "Grüße 🙂"])
def test_md5_digest(text: str) -> None:
    assert md5_digest(text) == hashlib.md5(text.encode("utf-8")).hexdigest()


def test_md5_digest_ignores_unencodable() -> None:
    assert md5_digest("hello") == "5d41402abc4b2a76b9719d911017c592"
    assert md5_digest("hel\udc80lo") == md5_digest("hello")


def test_loaded_document_text_joins_sections() -> None:
    doc = LoadedDocument(
        sections=[Section(text="a"), Section(text="b")], blocks=[], kind="csv", content_type="text/csv"
    )
    assert doc.text == "a\nb"
    assert LoadedDocument(sections=[], blocks=[], kind="text", content_type="text/plain").text == ""


def test_short_sections_match_the_splitter_exactly() -> None:
    # split_sections skips the splitter for sections up to chunk_size characters; whatever the
    # whitespace, the result must be what the splitter gives.
    rng = random.Random(7)
    alphabet = ["a", "b", " ", "\n", "\n\n", "\t", "  ", "é", "\r\n"]
    splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=5)
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))[:40]
        ours = [c.text for c in split_sections([Section(text=text)], chunk_size=40, chunk_overlap=5)]
        assert ours == splitter.split_text(text), repr(text)


def test_clean_text_returns_clean_text_itself_not_a_copy() -> None:
    # an ingest holds every chunk's text while it embeds: a copy of each would double that
    for text in ("plain ascii", "Grüße 日本 🙂"):
        assert clean_text(text) is text
    dirty = "a\x00b"
    assert clean_text(dirty) is not dirty
