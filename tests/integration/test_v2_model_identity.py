"""V2 vectors are reused only under the same model identity (app/clients/embeddings/identity.py):
a run staged under model A, then the service restarted under model B on the same database and
collection, stages every file again with vectors of B, none copied from A. The provider is the fake
OpenAI server on loopback, whose vectors depend on the model asked, so a copied vector shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.clients.embeddings import model_identity
from app.config import Settings
from tests.contract.helpers import agent_id, upload
from tests.fixtures import v2_corpus
from tests.fixtures.fake_providers import FakeProvider, RecordedRequest, Reply
from tests.fixtures.service import auth, new_id, resources, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-identity"
# the V2 test corpus's quick formats (any text would do: what matters is whose vectors they get)
FILES = ("ratings.md", "notes.txt", "settings.html")


def model_vector(model: str, text: str, dims: int) -> list[float]:
    """The fake's vector of `text` for `model`: two models never give a text the same vector."""
    return FakeProvider.vector_for(f"{model}\x1f{text}", dims)


def cosine(a: np.ndarray, b: list[float]) -> float:
    """Cosine similarity (V2 stores vectors normalised)."""
    other = np.asarray(b, dtype=np.float32)
    return float(a @ other / (np.linalg.norm(a) * np.linalg.norm(other)))


def answer_by_model(provider: FakeProvider) -> Callable[[RecordedRequest], Reply | None]:
    def handle(request: RecordedRequest) -> Reply | None:
        body = request.json or {}
        model = str(body.get("model"))
        data = [
            {"object": "embedding", "index": i, "embedding": model_vector(model, text, provider.dims)}
            for i, text in enumerate(provider.texts_of(request))
        ]
        return Reply(json={"object": "list", "data": data, "model": model, "usage": {}})

    return handle


async def stage_all(settings: Settings, namespace: str, version: str, file_ids: list[str]) -> list[Any]:
    """A run of `file_ids` started, staged file by file and activated; the stage answers."""
    async with running_app(settings) as c:
        r = await c.post(
            "/v2/runs",
            json={"namespace": namespace, "index_version": version, "file_ids": file_ids},
            headers=auth(ADMIN),
        )
        assert r.status_code in (200, 201), r.text
        run = r.json()["run"]
        assert run["embedding_model"] == model_identity(settings)
        staged = []
        for file_id in file_ids:
            r = await c.post(
                f"/v2/runs/{run['run_id']}/stage", json={"file_id": file_id}, headers=auth(ADMIN)
            )
            assert r.status_code == 200, r.text
            staged.append(r.json())
        r = await c.post(f"/v2/runs/{run['run_id']}/activate", headers=auth(ADMIN))
        assert r.status_code == 200, r.text
        async with resources(c).pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT d.embedding_model, c.embed_text, c.embedding::real[] AS embedding "
                "FROM ragoverlay_v2_run_files f "
                "JOIN ragoverlay_v2_documents d ON d.document_id = f.document_id "
                "JOIN ragoverlay_v2_chunks c ON c.document_id = d.document_id WHERE f.run_id = $1",
                run["run_id"],
            )
        return [staged, rows]


async def test_a_changed_model_identity_reembeds_every_vector_of_a_run(
    settings_factory: Callable[..., Settings], fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.handler = answer_by_model(fake_provider)
    namespace = agent_id()
    common: dict[str, Any] = {
        "embeddings_provider": "openai",
        "openai_api_key": "sk-test",
        "openai_base_url": fake_provider.url + "/v1",
        "admin_user_ids": [ADMIN],
    }
    # the files, uploaded before V2 is enabled for the namespace (no automatic first run)
    first = settings_factory(embeddings_model="model-a", **common)
    same_store = {"collection_name": first.collection_name, "data_dir": first.data_dir}
    ids = {name: new_id(name.split(".")[0]) for name in FILES}
    async with running_app(first) as c:
        for name in FILES:
            data = v2_corpus.MIXED_CORPUS[name](tmp_path / name).read_bytes()
            r = await upload(c, ids[name], name, data, auth("uploader"), entity_id=namespace)
            assert r.status_code == 200, r.text
    file_ids = list(ids.values())

    model_a = settings_factory(
        embeddings_model="model-a", v2_namespace_ids=[namespace], **common, **same_store
    )
    staged_a, rows_a = await stage_all(model_a, namespace, "a", file_ids)
    assert all(s["embedded"] > 0 and s["reused"] == 0 for s in staged_a)
    # sanity: under the same identity a second run links the documents, embedding nothing
    again, _ = await stage_all(model_a, namespace, "a-again", file_ids)
    assert all(s["linked"] and s["embedded"] == 0 for s in again)

    model_b = settings_factory(
        embeddings_model="model-b", v2_namespace_ids=[namespace], **common, **same_store
    )
    asked_before = len(fake_provider.requests)
    staged_b, rows_b = await stage_all(model_b, namespace, "b", file_ids)
    assert all(not s["linked"] and s["reused"] == 0 and s["embedded"] > 0 for s in staged_b)
    assert {row["embedding_model"] for row in rows_a} == {"openai:model-a"}
    assert {row["embedding_model"] for row in rows_b} == {"openai:model-b"}
    # every vector of run b is model b's vector of its text, none is model a's
    assert rows_b and all(row["embedding"] is not None for row in rows_b)
    for row in rows_b:
        vector = np.asarray(row["embedding"], dtype=np.float32)
        text = row["embed_text"]
        assert cosine(vector, model_vector("model-b", text, fake_provider.dims)) > 0.9999
        assert cosine(vector, model_vector("model-a", text, fake_provider.dims)) < 0.99
    asked_b = {
        text
        for request in fake_provider.requests[asked_before:]
        if (request.json or {}).get("model") == "model-b"
        for text in fake_provider.texts_of(request)
    }
    assert {row["embed_text"] for row in rows_b} <= asked_b  # each one embedded by model b
    async with running_app(model_b) as c:  # the documents of a stay apart, under their own identity
        async with resources(c).pool.acquire() as conn:
            models = await conn.fetch(
                "SELECT DISTINCT embedding_model FROM ragoverlay_v2_documents WHERE collection_id = $1",
                resources(c).info.collection_id,
            )
    assert sorted(m["embedding_model"] for m in models) == ["openai:model-a", "openai:model-b"]
