"""Token windows, window-mean embeddings and cross-document boilerplate."""

from __future__ import annotations

import numpy as np
import pytest

from app.clients.embeddings.local import local_model_counter
from app.evidence.index.boilerplate import (
    block_fingerprint,
    document_fingerprints,
    repeated_fingerprints,
)
from app.evidence.settings import BoilerplateSettings
from app.ingest.types import Block
from app.text.tokens import (
    SimpleTokenCounter,
    fits,
    pool_windows,
    window_texts,
    window_weights,
)


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_window_texts_cover_every_token() -> None:
    # 10 words, window 6 with 2 special tokens -> 4 words per window, overlap 1:
    # windows start at words 0, 3, 6 -> [0..3], [3..6], [6..9]
    counter = SimpleTokenCounter(special_tokens=2)
    pieces = window_texts(words(10), counter, window=6, overlap=1)
    assert pieces == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert all(fits(piece, counter, 6) for piece in pieces)
    assert window_texts(words(4), counter, window=6) == [words(4)]
    with pytest.raises(ValueError):
        window_texts(words(4), counter, window=6, overlap=4)


def test_pool_windows_is_the_weighted_normalised_mean() -> None:
    # unit vectors e1 and e2 with weights 3 and 1: mean (0.75, 0.25), norm sqrt(0.625) = 0.7906
    vectors = np.array([[2.0, 0.0], [0.0, 5.0]])  # norms do not count, only directions and weights
    pooled = pool_windows(vectors, [3, 1])
    assert pooled == pytest.approx([0.75 / 0.625**0.5, 0.25 / 0.625**0.5], abs=1e-6)
    assert float(np.linalg.norm(pooled)) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        pool_windows(np.array([[1.0, 0.0], [-1.0, 0.0]]))  # they cancel out
    with pytest.raises(ValueError):
        pool_windows(vectors, [1.0])


def test_window_weights_are_token_counts() -> None:
    assert window_weights(["a b c", "d"], SimpleTokenCounter()) == [3.0, 1.0]


def test_local_model_counter_counts_word_pieces_without_truncation() -> None:
    counter, window = local_model_counter()
    assert window == 256
    assert counter.special_tokens == 2  # [CLS] and [SEP]
    long = "configuration " * 600
    assert counter.count(long) == 600  # far past the model's 256: counted, not cut
    pieces = window_texts(long, counter, window)
    assert all(counter.count(piece) + 2 <= window for piece in pieces)
    assert sum(counter.count(piece) for piece in pieces) == 600


def page(*texts: str, kind: str = "paragraph") -> list[Block]:
    return [Block(kind=kind, text=text, page=None) for text in texts]  # type: ignore[arg-type]


def test_a_menu_on_every_page_is_found_and_content_is_not() -> None:
    policy = BoilerplateSettings(min_documents=3, min_share=0.5, max_tokens=10)
    menu = "Home | Products | Support"
    docs = [page(menu, f"Unique text of page {i}.", "Shared note") for i in range(6)]
    docs.append(page("A page without the menu."))
    # menu: 6 of 7 documents >= max(3, ceil(0.5 * 7) = 4) -> repeated; "Shared note" too
    per_doc = [document_fingerprints(blocks, policy) for blocks in docs]
    repeated = repeated_fingerprints(per_doc, policy)
    assert block_fingerprint(page(menu)[0]) in repeated
    assert block_fingerprint(page("home products SUPPORT")[0]) in repeated  # normalised text
    assert block_fingerprint(page("Unique text of page 1.")[0]) not in repeated


def test_thresholds_and_exclusions() -> None:
    policy = BoilerplateSettings(min_documents=3, min_share=0.5, max_tokens=5)
    long = "one two three four five six"  # 6 tokens > max_tokens 5: content even if repeated
    docs = [page("menu item", long) + page("Parameters", kind="heading") for _ in range(4)]
    docs += [page(f"other {i}") for i in range(6)]
    # 4 of 10 documents: needed max(3, ceil(0.5 * 10) = 5) -> nothing is repeated
    per_doc = [document_fingerprints(blocks, policy) for blocks in docs]
    assert repeated_fingerprints(per_doc, policy) == frozenset()
    # with min_share 0.4: needed max(3, 4) = 4 -> the menu item only (long text and heading excluded)
    lower = BoilerplateSettings(min_documents=3, min_share=0.4, max_tokens=5)
    repeated = repeated_fingerprints([document_fingerprints(b, lower) for b in docs], lower)
    assert repeated == {block_fingerprint(page("menu item")[0])}


def test_a_document_counts_once_however_often_it_repeats_a_block() -> None:
    policy = BoilerplateSettings(min_documents=2, min_share=0.0)
    per_doc = [document_fingerprints(page("x", "x", "x"), policy), document_fingerprints(page("y"), policy)]
    assert repeated_fingerprints(per_doc, policy) == frozenset()
