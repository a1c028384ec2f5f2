"""`POST /query_v2` and `POST /validate_v2` end to end: real uploads, the V2 index the queue builds,
the three channels in PostgreSQL, the order of the checks, refusals, isolation and degradation."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
import httpx
import pytest

from app import metrics
from app.config import Settings
from app.evidence import jobs as v2_jobs
from app.evidence.kinds import V2_INDEX_FILE, V2IndexFile
from app.evidence.query.records import CHANNELS
from app.evidence.query.refusal import SAFE_REFUSAL
from app.evidence.query.rerank_http import HttpReranker
from app.evidence.query.vectors import RunVectorCache
from app.evidence.store import retrieve as retrieve_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.ingest.derived import UploadDraft
from tests.contract.helpers import agent_id, upload
from tests.fixtures import v2_corpus
from tests.fixtures.patience import ceiling, out_of_time, until
from tests.fixtures.service import auth, new_id, resources, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-qv2"
UPLOADER = "uploader-qv2"
STRANGER = "stranger-qv2"
FOREIGN_TEXT = v2_corpus.FOREIGN_TEXT
CORPUS = v2_corpus.MIXED_CORPUS
RETRIEVE = retrieve_store.retrieve


@dataclass
class World:
    client: httpx.AsyncClient
    settings: Settings
    agent: str
    other: str
    files: dict[str, str]  # name -> file id
    foreign: str  # a file of the other Agent

    @property
    def ids(self) -> list[str]:
        return list(self.files.values())

    async def ask(
        self,
        query: str,
        *,
        file_ids: list[str] | None = None,
        user: str = UPLOADER,
        entity_id: str | None = None,
        **extra: Any,
    ) -> httpx.Response:
        body: dict[str, Any] = {
            "query": query,
            "file_ids": self.ids if file_ids is None else file_ids,
            "entity_id": self.agent if entity_id is None else entity_id,
            **extra,
        }
        return await self.client.post("/query_v2", json=body, headers=auth(user))


async def wait_active(client: httpx.AsyncClient, namespace: str, files: int, seconds: float = 300) -> None:
    """Until the namespace has an active run holding `files` files (the upload queued its backfill)."""

    async def active() -> bool:
        r = await client.get("/v2/status", headers=auth(ADMIN))
        assert r.status_code == 200, r.text
        runs = [run for run in r.json()["active_runs"] if run["namespace"] == namespace]
        return bool(runs and runs[0]["files"] >= files and not r.json().get("running_runs"))

    await until(
        active, what=f"an active V2 run of {namespace} with {files} files", within_s=seconds, every_s=0.3
    )


async def upload_staged(
    client: httpx.AsyncClient, agent: str, filename: str, text: str, user: str, *, prefix: str
) -> str:
    """Upload one Markdown file into `agent`'s knowledge base as `user` and wait until evidence
    search answers from it; its file id."""
    fid = new_id(prefix)
    r = await upload(client, fid, filename, text.encode(), auth(user), entity_id=agent)
    assert r.status_code == 200, r.text
    await wait_active(client, agent, 1)
    return fid


async def ask_v2(
    client: httpx.AsyncClient, agent: str, file_ids: list[str], question: str, user: str, k: int = 3
) -> list[dict[str, object]]:
    """`/query_v2`'s results for `question` over `file_ids` of `agent`'s knowledge base, as `user`."""
    body = {"query": question, "file_ids": file_ids, "entity_id": agent, "k": k}
    r = await client.post("/query_v2", json=body, headers=auth(user))
    assert r.status_code == 200, r.text
    results: list[dict[str, object]] = r.json()["results"]
    return results


@contextlib.contextmanager
def v2_tuning(client: httpx.AsyncClient, section: str, **values: Any) -> Iterator[None]:
    """Within the block, the running service's V2 tuning with these values of `section` changed."""
    service = resources(client).evidence.parts.search
    shipped = service.tuning
    changed = getattr(shipped, section).model_copy(update=values)
    service.tuning = shipped.model_copy(update={section: changed})
    try:
        yield
    finally:
        service.tuning = shipped


@pytest.fixture(scope="module")
async def world(
    settings_factory: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    agent, other = agent_id(), agent_id()
    settings = settings_factory(v2_namespace_ids=[agent, other], admin_user_ids=[ADMIN])
    folder = tmp_path_factory.mktemp("qv2corpus")
    async with running_app(settings) as client:
        files: dict[str, str] = {}
        for name, make in CORPUS.items():
            path = make(folder / name)
            file_id = new_id(name.split(".")[0])
            r = await upload(client, file_id, name, path.read_bytes(), auth(UPLOADER), entity_id=agent)
            assert r.status_code == 200, r.text
            files[name] = file_id
        foreign = new_id("foreign")
        r = await upload(
            client, foreign, v2_corpus.FOREIGN_NAME, FOREIGN_TEXT.encode(), auth(STRANGER), entity_id=other
        )
        assert r.status_code == 200, r.text
        await wait_active(client, agent, len(files))
        await wait_active(client, other, 1)
        yield World(client, settings, agent, other, files, foreign)


# --- the order of the checks -----------------------------------------------------------------------


async def test_no_token_is_401_before_anything_else(world: World) -> None:
    r = await world.client.post("/query_v2", json={"query": "x", "file_ids": [f"f{i}" for i in range(1001)]})
    assert r.status_code == 401, r.text


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"file_ids": [f"f{i}" for i in range(1001)]}, 400, "At most 1000 file_ids"),
        ({"file_ids": []}, 400, "file_ids must not be empty"),
        ({"query": "  "}, 400, "query must not be empty"),
        ({"query": "x" * 4001}, 400, "at most 4000 characters"),
        ({"query": "nul\x00here"}, 422, None),  # refused at the edge, as on every route
        ({"file_ids": ["ok", "bad\x00id"]}, 422, None),
        ({"k": 11}, 400, "k must be between 1 and 10"),
        ({"k": "many"}, 422, None),
        ({"entity_id": "someone-else"}, 400, "ENTITY_ID_PATTERN"),
        ({"entity_id": "agent_not_enabled_here"}, 403, "RAG_V2_NAMESPACE_IDS"),
        ({"debug": True}, 403, "admin"),
    ],
)
async def test_bad_requests_say_what_to_change(
    world: World, change: dict[str, Any], status: int, words: str | None
) -> None:
    body: dict[str, Any] = {"query": "weight of the K 28", "file_ids": world.ids, "entity_id": world.agent}
    body.update(change)
    r = await world.client.post("/query_v2", json=body, headers=auth(UPLOADER))
    assert r.status_code == status, r.text
    if words is not None:
        assert words in r.json()["detail"]


async def test_malformed_json_is_422(world: World) -> None:
    r = await world.client.post(
        "/query_v2",
        content=b'{"query": "x", "file_ids": [',
        headers={**auth(UPLOADER), "content-type": "application/json"},
    )
    assert r.status_code == 422, r.text


async def test_v2_switched_off_fails_closed(settings_factory: Callable[..., Settings]) -> None:
    async with running_app(settings_factory(v2_namespace_ids=[])) as client:
        body = {"query": "anything", "file_ids": ["a"], "entity_id": agent_id()}
        r = await client.post("/query_v2", json=body, headers=auth(UPLOADER))
        assert r.status_code == 503, r.text
        assert "RAG_V2_NAMESPACE_IDS" in r.json()["detail"]


async def test_an_unknown_index_version_is_400_naming_the_active_ones(world: World) -> None:
    r = await world.ask("weight of the K 28", index_version="v9-never-built")
    assert r.status_code == 400, r.text
    assert "'v9-never-built'" in r.json()["detail"] and "(active: v2)" in r.json()["detail"]
    pinned = await world.ask("weight of the K 28", index_version="v2")
    assert pinned.status_code == 200 and pinned.json()["index_version"] == "v2"


async def test_a_run_activated_or_removed_since_the_last_question_is_seen_by_the_next(world: World) -> None:
    """The service remembers each namespace's active run and its statement checks it: a run made
    active elsewhere (as by another replica) is served by the very next question, a removed one never."""
    found = resources(world.client)
    collection = found.evidence.parts.search.info.collection_id

    async def served() -> tuple[int, str]:
        r = await world.ask("weight of the K 28", user=ADMIN, debug=True)
        assert r.status_code == 200, r.text
        return r.json()["debug"]["run"]["run_id"], r.json()["index_version"]

    first = await served()
    async with found.pool.acquire() as conn:
        old = await run_store.get_run(conn, collection, first[0])
        assert old is not None
        files = [r["file_id"] for r in await conn.fetch(RUN_FILE_IDS, old.run_id)]
        newer = await run_store.create_run(
            conn, collection, namespace=world.agent, index_version="v9-newer",
            extractor_version=old.extractor_version, embedding_model=old.embedding_model,
            embedding_dim=old.embedding_dim, file_ids=files,
        )  # fmt: skip
        await conn.execute(STAGE_AS, newer.run_id, old.run_id)  # the same documents, staged
        await run_store.activate_run(conn, collection, newer.run_id)
    try:
        assert await served() == (newer.run_id, "v9-newer")
    finally:
        async with found.pool.acquire() as conn:
            await conn.execute("DELETE FROM ragoverlay_v2_runs WHERE run_id = $1", newer.run_id)
    assert await served() == first
    # the other namespace's run, remembered, then abandoned: refused, never served
    r = await world.ask("secret pump", file_ids=[world.foreign], user=STRANGER, entity_id=world.other)
    assert r.status_code == 200, r.text
    async with found.pool.acquire() as conn:
        taken = await conn.fetchval(ABANDON, collection, world.other)
    try:
        r = await world.ask("secret pump", file_ids=[world.foreign], user=STRANGER, entity_id=world.other)
        assert r.status_code == 503, r.text
        assert "has no active run yet" in r.json()["detail"]
    finally:
        async with found.pool.acquire() as conn:
            await conn.execute("UPDATE ragoverlay_v2_runs SET status = 'active' WHERE run_id = $1", taken)


RUN_FILE_IDS = "SELECT file_id FROM ragoverlay_v2_run_files WHERE run_id = $1"
STAGE_AS = """
    UPDATE ragoverlay_v2_run_files n
    SET state = o.state, document_id = o.document_id, source = o.source, linked = o.linked, chunks = o.chunks
    FROM ragoverlay_v2_run_files o
    WHERE n.run_id = $1 AND o.run_id = $2 AND o.file_id = n.file_id
"""
ABANDON = """
    UPDATE ragoverlay_v2_runs SET status = 'abandoned'
    WHERE collection_id = $1 AND namespace = $2 AND status = 'active'
    RETURNING run_id
"""


async def test_a_namespace_without_an_active_run_is_503_naming_the_backfill(
    settings_factory: Callable[..., Settings],
) -> None:
    agent = agent_id()
    async with running_app(settings_factory(v2_namespace_ids=[agent])) as client:
        body = {"query": "anything", "file_ids": ["a"], "entity_id": agent}
        r = await client.post("/query_v2", json=body, headers=auth(UPLOADER))
        assert r.status_code == 503, r.text
        assert "/v2/backfill" in r.json()["detail"]


# --- answers -------------------------------------------------------------------------------------


async def test_a_table_question_is_answered_by_its_row_with_a_citation(world: World) -> None:
    r = await world.ask("What is the weight of the K 28 in kg?")
    assert r.status_code == 200, r.text
    # one Server-Timing header, each stage once: the search's stages, then the request's total
    (timing,) = r.headers.get_list("server-timing")
    names = [part.split(";", 1)[0].strip() for part in timing.split(",")]
    # (pool: the wait for a connection, before the one retrieve statement)
    assert names == ["analysis", "embed", "pool", "channels", "fuse", "rerank", "passages", "total"]
    body = r.json()
    assert body["route"] == "v2" and body["index_version"] == "v2"
    assert body["safe_refusal"] is None and body["degraded"] is False
    assert "debug" not in body
    first = body["results"][0]
    assert first["citation_id"] == "V2-1"
    assert [item["citation_id"] for item in body["results"]] == [
        f"V2-{i}" for i in range(1, len(body["results"]) + 1)
    ]
    assert first["chunk_kind"] == "table_row" and first["row_label"] == "K 28", first
    assert first["file_id"] in (world.files["manual.pdf"], world.files["prices.xlsx"])
    rows = [item for item in body["results"] if item["file_id"] == world.files["manual.pdf"]]
    assert any(
        item["headers"] == ["Model", "Power (kW)", "Weight (kg)"] and "12" in item["row_values"]
        for item in rows
    )
    assert "exact" in first["channels"]
    for item in body["results"]:
        assert 0.0 <= item["score"] <= 1.0
        assert item["page"] is None or item["page"] >= 1
        assert item["file_id"] in world.ids


async def test_the_page_is_the_one_a_viewer_shows(world: World) -> None:
    r = await world.ask("Power (kW) of model K 25 in the ratings table", file_ids=[world.files["manual.pdf"]])
    assert r.status_code == 200, r.text
    row = next(item for item in r.json()["results"] if item["row_label"] == "K 25")
    # the ratings page is the second page in the file, printed "1" (the contents page is "i"):
    # `page` is where a viewer opens, the printed label rides beside it
    assert row["page"] == 2 and row["page_label"] == "1" and row["metadata"]["physical_page"] == 2
    # what a result's metadata holds: no indexing statistics or warnings in every passage
    assert set(row["metadata"]) == {
        "kind",
        "content_type",
        "page_count",
        "unreadable_pages",
        "index_source",
        "chunk_id",
        "physical_page",
    }
    assert row["metadata"]["unreadable_pages"] == [3] and row["source_type"] == "pdf"


async def test_an_identifier_nowhere_in_the_documents_is_refused(world: World) -> None:
    r = await world.ask("What is the weight of the K 99 heater?")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["results"] == [] and body["safe_refusal"] == SAFE_REFUSAL


async def test_the_refusal_says_why_in_debug_for_admins(world: World) -> None:
    r = await world.ask("What is the weight of the K 99 heater?", user=ADMIN, debug=True)
    assert r.status_code == 200, r.text
    debug = r.json()["debug"]
    assert debug["refusal"]["refuse"] is True
    assert {"code": "missing_identifier", "value": "K 99"} in debug["refusal"]["reasons"]
    assert set(debug["stages"]) == {"exact", "lexical", "vector", "fused", "reranked"}
    assert set(debug["channels"]) == {"exact", "lexical", "vector"}
    assert debug["run"]["index_version"] == "v2"
    assert debug["timing_ms"]["total"] > 0


async def test_a_foreign_file_id_yields_no_evidence_and_alone_the_refusal(world: World) -> None:
    mixed = await world.ask("valve ZX 9000 rated pressure", file_ids=[*world.ids, world.foreign])
    assert mixed.status_code == 200, mixed.text
    assert all(item["file_id"] != world.foreign for item in mixed.json()["results"])
    assert "ZX 9000" not in json.dumps(mixed.json())
    alone = await world.ask("valve ZX 9000 rated pressure", file_ids=[world.foreign])
    assert alone.status_code == 200, alone.text
    assert alone.json()["results"] == [] and alone.json()["safe_refusal"] == SAFE_REFUSAL
    # a caller without the Agent asks its own namespace, which V2 is not enabled for
    own = await world.client.post(
        "/query_v2", json={"query": "weight of the K 28", "file_ids": world.ids}, headers=auth(STRANGER)
    )
    assert own.status_code == 403 and STRANGER in own.json()["detail"]


async def test_the_other_agent_finds_its_own_file(world: World) -> None:
    r = await world.ask(
        "valve ZX 9000 rated pressure", file_ids=[world.foreign], user=STRANGER, entity_id=world.other
    )
    assert r.status_code == 200, r.text
    assert [item["file_id"] for item in r.json()["results"]][:1] == [world.foreign]


async def test_results_stay_inside_the_requested_files(world: World) -> None:
    subset = [world.files["guide.docx"], world.files["ratings.md"]]
    r = await world.ask("Power of model H 20", file_ids=subset)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert results and {item["file_id"] for item in results} <= set(subset)
    assert results[0]["row_label"] == "H 20"


# --- degradation and reranker fallback -------------------------------------------------------------


async def test_debug_shows_the_one_statement_and_its_stages(world: World) -> None:
    r = await world.ask("What is the weight of the K 28 in kg?", user=ADMIN, debug=True)
    assert r.status_code == 200, r.text
    debug = r.json()["debug"]
    assert debug["retrieve"]["statement"] == "one"
    assert set(debug["retrieve"]["stages_ms"]) == {"visible", "statistics", "details"}
    assert all(debug["channels"][n]["error"] is None and debug["channels"][n]["hits"] > 0 for n in CHANNELS)
    assert debug["channels"]["vector"]["path"] == "exact"
    assert {"pool", "channels", "fuse", "rerank", "total"} <= set(debug["timing_ms"])
    assert "pool;dur=" in r.headers["server-timing"]


# Connections held by the query of the current task (a request's tasks share the list): now, at most
# at once, acquired in all.
HELD: contextvars.ContextVar[list[int]] = contextvars.ContextVar("held")


class CountingPool:
    """The service's pool, counting what each query holds (through HELD)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float | None = None) -> AsyncIterator[Any]:  # noqa: ASYNC109
        held = HELD.get()
        async with self.pool.acquire(timeout=timeout) as conn:
            held[0] += 1
            held[1], held[2] = max(held[1], held[0]), held[2] + 1
            try:
                yield conn
            finally:
                held[0] -= 1


async def _fail(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("down")


def failing(*channels: str) -> Callable[..., Any]:
    """The retrieve statement, failing as a whole when asked for several channels or for one of `channels`."""

    async def retrieve(conn: Any, scope: Any, run_id: int, ask: Any, **kwargs: Any) -> Any:
        asked = retrieve_store.alone(ask)
        if len(asked) > 1 or set(asked) & set(channels):
            raise RuntimeError("down")
        return await RETRIEVE(conn, scope, run_id, ask, **kwargs)

    return retrieve


def fallbacks(reason: str) -> float:
    """ragoverlay_v2_retrieve_fallbacks_total{reason} so far."""
    found = metrics.REGISTRY.get_sample_value("ragoverlay_v2_retrieve_fallbacks_total", {"reason": reason})
    return found or 0.0


async def test_one_failing_channel_degrades_the_answer(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # the one statement fails as a whole: it is asked once per channel, and the exact one fails
    monkeypatch.setattr(retrieve_store, "retrieve", failing("exact"))
    counted = fallbacks("error")
    service = resources(world.client).evidence.parts.search
    assert service is not None
    monkeypatch.setattr(service, "pool", CountingPool(service.pool))
    held = [0, 0, 0]
    HELD.set(held)
    r = await world.ask("What is the weight of the K 28 in kg?", user=ADMIN, debug=True)
    assert r.status_code == 200, r.text
    # the fallback took a fresh connection after the first went back, and the passages a third:
    # never more than one at once
    assert held == [0, 1, 3]
    body = r.json()
    assert body["degraded"] is True
    assert body["debug"]["retrieve"]["statement"] == "per-channel fallback"
    assert body["debug"]["channels"]["exact"]["error"] == "RuntimeError"
    assert body["debug"]["channels"]["lexical"]["error"] is None
    assert any(item["row_label"] == "K 28" for item in body["results"])
    assert fallbacks("error") == counted + 1
    # the fallback alone, every channel answering: not degraded
    monkeypatch.setattr(retrieve_store, "retrieve", failing())
    r = await world.ask("What is the weight of the K 28 in kg?")
    assert r.status_code == 200 and r.json()["degraded"] is False
    assert r.json()["results"][0]["row_label"] == "K 28"
    assert fallbacks("error") == counted + 2


async def test_the_fallback_gives_the_same_answer_as_the_one_statement(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement asked once per channel answers what the one statement answers, refusals included."""
    questions = [
        "What is the weight of the K 28 in kg?",
        "Power of model H 20",
        "pump pressure relief valve",
        "What is the weight of the K 99?",
    ]
    one = [(await world.ask(q)).json() for q in questions]
    monkeypatch.setattr(retrieve_store, "retrieve", failing())
    counted = fallbacks("error")
    apart = [(await world.ask(q)).json() for q in questions]
    assert fallbacks("error") == counted + len(questions)
    assert apart == one
    assert any(body["results"] for body in one) and any(body["safe_refusal"] for body in one)


async def test_the_vector_plan_without_its_inputs_scans_exactly(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = resources(world.client).evidence.parts.search
    assert service is not None
    r = await world.ask("What is the weight of the K 28 in kg?", user=ADMIN, debug=True)
    assert r.status_code == 200, r.text
    assert r.json()["debug"]["vector_plan"]["path"] == "exact"  # a few chunks: under the exact limit
    assert r.json()["debug"]["vector_plan"]["visible_estimate"] > 0

    async def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise asyncpg.QueryCanceledError("canceling statement due to statement timeout")

    # the planner's inputs cannot be read (a fresh cache, its read failing): the vector channel
    # scans exactly and the answer is whole
    monkeypatch.setattr(service, "run_vectors", RunVectorCache())
    monkeypatch.setattr(vector_store, "run_vectors", unreadable)
    r = await world.ask("What is the weight of the K 28 in kg?", user=ADMIN, debug=True)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] is False and body["results"][0]["row_label"] == "K 28"
    assert body["debug"]["vector_plan"] == {"path": "exact", "visible_estimate": 0}
    assert body["debug"]["channels"]["vector"]["path"] == "exact"
    assert body["debug"]["channels"]["vector"]["hits"] > 0


async def test_a_stored_file_the_run_lacks_degrades_the_answer_and_is_staged_first(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload whose V2 staging still waits: the answer says so, and the staging moves ahead."""
    found = resources(world.client)
    jobs = found.jobs
    assert jobs is not None
    queued: list[int] = []

    async def staging_waits(draft: UploadDraft, report: object) -> None:
        # the staging job of the upload, held back for an hour: the file is stored, not in the run
        file_id, owner = draft.file_id, draft.owner
        added = await jobs.service.enqueue(
            V2_INDEX_FILE,
            V2IndexFile(file_id=file_id, owner=owner).model_dump(),
            dedupe_key=v2_jobs.upload_key(owner, file_id),
            priority=v2_jobs.UPLOAD_PRIORITY,
            delay_s=3600,
        )
        queued.append(added.id)

    # evidence search stages an upload with it: here it leaves it to a job held back for an hour
    monkeypatch.setattr(found.evidence, "prepare", staging_waits)
    late = new_id("late")
    text = b"Late arrivals: the gearbox G 77 needs 3.5 litres of oil."
    r = await upload(world.client, late, "late.txt", text, auth(UPLOADER), entity_id=world.agent)
    assert r.status_code == 200, r.text
    try:
        # the request names the late file and another Agent's file: only the late one is missing
        asked = [*world.ids, late, world.foreign]
        question = "How much oil does the gearbox G 77 need?"
        r = await world.ask(question, file_ids=asked)
        assert r.status_code == 200, r.text
        assert r.json()["degraded"] is True
        assert r.json()["missing_files"] == 1
        assert (
            r.json()["degraded_detail"]
            == "1 requested file missing from the evidence index: 1 not indexed yet."
        )
        assert "debug" not in r.json() or r.json()["debug"] is None
        r = await world.ask(question, file_ids=asked, user=ADMIN, debug=True)
        assert r.status_code == 200, r.text
        assert r.json()["debug"]["missing_files"] == [late]
        # without the late file nothing is missing
        r = await world.ask(question)
        assert r.json()["degraded"] is False and r.json()["missing_files"] == 0

        # its staging job was moved ahead of the other V2 work, in the background
        async def hurried() -> bool:
            row = await jobs.service.get(queued[0])
            assert row is not None
            return row.priority == v2_jobs.HURRY_PRIORITY

        await until(hurried, what="the late file's staging job moved ahead", within_s=10)
        assert v2_jobs.HURRY_PRIORITY > v2_jobs.UPLOAD_PRIORITY
    finally:
        r = await world.client.request(
            "DELETE", "/documents", json=[late], headers=auth(UPLOADER), params={"entity_id": world.agent}
        )


async def test_all_channels_failing_is_503(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieve_store, "retrieve", _fail)
    r = await world.ask("What is the weight of the K 28 in kg?")
    assert r.status_code == 503, r.text
    assert "Every V2 search channel failed" in r.json()["detail"]


async def test_twenty_concurrent_queries_share_the_default_pool(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = resources(world.client).evidence.parts.search
    assert service is not None
    assert world.settings.db_pool_max_size == 30  # the default; /query_v2 takes at most 20
    monkeypatch.setattr(service, "pool", CountingPool(service.pool))
    questions = ["What is the weight of the K 28 in kg?", "Power of model H 20", "pump pressure relief valve"]

    async def one(i: int) -> tuple[int, list[int]]:
        held = [0, 0, 0]
        HELD.set(held)
        r = await world.ask(questions[i % len(questions)])
        return r.status_code, held

    answers = await asyncio.gather(*(one(i) for i in range(20)))
    assert [status for status, _ in answers] == [200] * 20
    # each query: one connection for the run and the one statement, then one for the passages'
    # neighbours when a result is prose (a table row has none to read); never two at once
    assert all(held[:2] == [0, 1] and held[2] in (1, 2) for _, held in answers), answers
    assert any(held[2] == 2 for _, held in answers)


class _Reranker(BaseHTTPRequestHandler):
    mode = "malformed"
    release = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.mode == "slow":
            self.release.wait(60)  # answers once the test is over
        payload = b'{"results": "not a list"' if self.mode == "malformed" else b'{"results": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def rerank_server() -> Iterator[tuple[str, type[_Reranker]]]:
    handler = type("Handler", (_Reranker,), {"release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/rerank", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["malformed", "slow"])
async def test_a_remote_reranker_that_fails_falls_back_to_the_features(
    world: World, rerank_server: tuple[str, type[_Reranker]], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = rerank_server
    handler.mode = mode
    service = resources(world.client).evidence.parts.search
    assert service is not None
    async with httpx.AsyncClient() as http:
        monkeypatch.setattr(service, "reranker", HttpReranker(http, url, timeout=0.3))
        t0 = time.perf_counter()
        r = await world.ask("What is the weight of the K 28 in kg?", user=ADMIN, debug=True)
        elapsed = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["debug"]["rerank"]["fell_back"] is True and body["debug"]["rerank"]["backend"] == "features"
    assert body["results"][0]["row_label"] == "K 28"
    # the 0.3 s timeout held (the slow server answers only once the test is over)
    assert elapsed < ceiling(1.8), out_of_time("the search past the reranker's 0.3 s timeout", elapsed)


# --- /validate_v2 ----------------------------------------------------------------------------------


async def test_validate_v2_checks_an_answer_against_the_evidence_it_got(world: World) -> None:
    answer = await world.ask("What is the weight of the K 28 in kg?")
    evidence = answer.json()["results"]
    good = await world.client.post(
        "/validate_v2",
        json={"answer": "The K 28 weighs 12 kg [V2-1].", "evidence": evidence},
        headers=auth(UPLOADER),
    )
    assert good.status_code == 200, good.text
    assert good.json()["verdict"] == "pass", good.json()
    bad = await world.client.post(
        "/validate_v2",
        json={"answer": "The K 28 weighs 14 kg [V2-9].", "evidence": evidence},
        headers=auth(UPLOADER),
    )
    assert bad.status_code == 200 and bad.json()["verdict"] == "refuse"
    codes = {v["code"] for v in bad.json()["violations"]}
    assert codes >= {"unknown_citation"}, codes
    assert (await world.client.post("/validate_v2", json={"answer": "x"})).status_code == 401
