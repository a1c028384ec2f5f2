"""Re-embedding is an atomic swap that reuses unchanged vectors; failures leave the old version."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.errors import BlobStoreError
from app.ingest.pipeline import SourceFile
from tests.contract.helpers import agent_id, query, upload
from tests.fixtures.service import auth, new_id, resources

PARAS = [
    f"Section {i}: the migration of eels to the Sargasso Sea, part {i}. " + ("detail " * 200)
    for i in range(6)
]


def doc(paras: list[str]) -> bytes:
    return "\n\n".join(paras).encode()


class CountingEmbedder:
    """Wraps the real embedder and counts the texts sent for embedding."""

    def __init__(self, inner: Any) -> None:
        self.real = inner.embed_documents  # bound before it is patched
        self.texts: list[str] = []

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return await self.real(texts)


async def chunk_texts(client: httpx.AsyncClient, fid: str, h: dict[str, str]) -> list[str]:
    r = await client.get("/documents", params={"ids": [fid]}, headers=h)
    return [d["page_content"] for d in r.json()] if r.status_code == 200 else []


async def test_reembed_replaces_and_reuses_unchanged_vectors(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, fid = new_id("user"), new_id()
    h = auth(user)
    assert (await upload(client, fid, "eels.txt", doc(PARAS), h)).status_code == 200
    first = await chunk_texts(client, fid, h)
    assert len(first) >= 6

    embedder = client.app.state.services.embedder  # type: ignore[attr-defined]
    counter = CountingEmbedder(embedder)
    monkeypatch.setattr(embedder, "embed_documents", counter.embed_documents)
    changed = [*PARAS[:5], "Section 5 rewritten: eels spawn in the Sargasso Sea. " + ("detail " * 200)]
    assert (await upload(client, fid, "eels.txt", doc(changed), h)).status_code == 200
    second = await chunk_texts(client, fid, h)
    # no duplicates (upstream appends), and only the changed chunks were embedded again
    assert len(second) == len(first)
    assert any("rewritten" in t for t in second) and not any("part 5." in t for t in second)
    # each section is one chunk (63 + 1,400 chars < CHUNK_SIZE 1,500): exactly the new one was embedded
    assert counter.texts == [t for t in second if "rewritten" in t]


async def test_failure_midway_keeps_previous_version(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, fid = new_id("user"), new_id()
    h = auth(user)
    assert (await upload(client, fid, "v1.txt", doc(PARAS[:2]), h)).status_code == 200
    before = await chunk_texts(client, fid, h)

    blobs = client.app.state.services.blobs  # type: ignore[attr-defined]

    async def storage_down(*args: object, **kwargs: object) -> None:
        raise BlobStoreError("The file storage is unavailable; try again later")

    monkeypatch.setattr(blobs, "put_file", storage_down)
    r = await upload(client, fid, "v2.txt", doc(["Completely different content about volcanoes."]), h)
    assert r.status_code == 503
    monkeypatch.undo()
    assert await chunk_texts(client, fid, h) == before
    pairs = (await query(client, "eels Sargasso", fid, h)).json()
    assert pairs and pairs[0][0]["metadata"]["source"] == "v1.txt"


async def test_same_file_id_other_owner_is_separate(client: httpx.AsyncClient) -> None:
    a, b, fid = new_id("user"), new_id("user"), new_id()
    assert (await upload(client, fid, "a.txt", b"Alpha owner text about ferns.", auth(a))).status_code == 200
    assert (await upload(client, fid, "b.txt", b"Beta owner text about mosses.", auth(b))).status_code == 200
    assert (await query(client, "ferns", fid, auth(a))).json()[0][0]["metadata"]["user_id"] == a
    assert (await query(client, "ferns", fid, auth(b))).json()[0][0]["metadata"]["user_id"] == b


async def test_the_ingest_reports_what_it_stored_to_the_search_statistics(client: httpx.AsyncClient) -> None:
    """The upload route hands the ingest's return value to the planner's statistics at once."""
    user, agent, fid, kb = new_id("user"), agent_id(), new_id(), new_id()
    assert (await upload(client, fid, "eels.txt", doc(PARAS[:3]), auth(user))).status_code == 200
    assert (
        await upload(client, kb, "eels.txt", doc(PARAS[:2]), auth(user), entity_id=agent)
    ).status_code == 200
    stats = client.app.state.services.search.state.stats  # type: ignore[attr-defined]
    stored = len(await chunk_texts(client, fid, auth(user)))
    assert stored > 0 and stats.estimate([fid], [user]) == stored
    # the Agent's file: visible through the entity, or to its uploader; not to anyone else
    in_kb = stats.estimate([kb], [agent])
    assert in_kb > 0 and stats.estimate([kb], [user], user) == in_kb
    assert stats.estimate([kb], [new_id("colleague")], new_id("colleague")) == 0


async def test_an_ingest_reports_its_stages_and_chunks_as_batches_finish(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """What an upload job shows in `progress`: each stage, then chunks with a vector, batch by batch."""
    ingest = resources(client).ingest
    paras = [
        f"Part {i} of the eel survey: glass eels counted at weir {i}. " + ("detail " * 200) for i in range(24)
    ]
    path = tmp_path / "survey.txt"
    path.write_bytes(doc(paras))
    source = SourceFile(path, "survey.txt", "text/plain", path.stat().st_size, sha256_of(path))
    calls: list[tuple[int, int | None, str | None]] = []

    def progress(done: int, total: int | None = None, note: str | None = None) -> None:
        calls.append((done, total, note))

    user = new_id("user")
    outcome = await ingest.ingest(source, file_id=new_id(), owner=user, uploader=user, progress=progress)
    stages = list(dict.fromkeys(note for _, _, note in calls))
    assert stages == ["waiting for an ingest slot", "parsing", "chunking", "embedding", "storing"]
    embedding = [(done, total) for done, total, note in calls if note == "embedding"]
    total = outcome.chunk_count
    assert total >= 24 and {t for _, t in embedding} == {total}
    done = [d for d, _ in embedding]
    assert done == sorted(done) and done[0] == 0 and done[-1] == total
    assert len([d for d in done if 0 < d < total]) >= 2  # batches reported before the call ended


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
