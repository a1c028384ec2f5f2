"""The vector cache of V1's memory scan (pure, no database): decoding, revisions, budget, ranking."""

from __future__ import annotations

import struct
import uuid

import numpy as np
import pytest

from app.search.vector_cache import FileVectors, VectorCache
from app.store.memory_search import PackedVectors, VisibleRevision

D = 16


def halfvec_send(vectors: np.ndarray) -> bytes:
    """pgvector's binary halfvec format, one vector after another (as `string_agg` joins them)."""
    return b"".join(struct.pack(">HH", len(v), 0) + np.asarray(v, dtype=">f2").tobytes() for v in vectors)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def packed(
    owner: str, file_id: str, revision: int, vectors: np.ndarray
) -> tuple[PackedVectors, list[uuid.UUID]]:
    ids = [uuid.uuid4() for _ in range(len(vectors))]
    return PackedVectors(owner, file_id, revision, uuid_send(ids), halfvec_send(unit(vectors))), ids


def uuid_send(ids: list[uuid.UUID]) -> bytes:
    """PostgreSQL's binary uuids, one after another."""
    return b"".join(u.bytes for u in ids)


def test_decode_reads_pgvectors_binary_format_and_renormalises() -> None:
    v = np.random.default_rng(0).normal(size=(3, D))
    row, ids = packed("o", "f", 7, v)
    got = FileVectors.decode(row, D)
    assert (got.owner, got.file_id, got.revision) == ("o", "f", 7)
    np.testing.assert_allclose(got.vectors, unit(v), atol=2e-3)
    np.testing.assert_allclose(np.linalg.norm(got.vectors, axis=1), 1.0, atol=1e-6)
    # an id ending in zero bytes keeps all 16 of them
    zero_tail = uuid.UUID(bytes=b"\x01" * 8 + b"\x00" * 8)
    row = PackedVectors("o", "f", 1, zero_tail.bytes, halfvec_send(unit(v[:1])))
    assert FileVectors.decode(row, D).ids[0].tobytes() == zero_tail.bytes
    with pytest.raises(ValueError, match="vector bytes"):
        FileVectors.decode(PackedVectors("o", "f", 1, uuid_send(ids), b"\x00" * 5), D)
    # a row claiming another dimension, of the right length
    wrong = struct.pack(">HH", D - 1, 0) + np.asarray(unit(v[0]), dtype=">f2").tobytes()
    with pytest.raises(ValueError, match="another dimension"):
        FileVectors.decode(PackedVectors("o", "f", 1, uuid_send(ids[:1]), wrong), D)


def corpus(
    rng: np.random.Generator,
) -> tuple[list[PackedVectors], dict[uuid.UUID, np.ndarray], dict[uuid.UUID, str]]:
    rows, vectors, files = [], {}, {}
    for owner in ("agent", "me"):
        for i in range(40):
            n = int(rng.integers(0, 7))
            v = rng.normal(size=(n, D))
            row, ids = packed(owner, f"{owner}-{i}", 1, v)
            rows.append(row)
            decoded = FileVectors.decode(row, D).vectors
            for u, vec in zip(ids, decoded, strict=True):
                vectors[u], files[u] = vec, f"{owner}-{i}"
    return rows, vectors, files


@pytest.mark.parametrize("share", [1.0, 0.8, 0.2, 0.0])
def test_nearest_is_the_brute_force_over_exactly_the_visible_files(share: float) -> None:
    rng = np.random.default_rng(int(share * 10))
    rows, vectors, files = corpus(rng)
    cache = VectorCache(10**8)
    cache.update(D, [FileVectors.decode(r, D) for r in rows])
    visible = [VisibleRevision(r.owner, r.file_id, 1) for r in rows if rng.random() < share]
    allowed = {(v.owner, v.file_id) for v in visible}
    owner_of = {r.file_id: r.owner for r in rows}
    q = unit(rng.normal(size=D)).astype(np.float32)
    got = cache.nearest(visible, D, q, 10)
    assert got is not None
    pool = [u for u, f in files.items() if (owner_of[f], f) in allowed]
    want = sorted(pool, key=lambda u: -float(vectors[u] @ q))[:10]
    assert got.visible_rows == len(pool)
    assert got.ids == want
    assert set(got.file_ids) == {files[u] for u in want}


def test_ranking_the_held_files_of_a_listing_is_the_brute_force_over_them() -> None:
    rng = np.random.default_rng(5)
    rows, vectors, files = corpus(rng)
    cache = VectorCache(10**8)
    cache.update(D, [FileVectors.decode(r, D) for r in rows])
    q = unit(rng.normal(size=D)).astype(np.float32)
    listed = [f"agent-{i}" for i in range(0, 40, 2)] + ["me-3", "unknown"]
    # "agent" named, and the caller's "me-3" (a file in its own namespace) granted by pair
    held = cache.rank_held(listed, ["agent", "nobody"], D, q, 10, granted=[("me", "me-3")])
    assert held is not None
    got, revisions = held
    pool = [u for u, f in files.items() if f in set(listed) and f != "unknown"]
    want = sorted(pool, key=lambda u: -float(vectors[u] @ q))[:10]
    assert got.ids == want and got.visible_rows == len(pool)
    assert sorted(revisions) == [1] * 21  # one revision per held file: 20 of the Agent's, me-3
    # the same as ranking the same files named one by one
    visible = [VisibleRevision("agent", f, 1) for f in listed[:20]] + [VisibleRevision("me", "me-3", 1)]
    assert cache.nearest(visible, D, q, 10) == got
    assert cache.rank_held(listed, ["nobody"], D, q, 10) is None  # nothing held: no guess


def test_a_new_revision_is_missing_until_loaded_and_replaces_the_files_rows() -> None:
    rng = np.random.default_rng(1)
    cache = VectorCache(10**8)
    old, _ = packed("me", "a", 1, rng.normal(size=(3, D)))
    other, other_ids = packed("me", "b", 1, rng.normal(size=(2, D)))
    cache.update(D, [FileVectors.decode(old, D), FileVectors.decode(other, D)])
    visible = [VisibleRevision("me", "a", 2), VisibleRevision("me", "b", 1)]
    assert cache.missing(visible, D) == [visible[0]]
    q = unit(rng.normal(size=D)).astype(np.float32)
    assert cache.nearest(visible, D, q, 5) is None  # never an answer from an old revision
    new, new_ids = packed("me", "a", 2, np.stack([q, q]))
    cache.update(D, [FileVectors.decode(new, D)])
    assert cache.missing(visible, D) == []
    got = cache.nearest(visible, D, q, 5)
    assert got is not None and got.visible_rows == 4
    assert set(got.ids) == set(new_ids) | set(other_ids)
    assert set(got.ids[:2]) == set(new_ids)
    # another dimension is another block
    assert cache.missing(visible, 8) == visible


def test_the_budget_evicts_the_least_recently_used_and_never_holds_a_namespace_too_big() -> None:
    rng = np.random.default_rng(2)
    a, _ = packed("a", "f", 1, rng.normal(size=(10, D)))
    b, _ = packed("b", "f", 1, rng.normal(size=(10, D)))
    one = FileVectors.decode(a, D)
    block_bytes = one.vectors.nbytes + 10 * 20
    cache = VectorCache(block_bytes * 2)
    cache.update(D, [one])
    cache.update(D, [FileVectors.decode(b, D)])
    q = unit(rng.normal(size=D)).astype(np.float32)
    assert cache.nearest([VisibleRevision("a", "f", 1)], D, q, 3) is not None  # a is used last
    c, _ = packed("c", "f", 1, rng.normal(size=(10, D)))
    assert cache.update(D, [FileVectors.decode(c, D)]) == 1
    assert cache.nbytes <= cache.max_bytes
    assert cache.missing([VisibleRevision("b", "f", 1)], D)  # b left
    assert not cache.missing([VisibleRevision("a", "f", 1), VisibleRevision("c", "f", 1)], D)
    huge, _ = packed("h", "f", 1, rng.normal(size=(100, D)))
    cache.update(D, [FileVectors.decode(huge, D)])
    assert cache.nearest([VisibleRevision("h", "f", 1)], D, q, 3) is None
    assert cache.nbytes <= cache.max_bytes
