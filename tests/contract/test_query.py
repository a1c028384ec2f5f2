"""`/query` and `/query_multiple`: shapes, ordering, limits and status codes (CONTRACT.md section 4)."""

from __future__ import annotations

import asyncio
import hashlib

import httpx

from tests.contract.helpers import agent_id, file_ids_of, query, texts, upload
from tests.fixtures.service import auth, new_id

FACTS = [
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
    "The quarterly sales report shows revenue grew by twelve percent in the northern region.",
    "Mount Everest is the highest mountain above sea level, at 8,849 metres.",
]


def paragraphs(*items: str) -> bytes:
    # blank lines between facts, and each fact padded so that every one becomes its own chunk
    return "\n\n".join(item + " " + ("filler " * 220) for item in items).encode()


async def test_query_returns_document_distance_pairs(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    h = auth(user)
    r = await upload(client, fid, "facts.txt", paragraphs(*FACTS), h)
    assert r.status_code == 200, r.text
    r = await query(client, "When was the Eiffel Tower built?", fid, h, k=3)
    assert r.status_code == 200
    pairs = r.json()
    assert isinstance(pairs, list) and len(pairs) == 3
    doc, distance = pairs[0]
    assert set(doc) == {"id", "page_content", "metadata", "type"}
    assert doc["type"] == "Document"
    assert isinstance(doc["id"], str)
    assert isinstance(distance, float) and 0.0 <= distance <= 2.0
    meta = doc["metadata"]
    assert meta["file_id"] == fid
    assert meta["user_id"] == user
    assert meta["source"] == "facts.txt"
    assert meta["digest"] == hashlib.md5(doc["page_content"].encode()).hexdigest()
    assert "Eiffel Tower" in doc["page_content"]
    distances = [p[1] for p in pairs]
    assert distances == sorted(distances)


async def test_query_unknown_or_foreign_file_is_empty_200(client: httpx.AsyncClient) -> None:
    r = await query(client, "anything", new_id(), auth(new_id("user")))
    assert r.status_code == 200
    assert r.json() == []


async def test_query_k_bounds_and_bad_bodies(client: httpx.AsyncClient) -> None:
    h = auth(new_id("user"))
    for k, words in ((0, "k must be at least 1"), (101, "k must be at most 100")):
        # well typed, out of bounds: 400 with a sentence (docs/routes.md, which status for which mistake)
        r = await client.post("/query", json={"query": "q", "file_id": "f", "k": k}, headers=h)
        assert r.status_code == 400
        assert r.json() == {"detail": words}
    r = await client.post("/query", content=b"{not json", headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 422
    r = await client.post("/query", json={"query": "q"}, headers=h)
    assert r.status_code == 422
    assert any(e["loc"][-1] == "file_id" for e in r.json()["detail"])
    # unknown keys are ignored
    r = await client.post("/query", json={"query": "q", "file_id": "f", "extra": 1}, headers=h)
    assert r.status_code == 200


async def test_query_multiple_global_k_and_no_duplicates(client: httpx.AsyncClient) -> None:
    user = new_id("user")
    h = auth(user)
    ids = [new_id() for _ in FACTS]
    for fid, fact in zip(ids, FACTS, strict=True):
        assert (await upload(client, fid, f"{fid}.txt", paragraphs(fact, fact.upper()), h)).status_code == 200
    body = {"query": "How tall is Mount Everest?", "file_ids": ids + ids, "k": 3}
    r = await client.post("/query_multiple", json=body, headers=h)
    assert r.status_code == 200
    pairs = r.json()
    assert len(pairs) == 3  # k is global, not per file
    assert len({p[0]["id"] for p in pairs}) == 3
    # each file holds its fact twice, once upper-cased: the same vector for an uncased model
    assert "everest" in pairs[0][0]["page_content"].lower()
    distances = [p[1] for p in pairs]
    assert distances == sorted(distances)


async def test_query_multiple_limits(client: httpx.AsyncClient) -> None:
    h = auth(new_id("user"))
    r = await client.post("/query_multiple", json={"query": "q", "file_ids": []}, headers=h)
    assert r.status_code == 400
    assert r.json() == {"detail": "file_ids must not be empty"}
    too_many = [f"f{i}" for i in range(1001)]
    r = await client.post("/query_multiple", json={"query": "q", "file_ids": too_many}, headers=h)
    assert r.status_code == 400
    assert r.json() == {"detail": "At most 1000 file_ids are allowed"}
    # 1,000 distinct ids, repeated: still allowed (duplicates count once); nothing matches → 404
    ok = [f"f{i}" for i in range(1000)] * 2
    r = await client.post("/query_multiple", json={"query": "q", "file_ids": ok}, headers=h)
    assert r.status_code == 404
    assert r.json() == {"detail": "No documents found for the given query"}
    # the body is rag_api's; the search's stages come along, as on an answer
    assert "db;dur=" in r.headers["server-timing"]


async def test_query_multiple_thousand_ids_with_a_real_one(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    h = auth(user)
    assert (await upload(client, fid, "real.txt", paragraphs(FACTS[1]), h)).status_code == 200
    ids = [fid] + [f"missing-{i}" for i in range(999)]  # exactly 1,000 distinct
    r = await client.post(
        "/query_multiple", json={"query": "photosynthesis", "file_ids": ids + [fid] * 5}, headers=h
    )
    assert r.status_code == 200
    assert {p[0]["metadata"]["file_id"] for p in r.json()} == {fid}
    r = await client.post(
        "/query_multiple", json={"query": "photosynthesis", "file_ids": [*ids, "one-more"]}, headers=h
    )
    assert r.status_code == 400


async def test_librechat_parallel_query_pattern(client: httpx.AsyncClient) -> None:
    """Stock LibreChat: one /query per file in parallel, k=5, entity_id only on knowledge-base files."""
    user, agent = new_id("user"), agent_id()
    h = auth(user)
    kb = [new_id() for _ in range(3)]
    conv = new_id()
    for fid, fact in zip(kb, FACTS, strict=False):
        assert (await upload(client, fid, "kb.txt", paragraphs(fact), h, entity_id=agent)).status_code == 200
    assert (await upload(client, conv, "chat.txt", paragraphs(FACTS[3]), h)).status_code == 200
    calls = [query(client, "photosynthesis glucose", fid, h, k=5, entity_id=agent) for fid in kb]
    calls.append(query(client, "photosynthesis glucose", conv, h, k=5))
    responses = await asyncio.gather(*calls)
    assert all(r.status_code == 200 for r in responses)
    results = [r.json() for r in responses]
    assert all(len(res) >= 1 for res in results)
    for fid, res in zip([*kb, conv], results, strict=True):
        assert file_ids_of(res) == {fid}
    # knowledge-base files are owned by the Agent, conversation files by the user
    assert results[0][0][0]["metadata"]["user_id"] == agent
    assert results[-1][0][0]["metadata"]["user_id"] == user
    merged = sorted((p for res in results for p in res), key=lambda p: p[1])
    assert "Photosynthesis" in texts(merged)[0]
    # without entity_id the Agent's files are out of scope, except for the user who uploaded them
    r = await query(client, "photosynthesis", kb[1], auth(new_id("colleague")), k=5)
    assert r.json() == []
    r = await query(client, "photosynthesis", kb[1], h, k=5)
    assert file_ids_of(r.json()) == {kb[1]}


async def test_server_timing_reports_embedding_database_and_total(client: httpx.AsyncClient) -> None:
    user, fid = new_id("user"), new_id()
    assert (await upload(client, fid, "t.txt", paragraphs(FACTS[0]), auth(user))).status_code == 200
    r = await query(client, "Eiffel Tower", fid, auth(user))
    (timing,) = r.headers.get_list("server-timing")  # one header: the route's stages and the total
    assert "embed;dur=" in timing and "db;dur=" in timing and timing.count("total;dur=") == 1
    assert "pool;dur=" in timing  # the wait for a pooled connection, apart from the statement
    assert 'desc="exact"' in timing  # one file: scanned exactly, in one statement (not in memory)
