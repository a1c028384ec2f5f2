"""V2 index runs end to end: files uploaded through /embed as LibreChat does, a backfill through the
admin route, staging, activation, failure, automatic staging of new uploads, deletes, derivatives,
and what lands in the database (pages, sections, table rows, no navigation, chunks that fit the model).

Everything is real: the embedded PostgreSQL, the local embedding model and its tokenizer, the parsing
worker, the blob store; documents are built by the tests (tests/fixtures/v2_corpus.py).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.clients.embeddings.local import local_model_counter
from app.config import Settings
from app.evidence.store import reads as read_store
from app.store.scope import SCOPE_SQL, Scope
from tests.contract.helpers import agent_id, upload
from tests.fixtures import v2_corpus
from tests.fixtures.patience import until as wait_async
from tests.fixtures.service import auth, new_id, resources, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-v2"
UPLOADER = "uploader-v2"
V1_PAGES = [
    "Legacy report, page one. The boiler K 40 was serviced in March and its pressure was 1.5 bar. "
    "The technician replaced the valve and tested the pump twice before leaving the site.",
    "Page two of the legacy report. The next service of the K 40 boiler is due in September.",
]


@dataclass
class World:
    client: httpx.AsyncClient
    settings: Settings
    agent: str
    files: dict[str, str]  # name -> file id
    folder: Path

    def admin(self) -> dict[str, str]:
        return auth(ADMIN)


CORPUS = v2_corpus.MIXED_CORPUS


async def insert_v1_only(client: httpx.AsyncClient, owner: str, file_id: str) -> None:
    """A file as rag_api stored it before ragoverlay: chunks with an overlap, pages, no original."""
    res = resources(client)
    first, second = V1_PAGES
    pieces = [(first[:120], 0), (first[100:], 0), (second, 1)]  # 20 characters of overlap on page 1
    async with res.pool.acquire() as conn:
        for text, page in pieces:
            meta = {
                "file_id": file_id,
                "user_id": owner,
                "digest": "d",
                "source": "/app/uploads/old.pdf",
                "page": page,
            }
            await conn.execute(
                "INSERT INTO langchain_pg_embedding (uuid, collection_id, embedding, document, cmetadata, "
                "custom_id) VALUES ($1, $2, $3, $4, $5, $6)",
                uuid.uuid4(),
                res.info.collection_id,
                await res.embedder.embed_query(text),
                text,
                json.dumps(meta),
                file_id,
            )


@pytest.fixture(scope="module")
async def world(
    settings_factory: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    folder = tmp_path_factory.mktemp("v2corpus")
    async with running_app(settings) as client:
        files: dict[str, str] = {}
        for name, make in CORPUS.items():
            path = make(folder / name)
            file_id = new_id(name.split(".")[0])
            r = await upload(client, file_id, name, path.read_bytes(), auth(UPLOADER), entity_id=agent)
            assert r.status_code == 200, r.text
            files[name] = file_id
        files["v1-only"] = new_id("legacy")
        await insert_v1_only(client, agent, files["v1-only"])
        yield World(client, settings, agent, files, folder)


async def wait_for_run(
    client: httpx.AsyncClient, run_id: int, *, until: str = "active", seconds: float = 240
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        r = await client.get(f"/v2/runs/{run_id}", headers=auth(ADMIN))
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body if body["run"]["status"] == until else None

    found = await wait_async(reached, what=f"V2 run {run_id} to be {until}", within_s=seconds, every_s=0.2)
    assert found is not None
    return found


async def chunks_of(
    world: World, run_id: int, owner: str | None = None
) -> dict[str, list[read_store.StoredChunk]]:
    res = resources(world.client)
    scope = Scope.of(res.info.collection_id, [owner or world.agent])
    async with res.pool.acquire() as conn:
        rows = await read_store.run_chunks(conn, scope, run_id, limit=10_000)
    out: dict[str, list[read_store.StoredChunk]] = {}
    for row in rows:
        out.setdefault(row.file_id, []).append(row)
    return out


@pytest.fixture(scope="module")
async def backfilled(world: World) -> int:
    """The backfill of the whole namespace through the admin route, as an operator starts it."""
    r = await world.client.post("/v2/backfill", json={"namespace": world.agent}, headers=world.admin())
    assert r.status_code == 202, r.text
    run_id = r.json()["run"]["run_id"]
    assert r.headers["location"] == f"/v2/runs/{run_id}" and r.json()["job_id"] >= 1
    body = await wait_for_run(world.client, run_id)
    assert body["counts"]["staged"] == len(world.files) and body["counts"]["failed"] == 0
    return int(run_id)


async def test_backfill_puts_pages_sections_and_table_rows_on_the_right_chunks(
    world: World, backfilled: int
) -> None:
    chunks = await chunks_of(world, backfilled)
    assert set(chunks) == set(world.files.values())
    everything = [c for rows in chunks.values() for c in rows]

    pdf = chunks[world.files["manual.pdf"]]
    rows = [c for c in pdf if c.place.kind == "table_row"]
    assert [c.place.row_values for c in rows] == [("K 25", "2.5", "10"), ("K 28", "2.8", "12")]
    assert all(c.place.headers == ("Model", "Power (kW)", "Weight (kg)") for c in rows)
    assert all(c.place.units == (None, "kW", "kg") for c in rows)
    assert all((c.place.page, c.place.page_label, c.place.section) == (2, "1", ("2 Ratings",)) for c in rows)
    notes = [c for c in pdf if "Nothing else to add" in c.content]
    assert [(c.place.page, c.place.page_label) for c in notes] == [(4, "3")]
    assert not any(c.place.page in (1, 3) for c in pdf)  # the contents page is boilerplate; page 3 a scan
    assert not any("Contents" in c.content or "....." in c.content for c in pdf)

    html = chunks[world.files["settings.html"]]
    for furniture in v2_corpus.SETTINGS_FURNITURE:
        assert not any(furniture in c.content or furniture in c.embed_text for c in html), furniture
    assert not any("max _size" in c.content or "part _size" in c.content for c in html)
    assert not any("- Limits" in c.content or "- Units" in c.content for c in html)  # the page's contents
    limits = [c for c in html if c.place.kind == "table_row"]
    assert [c.place.row_values[0] for c in limits] == ["max_size", "part_size"]
    assert all(c.place.table_caption == "Table 3.1. Upload limits" for c in limits)
    assert all(
        c.place.units == (None, "MB", "s") and c.place.section == ("Settings", "Limits") for c in limits
    )
    assert all("Sizes in MB (10^6 bytes)." in c.place.footnotes for c in limits)
    assert any(
        c.content.startswith("kW: kilowatt") and c.place.section == ("Settings", "Units") for c in html
    )
    assert any("Set max_size to limit uploads" in c.content for c in html)

    docx = chunks[world.files["guide.docx"]]
    assert any(
        "300 mm above the floor" in c.content and c.place.section == ("Guide", "Installation") for c in docx
    )
    assert [c.place.row_values for c in docx if c.place.kind == "table_row"] == [
        ("H 10", "1.0 kW"),
        ("H 20", "2.0 kW"),
    ]
    assert all(c.place.section == ("Guide", "Ratings") for c in docx if c.place.kind == "table_row")

    xlsx = [c for c in chunks[world.files["prices.xlsx"]] if c.place.kind == "table_row"]
    assert [(c.place.table_caption, c.place.row_values) for c in xlsx] == [
        ("Prices", ("K 25", "100")),
        ("Prices", ("K 28", "120")),
        ("Notes", ("ok",)),
    ]
    md = [c for c in chunks[world.files["ratings.md"]] if c.place.kind == "table_row"]
    assert [(c.place.section, c.place.row_values, c.place.units) for c in md] == [
        (("Ratings", "Fans"), ("F 1", "1200"), (None, "rpm")),
        (("Ratings", "Fans"), ("F 2", "2400"), (None, "rpm")),
    ]
    txt = chunks[world.files["notes.txt"]]
    assert sorted({c.place.page for c in txt}) == [1, 2]

    # every embedded text starts with the document's title and fits the model's window
    counter, window = local_model_counter()
    for c in everything:
        tokens = counter.count(c.embed_text) + counter.special_tokens
        assert tokens == c.tokens and tokens <= window, (c.file_id, c.ordinal, tokens)
        assert c.has_vector


async def test_a_file_known_only_from_v1_rows_is_rebuilt_from_its_chunks(
    world: World, backfilled: int
) -> None:
    chunks = (await chunks_of(world, backfilled))[world.files["v1-only"]]
    text = " ".join(c.content for c in chunks)
    assert "The technician replaced the valve" in text and "due in September" in text
    overlap = V1_PAGES[0][100:120]
    assert sum(c.content.count(overlap) for c in chunks) == 1  # the V1 overlap was removed
    assert sorted({c.place.page for c in chunks}) == [1, 2]
    r = await world.client.get(f"/v2/runs/{backfilled}", headers=world.admin())
    (entry,) = [f for f in r.json()["files"] if f["file_id"] == world.files["v1-only"]]
    assert entry["source"] == "v1_chunks" and entry["state"] == "staged"
    others = [f for f in r.json()["files"] if f["file_id"] != world.files["v1-only"]]
    assert {f["source"] for f in others} == {"original"}


async def test_status_reports_the_active_run(world: World, backfilled: int) -> None:
    r = await world.client.get("/v2/status", headers=world.admin())
    assert r.status_code == 200
    body = r.json()
    assert body["enabled"] is True and body["schema_ready"] is True and body["namespaces"] == [world.agent]
    (active,) = [a for a in body["active_runs"] if a["namespace"] == world.agent]
    assert active["run_id"] == backfilled and active["index_version"] == world.settings.v2_index_version
    assert body["embedding_model"] == "local:all-MiniLM-L6-v2+windows" and body["window"] == 256
    assert body["extractor_version"].startswith("v2.") and body["token_counter"].startswith("tokenizer:")
    assert body["reranker_configured"] is False
    assert all(t["name"].startswith("v2-hnsw-index-") for t in body["tasks"])


async def test_staging_the_same_files_through_the_routes_equals_the_backfill(
    world: World, backfilled: int
) -> None:
    # the same bytes under the same file ids in another namespace: nothing can be linked, all is rebuilt
    other = agent_id()
    uploaded = {name: fid for name, fid in world.files.items() if name in CORPUS}
    for name, file_id in uploaded.items():
        r = await upload(
            world.client, file_id, name, (world.folder / name).read_bytes(), auth(UPLOADER), entity_id=other
        )
        assert r.status_code == 200
    r = await world.client.post(
        "/v2/runs", json={"namespace": other, "file_ids": list(uploaded.values())}, headers=world.admin()
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["run"]["run_id"]
    assert r.json()["counts"] == {"pending": len(uploaded), "staging": 0, "staged": 0, "failed": 0}
    for file_id in uploaded.values():
        r = await world.client.post(
            f"/v2/runs/{run_id}/stage", json={"file_id": file_id}, headers=world.admin()
        )
        assert r.status_code == 200, r.text
        assert r.json()["linked"] is False and r.json()["source"] == "original" and r.json()["chunks"] > 0
    r = await world.client.post(f"/v2/runs/{run_id}/activate", headers=world.admin())
    assert r.status_code == 200 and r.json()["run"]["status"] == "active"
    staged = await chunks_of(world, run_id, other)
    backfill = await chunks_of(world, backfilled)

    def shape(rows: list[read_store.StoredChunk]) -> list[tuple[Any, ...]]:
        return [(c.chunk_id, c.place, c.content) for c in rows]

    for file_id in uploaded.values():
        # identical bytes give identical chunks, ids included
        assert shape(staged[file_id]) == shape(backfill[file_id])


async def test_a_second_run_links_unchanged_documents_instead_of_embedding_them(
    world: World, backfilled: int
) -> None:
    ids = list(world.files.values())
    r = await world.client.post(
        "/v2/runs",
        json={"namespace": world.agent, "index_version": "relinked", "file_ids": ids},
        headers=world.admin(),
    )
    run_id = r.json()["run"]["run_id"]
    for file_id in ids:
        r = await world.client.post(
            f"/v2/runs/{run_id}/stage", json={"file_id": file_id}, headers=world.admin()
        )
        assert r.status_code == 200, r.text
        assert r.json()["linked"] is True and r.json()["embedded"] == 0
    r = await world.client.post(f"/v2/runs/{run_id}/activate", headers=world.admin())
    assert r.status_code == 200
    # another index version: both runs are active side by side
    r = await world.client.get("/v2/status", headers=world.admin())
    versions = {
        a["index_version"]: a["run_id"] for a in r.json()["active_runs"] if a["namespace"] == world.agent
    }
    assert versions == {world.settings.v2_index_version: backfilled, "relinked": run_id}


async def test_activation_refuses_a_partial_run_and_a_failed_run_changes_nothing(
    world: World, backfilled: int
) -> None:
    before = await chunks_of(world, backfilled)
    pdf, html = world.files["manual.pdf"], world.files["settings.html"]
    r = await world.client.post(
        "/v2/runs", json={"namespace": world.agent, "file_ids": [pdf, html]}, headers=world.admin()
    )
    run_id = r.json()["run"]["run_id"]
    r = await world.client.post(f"/v2/runs/{run_id}/stage", json={"file_id": pdf}, headers=world.admin())
    assert r.status_code == 200
    r = await world.client.post(f"/v2/runs/{run_id}/activate", headers=world.admin())
    assert r.status_code == 409
    assert "1 of 2 files staged" in r.json()["detail"] and "1 pending" in r.json()["detail"]
    r = await world.client.post(
        f"/v2/runs/{run_id}/stage", json={"file_id": "not-in-run"}, headers=world.admin()
    )
    assert r.status_code == 404
    r = await world.client.post(
        f"/v2/runs/{run_id}/fail", json={"reason": "wrong files"}, headers=world.admin()
    )
    assert (
        r.status_code == 200
        and r.json()["run"]["status"] == "failed"
        and r.json()["run"]["error"] == "wrong files"
    )
    for action in ("activate", "fail"):
        assert (
            await world.client.post(f"/v2/runs/{run_id}/{action}", headers=world.admin())
        ).status_code == 409
    r = await world.client.post(f"/v2/runs/{run_id}/stage", json={"file_id": html}, headers=world.admin())
    assert r.status_code == 409
    r = await world.client.get("/v2/status", headers=world.admin())
    versions = {
        a["index_version"]: a["run_id"] for a in r.json()["active_runs"] if a["namespace"] == world.agent
    }
    assert versions[world.settings.v2_index_version] == backfilled
    assert await chunks_of(world, backfilled) == before
    assert (await world.client.get("/v2/runs/999999999", headers=world.admin())).status_code == 404


async def test_new_uploads_are_staged_into_the_active_run_and_deletes_remove_them(
    world: World, backfilled: int
) -> None:
    file_id = new_id("late")
    text = b"A late addition: the K 99 pump needs 4.2 bar at the inlet."
    r = await upload(world.client, file_id, "late.txt", text, auth(UPLOADER), entity_id=world.agent)
    assert r.status_code == 200

    async def staged() -> dict[str, Any] | None:
        body: dict[str, Any] = (
            await world.client.get(f"/v2/runs/{backfilled}", headers=world.admin())
        ).json()
        entry = [f for f in body["files"] if f["file_id"] == file_id]
        return body if entry and entry[0]["state"] == "staged" else None

    body = await wait_async(staged, what="the late upload staged in the run", within_s=60, every_s=0.2)
    assert body["run"]["expected_files"] == len(world.files) + 1
    chunks = (await chunks_of(world, backfilled))[file_id]
    assert any("4.2 bar" in c.content for c in chunks)
    # the uploader deletes it (LibreChat sends no entity_id): its V2 rows go too, through the scope
    r = await world.client.request("DELETE", "/documents", json=[file_id], headers=auth(UPLOADER))
    assert r.status_code == 200
    assert file_id not in await chunks_of(world, backfilled)
    body = (await world.client.get(f"/v2/runs/{backfilled}", headers=world.admin())).json()
    assert body["run"]["expected_files"] == len(world.files) and body["run"]["status"] == "active"
    res = resources(world.client)
    async with res.pool.acquire() as conn:
        left = await conn.fetchval("SELECT count(*) FROM ragoverlay_v2_chunks WHERE file_id = $1", file_id)
    assert left == 0


async def test_a_derivative_is_checked_against_its_sha256(world: World, backfilled: int) -> None:
    md = world.files["ratings.md"]
    r = await world.client.post(
        "/v2/runs",
        json={"namespace": world.agent, "index_version": "deriv", "file_ids": [md]},
        headers=world.admin(),
    )
    run_id = r.json()["run"]["run_id"]
    content = b"# Ratings (clean copy)\n\n## Fans\n\nThe F 3 fan moves 360 m3/h.\n"

    async def send(sha: str, name: str = "clean.md") -> httpx.Response:
        data = {"run_id": str(run_id), "file_id": md, "sha256": sha}
        return await world.client.post(
            "/v2/derivative", data=data, files={"file": (name, content)}, headers=world.admin()
        )

    r = await send(hashlib.sha256(b"other bytes").hexdigest())
    assert r.status_code == 400 and "SHA-256 does not match" in r.json()["detail"]
    r = await send(hashlib.sha256(content).hexdigest(), name="clean.pdf")
    assert r.status_code == 415
    r = await send(hashlib.sha256(content).hexdigest())
    assert r.status_code == 200, r.text
    assert r.json()["source"] == "derivative"
    await world.client.post(f"/v2/runs/{run_id}/activate", headers=world.admin())
    chunks = (await chunks_of(world, run_id))[md]
    assert any("360 m3/h" in c.content for c in chunks)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v2/status", None),
        ("GET", "/v2/runs", None),
        ("GET", "/v2/runs/1", None),
        ("POST", "/v2/runs", {"namespace": "x", "file_ids": ["a"]}),
        ("POST", "/v2/runs/1/stage", {"file_id": "a"}),
        ("POST", "/v2/runs/1/activate", None),
        ("POST", "/v2/runs/1/fail", None),
        ("POST", "/v2/backfill", {"namespace": "x"}),
    ],
)
async def test_admin_routes_answer_403_to_everyone_else(
    world: World, method: str, path: str, body: Any
) -> None:
    r = await world.client.request(method, path, json=body, headers=auth(UPLOADER))
    assert r.status_code == 403 and "admin" in r.json()["detail"]
    r = await world.client.request(method, path, json=body)
    assert r.status_code == 401


async def test_the_derivative_route_answers_403_to_everyone_else(world: World) -> None:
    data = {"run_id": "1", "file_id": "a", "sha256": "0" * 64}
    r = await world.client.post(
        "/v2/derivative", data=data, files={"file": ("a.md", b"x")}, headers=auth(UPLOADER)
    )
    assert r.status_code == 403


async def test_the_vector_index_is_built_in_the_background_and_walked_inside_the_scope(
    world: World, backfilled: int
) -> None:
    async def built() -> bool:
        body = (await world.client.get("/v2/status", headers=world.admin())).json()
        task = [t for t in body["tasks"] if t["name"] == "v2-hnsw-index-384"]
        return bool(task and task[0]["state"] == "done")

    await wait_async(built, what="the v2-hnsw-index-384 task done", within_s=120, every_s=0.2)
    res = resources(world.client)
    query = await res.embedder.embed_query("power and weight of the K 28 model")
    walk = (
        "SELECT c.file_id, c.row_values FROM ragoverlay_v2_vec_walk_384("
        f"p_query => $7, p_scope => {SCOPE_SQL}, p_run => $8, p_limit => 5, p_ef_search => 100, "
        "p_max_scan_tuples => 20000) w "
        "JOIN ragoverlay_v2_chunks c ON c.document_id = w.document_id AND c.ordinal = w.ordinal"
    )
    async with res.pool.acquire() as conn:
        valid = await conn.fetchval(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = 'ragoverlay_v2_hnsw_384'"
        )
        assert valid is True
        mine = Scope.of(res.info.collection_id, [world.agent])
        rows = await conn.fetch(walk, *mine.sql_args(), query, backfilled)
        assert len(rows) == 5 and {r["file_id"] for r in rows} <= set(world.files.values())
        stranger = Scope.of(res.info.collection_id, [new_id("stranger")])
        assert await conn.fetch(walk, *stranger.sql_args(), query, backfilled) == []
        # a run that is not the one asked for contributes nothing
        assert await conn.fetch(walk, *mine.sql_args(), query, 0) == []


async def test_a_run_of_fewer_files_needs_force_to_become_the_default(world: World, backfilled: int) -> None:
    """An operator's one-file test run must not silently answer every /query_v2 without index_version."""
    status = (await world.client.get("/v2/status", headers=world.admin())).json()
    (before,) = [a for a in status["answering"] if a["namespace"] == world.agent]
    assert before["files_held"] == before["namespace_files"] == len(world.files) >= 2
    one = world.files["manual.pdf"]
    r = await world.client.post(
        "/v2/runs",
        json={"namespace": world.agent, "index_version": "test1", "file_ids": [one]},
        headers=world.admin(),
    )
    run_id = r.json()["run"]["run_id"]
    r = await world.client.post(f"/v2/runs/{run_id}/stage", json={"file_id": one}, headers=world.admin())
    assert r.status_code == 200, r.text
    r = await world.client.post(f"/v2/runs/{run_id}/activate", headers=world.admin())
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert f"holds 1 of the {len(world.files)} files" in detail and "force=true" in detail
    status = (await world.client.get("/v2/status", headers=world.admin())).json()
    assert [a for a in status["answering"] if a["namespace"] == world.agent] == [before]  # nothing changed
    r = await world.client.post(
        f"/v2/runs/{run_id}/activate", params={"force": "true"}, headers=world.admin()
    )
    assert r.status_code == 200 and r.json()["run"]["status"] == "active"
    status = (await world.client.get("/v2/status", headers=world.admin())).json()
    (after,) = [a for a in status["answering"] if a["namespace"] == world.agent]
    assert after == {
        "namespace": world.agent,
        "run_id": run_id,
        "index_version": "test1",
        "files_held": 1,
        "namespace_files": len(world.files),
        "reindex_needed": None,  # built by this service's extractor and model
    }


async def vectors_of(world: World, file_id: str) -> tuple[dict[str, list[str]], set[str]]:
    """The evidence vectors by kind (as text) of the file's latest document (earlier tests of the
    module may have staged it into other runs too) and its V1 chunks' vectors."""
    res = resources(world.client)
    async with res.pool.acquire() as conn:
        evidence = await conn.fetch(
            "SELECT kind, embedding::text AS v FROM ragoverlay_v2_chunks WHERE file_id = $1"
            " AND document_id = (SELECT max(document_id) FROM ragoverlay_v2_chunks WHERE file_id = $1)",
            file_id,
        )
        v1 = await conn.fetch(
            "SELECT embedding::text AS v FROM langchain_pg_embedding WHERE custom_id = $1", file_id
        )
    by_kind: dict[str, list[str]] = {}
    for row in evidence:
        by_kind.setdefault(row["kind"], []).append(row["v"])
    return by_kind, {row["v"] for row in v1}


async def test_table_rows_take_the_vector_of_the_v1_chunk_holding_them(world: World, backfilled: int) -> None:
    # staged by the backfill's job, from the stored V1 chunks
    by_kind, v1 = await vectors_of(world, world.files["manual.pdf"])
    assert len(by_kind["table_row"]) == 2 and set(by_kind["table_row"]) <= v1
    # staged with its upload, from the V1 vectors of the same embedding pass
    file_id = new_id("one-pass")
    text = (
        "# Fans\n\nThe fans below are rated at their maximum speed; the F 9 is the quietest of them.\n\n"
        "| Model | Speed (rpm) |\n| --- | --- |\n| F 7 | 1500 |\n| F 8 | 2100 |\n| F 9 | 900 |\n"
    )
    r = await upload(world.client, file_id, "fans.md", text.encode(), auth(UPLOADER), entity_id=world.agent)
    assert r.status_code == 200, r.text
    assert r.json()["evidence"]["searchable"] is True, r.json()
    by_kind, v1 = await vectors_of(world, file_id)
    assert len(by_kind["table_row"]) == 3 and None not in by_kind["table_row"]
    assert set(by_kind["table_row"]) <= v1
    assert by_kind["prose"] and None not in by_kind["prose"]
