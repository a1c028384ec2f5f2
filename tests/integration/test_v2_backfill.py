"""The V2 backfill on the job queue, through the real app and database: `POST /admin/reindex` as one job
per file (survey, then stage) activated exactly once, `force`, a killed worker's file job taken back by
another replica, maintenance and V2 jobs one replica created run by another, chunks staged while the
embedding provider fails healed by the sweep, the job gauges of `/metrics`, and `scripts/v2-backfill`.

The embedding provider is the fake OpenAI-compatible server on a real socket (fast, and it can fail on
demand), except for the command, which runs the service's default local model in its own process.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.evidence.index.backfill import start_backfill_run
from app.evidence.index.lifecycle import fail
from app.evidence.store import reads as read_store
from app.evidence.store import runs as run_store
from app.ingest import parse_cache as parse_cache_module
from app.jobs.kinds import MAINTENANCE, REEMBED_MISSING
from app.jobs.setup import JobSystem
from app.jobs.worker import JobWorker
from app.store.jobs import JobRow
from app.store.scope import Scope
from tests.contract.helpers import agent_id, upload
from tests.fixtures.fake_providers import FakeProvider, RecordedRequest, Reply
from tests.fixtures.patience import ceiling
from tests.fixtures.patience import until as wait_async
from tests.fixtures.service import (
    SettingsFactory,
    auth,
    env_without_ragoverlay,
    new_id,
    resources,
    running_app,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN = "admin-v2-jobs"
MENU = "Products · Services · About us · Contact · Careers"


def page(n: int) -> bytes:
    """A site page: a menu that is not marked up as navigation (only repetition gives it away)."""
    return (
        f"<html><head><title>Page {n}</title></head><body><p>{MENU}</p><h1>Topic {n}</h1>"
        f"<p>Unit K {20 + n} runs at {n}.5 kW and weighs {n + 3} kg; see section {n} of the manual.</p>"
        "</body></html>"
    ).encode()


def admin() -> dict[str, str]:
    return auth(ADMIN)


def http_settings(factory: SettingsFactory, provider: FakeProvider, **overrides: Any) -> Settings:
    """An app on the fake provider: no retries and no breaker (a failure is a failure at once)."""
    values: dict[str, Any] = {
        "embeddings_provider": "openai",
        "openai_api_key": "sk-test",
        "openai_base_url": provider.url + "/v1/",
        "embedding_max_retries": 0,
        "embedding_breaker_failures": 0,
        "admin_user_ids": [ADMIN],
        "indexer_retry_base_ms": 100,
        "indexer_retry_max_ms": 500,
    }
    return factory(**(values | overrides))


def jobs_of(client: httpx.AsyncClient) -> JobSystem:
    system = resources(client).jobs
    assert system is not None
    return system


async def until(check: Callable[[], Any], what: str, within: float = 60.0) -> Any:
    """Poll `check` (sync or async) until it returns something truthy."""

    async def checked() -> Any:
        value = check()
        return await value if asyncio.iscoroutine(value) else value

    return await wait_async(checked, what=what, within_s=within, every_s=0.05)


async def run_of(client: httpx.AsyncClient, run_id: int) -> dict[str, Any]:
    r = await client.get(f"/v2/runs/{run_id}", headers=admin())
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def reindex(client: httpx.AsyncClient, namespace: str, *, force: bool = False) -> dict[str, Any]:
    """`POST /admin/reindex`, then the run its job planned, once active."""
    r = await client.post(
        "/admin/reindex", params={"namespace": namespace, "force": str(force).lower()}, headers=admin()
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["job"]["id"]

    async def planned() -> dict[str, Any] | None:
        job = (await client.get(f"/admin/jobs/{job_id}", headers=admin())).json()
        assert job["status"] != "failed", job
        return job if job["status"] == "done" else None

    job = await until(planned, f"job {job_id} planned the run")
    run_id = job["result"]["run_id"]

    async def active() -> dict[str, Any] | None:
        body = await run_of(client, run_id)
        assert body["run"]["status"] in ("running", "active"), body
        return body if body["run"]["status"] == "active" else None

    body: dict[str, Any] = await until(active, f"run {run_id} active")

    # the job that activated the run is marked done only after it returns: wait for it too
    async def settled() -> bool | None:
        jobs = await file_jobs(client, run_id)
        return True if jobs and all(j["status"] in ("done", "failed") for j in jobs) else None

    await until(settled, f"run {run_id}'s file jobs finished")
    return {"job": job, **body}


async def file_jobs(client: httpx.AsyncClient, run_id: int) -> list[dict[str, Any]]:
    r = await client.get("/admin/jobs", params={"kind": "v2-index-file", "limit": 1000}, headers=admin())
    return [j for j in r.json()["jobs"] if j["payload"]["run_id"] == run_id]


def crash(worker: JobWorker) -> None:
    """What kill -9 does to a worker, in-process: it stops at once, writes nothing, its session ends."""
    assert worker._loop_task is not None
    worker._loop_task.cancel()
    for run in worker._runs.values():
        run.reason = "lease-lost"  # not "stopping": nothing is written back
        if run.task is not None:
            run.task.cancel()
    assert worker.lease.conn is not None
    worker.lease.conn.terminate()
    worker.lease.conn = None


async def test_reindex_is_one_job_per_file_activated_once_and_force_rebuilds_everything(
    settings_factory: SettingsFactory, fake_provider: FakeProvider
) -> None:
    agent = agent_id()
    async with running_app(http_settings(settings_factory, fake_provider)) as client:
        files = [new_id("page") for _ in range(6)]
        for n, file_id in enumerate(files):
            r = await upload(client, file_id, f"page{n}.html", page(n), auth("site-owner"), entity_id=agent)
            assert r.status_code == 200
        first = await reindex(client, agent)
        run_id = first["run"]["run_id"]
        # six files: enough for repeated blocks to count, so every file is surveyed before any is staged
        assert first["job"]["result"] == {
            "run_id": run_id,
            "namespace": agent,
            "force": False,
            "status": "running",
            "files": 6,
            "surveys": 6,
            "stages": 6,
        }
        jobs = await file_jobs(client, run_id)
        surveys = [j for j in jobs if j["payload"]["survey"]]
        stages = [j for j in jobs if not j["payload"]["survey"]]
        assert len(surveys) == len(stages) == 6 and all(j["status"] == "done" for j in jobs)
        assert sorted(j["payload"]["file_id"] for j in stages) == sorted(files)
        assert all(j["failures"] == 0 for j in jobs)
        assert sum(bool(j["result"]["activated"]) for j in stages) == 1  # activated exactly once
        res = resources(client)
        async with res.pool.acquire() as conn:
            chunks = await read_store.run_chunks(
                conn, Scope.of(res.info.collection_id, [agent]), run_id, limit=999
            )
            removed = await conn.fetch(
                "SELECT metadata->'stats'->'boilerplate_by_kind' AS kinds FROM ragoverlay_v2_documents "
                "WHERE owner = $1",
                agent,
            )
        # the menu repeats across the run: found in every file, the first one staged included
        assert len(removed) == 6 and all('"repeated": 1' in r["kinds"] for r in removed)
        assert {c.file_id for c in chunks} == set(files)
        assert not any("Careers" in c.content or "Careers" in c.embed_text for c in chunks)
        assert any("K 25 runs at 5.5 kW" in c.content for c in chunks)

        # again without force: a new run that links every unchanged document, embeds nothing
        requests = len(fake_provider.requests)
        second = await reindex(client, agent)
        assert all(f["linked"] for f in second["files"]) and len(fake_provider.requests) == requests
        assert second["chunks"] == first["chunks"]

        # force: a new run that links nothing: every file parsed and embedded again
        third = await reindex(client, agent, force=True)
        assert third["job"]["result"]["force"] is True
        assert not any(f["linked"] for f in third["files"]) and len(fake_provider.requests) > requests
        statuses = {r["run_id"]: r["status"] for r in (await client.get("/v2/runs", headers=admin())).json()}
        assert (statuses[run_id], statuses[second["run"]["run_id"]], statuses[third["run"]["run_id"]]) == (
            "abandoned",
            "abandoned",
            "active",
        )
        async with res.pool.acquire() as conn:
            # the earlier runs' documents are gone: the namespace holds one document per file
            assert (
                await conn.fetchval("SELECT count(*) FROM ragoverlay_v2_documents WHERE owner = $1", agent)
                == 6
            )

        # a new backfill of the namespace (and index version) replaces one still running
        ctx = res.evidence.parts.context
        assert ctx is not None
        older = await start_backfill_run(ctx, namespace=agent, activate_when_done=False)
        newer = await start_backfill_run(ctx, namespace=agent, activate_when_done=False)
        superseded = (await run_of(client, older.run_id))["run"]
        assert (superseded["status"], superseded["error"]) == (
            "failed",
            f"superseded by backfill run {newer.run_id}",
        )
        await fail(ctx, newer.run_id, "test over")

        # the job gauges
        text = (await client.get("/metrics", headers=admin())).text
        done = re.search(r'^ragoverlay_jobs\{status="done"\} (\S+)$', text, re.MULTILINE)
        assert done is not None and float(done.group(1)) >= 39  # 3 plans + 36 file jobs
        assert re.search(r'^ragoverlay_jobs_running\{kind="v2-index-file"\} \S+$', text, re.MULTILINE)
        assert re.search(r"^ragoverlay_job_worker_concurrency 4\.0$", text, re.MULTILINE)


async def test_the_stage_step_chunks_the_document_its_survey_parsed_without_parsing_again(
    settings_factory: SettingsFactory, fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The survey holds its parse in the one parse cache under the bytes' key; the stage reads it."""
    agent = agent_id()
    settings = http_settings(settings_factory, fake_provider)
    parsed: list[str] = []
    real_parse = parse_cache_module.parse_in_worker

    async def counted(path: Path, filename: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(filename)
        return await real_parse(path, filename, *args, **kwargs)

    monkeypatch.setattr(parse_cache_module, "parse_in_worker", counted)
    async with running_app(settings) as client:
        # five files: as many as a run needs for its survey (min_documents), cheap HTML parses that
        # the cache would not keep by their cost alone
        for n in range(5):
            r = await upload(client, new_id("page"), f"page{n}.html", page(n), auth("owner"), entity_id=agent)
            assert r.status_code == 200
        parsed.clear()
        done = await reindex(client, agent)
        assert done["job"]["result"]["surveys"] == done["job"]["result"]["stages"] == 5
        assert not any(f["linked"] for f in done["files"])
    # each file parsed once, by its survey: its stage step read that parse back
    assert sorted(parsed) == [f"page{n}.html" for n in range(5)]
    # and removed it once it had the document: nothing is held past the stage step
    assert not list((settings.data_dir.resolve() / "tmp" / "parsed").glob("*.held.pickle"))


async def test_a_killed_workers_file_job_is_taken_back_by_another_replica_and_the_run_completes(
    settings_factory: SettingsFactory, fake_provider: FakeProvider
) -> None:
    agent = agent_id()
    settings = http_settings(settings_factory, fake_provider, indexer_stale_timeout_s=2)
    async with running_app(settings) as first:
        files = [new_id("doc") for _ in range(2)]
        for n, file_id in enumerate(files):
            text = f"Report {n}: the K {n} pump needs {n}.5 bar at the inlet and {n + 2} bar at the outlet."
            r = await upload(first, file_id, f"r{n}.txt", text.encode(), auth("owner"), entity_id=agent)
            assert r.status_code == 200
        fake_provider.delay = 1.5  # each embedding call now takes a while: a file job is caught mid-way
        r = await first.post("/admin/reindex", params={"namespace": agent}, headers=admin())
        assert r.status_code == 202
        res = resources(first)

        async def staging() -> list[Any]:
            return list(
                await res.pool.fetch(
                    "SELECT j.id FROM ragoverlay_jobs j WHERE j.queue = $1 AND j.kind = 'v2-index-file' "
                    "AND j.status = 'running' AND j.payload->>'owner' = $2",
                    res.info.collection_name,
                    agent,
                )
            )

        killed = {row["id"] for row in await until(staging, "a file job running")}
        worker = jobs_of(first).worker
        assert worker is not None
        crash(worker)
        fake_provider.delay = 0.0
        # another replica on the same database and files takes the abandoned jobs back and finishes
        async with running_app(settings) as second:
            run_id = int(
                await until(
                    lambda: res.pool.fetchval(
                        "SELECT run_id FROM ragoverlay_v2_runs WHERE namespace = $1 AND status = 'active'",
                        agent,
                    ),
                    "the run active",
                )
            )
            body = await run_of(second, run_id)
            assert body["counts"]["staged"] == 2 and body["counts"]["failed"] == 0
            for job_id in killed:
                job = (await second.get(f"/admin/jobs/{job_id}", headers=admin())).json()
                assert job["status"] == "done" and job["attempts"] == 2, job
                assert job["error"] is None and job["failures"] == 1  # the lost run, counted
                assert job["worker"] == jobs_of(second).service.worker.name  # type: ignore[union-attr]
            staged = {f["file_id"]: f for f in body["files"]}
            assert all(staged[f]["attempts"] >= 1 for f in files)


async def test_a_replica_runs_the_jobs_and_maintenance_tasks_another_replica_created(
    settings_factory: SettingsFactory, fake_provider: FakeProvider
) -> None:
    agent = agent_id()
    # the first replica runs no jobs; V2 is enabled there, so it wants the V2 index of 8 dimensions
    front = http_settings(
        settings_factory,
        fake_provider,
        indexer_concurrency=0,
        v2_namespace_ids=[agent],
        embeddings_dimensions=8,
    )
    back = front.model_copy(update={"indexer_concurrency": 2, "v2_namespace_ids": []})
    async with running_app(front) as a, running_app(back) as b:
        a_jobs, b_jobs = jobs_of(a), jobs_of(b)
        assert a_jobs.worker is None and b_jobs.worker is not None
        assert "v2-hnsw-index-8" in resources(a).maintenance.registry
        name = b_jobs.worker.name

        async def maintenance_job(task: str) -> Any:
            rows = await a_jobs.service.list_jobs(kind=MAINTENANCE, limit=1000)
            return next((r for r in rows if r.payload == {"task": task}), None)

        index_job = await until(lambda: maintenance_job("v2-hnsw-index-8"), "the index task scheduled")

        async def index_done() -> Any:
            row = await a_jobs.service.get(index_job.id)
            return row if row is not None and row.status == "done" else None

        row = await until(index_done, "the V2 index task run by the other replica", within=120)
        # the other replica built the task from its name: no failure, no parked job
        assert (
            row.worker == name
            and row.failures == 0
            and row.result == {"progress": "ragoverlay_v2_hnsw_8 valid"}
        )
        assert resources(b).maintenance.registry.status("v2-hnsw-index-8").state == "done"

        # a task no replica of this version knows is released for another one, never failed
        unknown = await a_jobs.service.ensure_periodic(
            MAINTENANCE, {"task": "from-a-newer-release"}, key="maintenance:x", period_s=60, retry_s=60
        )

        async def released() -> Any:
            row = await a_jobs.service.get(unknown.id)
            assert row is not None
            return (
                row if row.db_now is not None and (row.run_after - row.db_now).total_seconds() > 30 else None
            )

        row = await until(released, "the unknown task released")
        assert (row.status, row.attempts, row.failures, row.runs, row.last_error) == ("queued", 0, 0, 0, None)

        # uploads and a reindex sent to the first replica are indexed by the second
        r = await upload(
            a, new_id("doc"), "a.txt", b"The K 7 valve opens at 3.5 bar.", auth("u"), entity_id=agent
        )
        assert r.status_code == 200
        done = await reindex(a, agent)
        late = new_id("late")
        r = await upload(a, late, "b.txt", b"The K 9 valve opens at 4.5 bar.", auth("u"), entity_id=agent)
        assert r.status_code == 200
        # an upload into a namespace with an open run is staged with the upload itself, on the
        # replica that took it: searchable in both indexes when /embed answers, no job needed
        assert r.json()["evidence"]["searchable"] is True, r.json()
        body = await run_of(a, done["run"]["run_id"])
        assert [f["state"] for f in body["files"] if f["file_id"] == late] == ["staged"]
        assert body["run"]["status"] == "active" and body["run"]["expected_files"] == 2
        ran = await a_jobs.service.list_jobs(kind="v2-index-file", limit=1000)
        assert not [j for j in ran if j.payload["file_id"] == late]
        assert all(j.worker == name for j in ran if j.payload["owner"] == agent)


async def run_sweep_now(client: httpx.AsyncClient) -> JobRow:
    """Make the periodic sweep due now and wait for its pass."""
    system = jobs_of(client)
    (job,) = await system.service.list_jobs(kind=REEMBED_MISSING)
    passes = job.runs
    await resources(client).pool.execute(
        "UPDATE ragoverlay_jobs SET run_after = now() WHERE id = $1 AND status = 'queued'", job.id
    )
    assert system.worker is not None
    system.worker.wake()

    async def passed() -> Any:
        row = await system.service.get(job.id)
        return row if row is not None and row.runs > passes else None

    row: JobRow = await until(passed, "a sweep pass")
    return row


async def test_chunks_staged_while_the_provider_fails_are_found_lexically_then_healed_by_the_sweep(
    settings_factory: SettingsFactory, fake_provider: FakeProvider
) -> None:
    agent = agent_id()
    settings = http_settings(settings_factory, fake_provider, v2={"index": {"http_window_chars": 300}})
    async with running_app(settings) as client:
        long_text = " ".join(
            f"Sentence {i} says the valve V {i} opens at {i}.5 bar and closes again at {i} bar."
            for i in range(40)
        )
        file_id = new_id("valves")
        r = await upload(client, file_id, "valves.txt", long_text.encode(), auth("owner"), entity_id=agent)
        assert r.status_code == 200

        def refuse(request: RecordedRequest) -> Reply:
            return Reply(status=400, json={"error": {"message": "bad request"}})

        fake_provider.handler = refuse
        body = await reindex(client, agent)
        (entry,) = body["files"]
        assert entry["state"] == "staged" and entry["chunks"] > 1
        chunks = entry["chunks"]
        res = resources(client)
        async with res.pool.acquire() as conn:
            document = await conn.fetchrow(
                "SELECT d.document_id, d.vectors_missing, d.embedding_error FROM ragoverlay_v2_documents d "
                "JOIN ragoverlay_v2_run_files rf ON rf.document_id = d.document_id "
                "WHERE rf.run_id = $1",
                body["run"]["run_id"],
            )
            assert document["vectors_missing"] == chunks and document["embedding_error"]
            # the lexical channel finds the chunks: their postings are written without a vector
            found = await conn.fetchval(
                "SELECT count(*) FROM ragoverlay_v2_chunks c "
                "WHERE c.document_id = $1 AND c.embedding IS NULL AND EXISTS (SELECT 1 "
                "FROM ragoverlay_v2_postings p WHERE p.document_id = c.document_id "
                "AND p.ordinal = c.ordinal AND p.term = ANY (ARRAY['v', '17']))",
                document["document_id"],
            )
            assert found >= 1
            # sized for an HTTP provider: characters against RAG_V2__INDEX__HTTP_WINDOW_CHARS
            lengths = await conn.fetch(
                "SELECT length(embed_text) AS n, tokens FROM ragoverlay_v2_chunks WHERE document_id = $1",
                document["document_id"],
            )
            assert all(r["n"] == r["tokens"] <= 300 for r in lengths)
        status = (await client.get("/admin/status", headers=admin())).json()
        assert status["missing_vectors"]["v2"] == {"documents": 1, "chunks": chunks}
        assert status["documents_missing_vectors"] == 1

        # still down: the sweep's pass fails (retried later), nothing changes
        failed = await run_sweep_now(client)
        assert failed.last_error and failed.status == "queued" and failed.result is None
        assert (await client.get("/admin/status", headers=admin())).json()["documents_missing_vectors"] == 1

        fake_provider.handler = None
        healed = await run_sweep_now(client)
        assert healed.last_error is None and healed.result is not None
        (v2,) = [s for s in healed.result["stores"] if s["store"] == "v2"]
        assert (v2["missing_before"], v2["stored"], v2["skipped"]) == (chunks, chunks, 0)
        status = (await client.get("/admin/status", headers=admin())).json()
        assert status["missing_vectors"]["v2"] == {"documents": 0, "chunks": 0}
        assert status["documents_missing_vectors"] == 0
        async with res.pool.acquire() as conn:
            after = await conn.fetchrow(
                "SELECT vectors_missing, embedding_error FROM ragoverlay_v2_documents WHERE document_id = $1",
                document["document_id"],
            )
            assert (after["vectors_missing"], after["embedding_error"]) == (0, None)
            vectors = await conn.fetch(
                "SELECT embedding FROM ragoverlay_v2_chunks WHERE document_id = $1", document["document_id"]
            )
            assert all(v["embedding"] is not None for v in vectors)


async def test_scripts_v2_backfill_queues_the_jobs_runs_them_and_reports_progress(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(indexer_concurrency=0)  # the command's own worker does the work
    agent = agent_id()
    async with running_app(settings) as client:
        for n in range(2):
            r = await upload(
                client,
                new_id("doc"),
                f"d{n}.md",
                f"# Doc {n}\n\nUnit K {n} needs {n}.5 bar.\n".encode(),
                auth("owner"),
                entity_id=agent,
            )
            assert r.status_code == 200
        env = {
            **env_without_ragoverlay(),
            "DATABASE_URL": str(settings.database_url),
            "COLLECTION_NAME": settings.collection_name,
            "DATA_DIR": str(settings.data_dir),
            "EMBEDDINGS_PROVIDER": "local",
            "RAG_V2_NAMESPACE_IDS": f"{agent},agent_other",
        }
        script = Path(__file__).resolve().parents[2] / "scripts" / "v2-backfill"

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(script), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=ceiling(300),
                check=False,
            )

        # a namespace V2 is not enabled for: refused before anything is opened, parsed or embedded
        # (before, it was indexed, the command exited 0, and /query_v2 then answered 403)
        refused = await asyncio.to_thread(run, "agent_not_listed")
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert refused.stderr.strip() == (
            "v2-backfill: V2 is not enabled for agent_not_listed: RAG_V2_NAMESPACE_IDS does not list it "
            f"(it lists {agent}, agent_other), so /query_v2 would answer 403 and never read the index. "
            "Add agent_not_listed to RAG_V2_NAMESPACE_IDS where the service and this command read it "
            "(.env, or the environment of both: RAG_V2_NAMESPACE_IDS=agent_not_listed scripts/v2-backfill "
            "agent_not_listed), restart the service, then run this again"
        )
        assert [
            j for j in await jobs_of(client).service.list_jobs(limit=1000) if j.kind == "v2-backfill"
        ] == []
        done = await asyncio.to_thread(run, agent)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "2 of 2 files staged" in done.stderr and "active" in done.stdout
        run_id = int(done.stdout.split()[1])
        status = await asyncio.to_thread(run, "--status", str(run_id))
        assert status.returncode == 0 and json.loads(status.stdout)["counts"]["staged"] == 2
        again = await asyncio.to_thread(run, "--resume", str(run_id), "--json")  # active: nothing to do
        assert again.returncode == 0 and json.loads(again.stdout)["status"] == "active"
        assert (await asyncio.to_thread(run)).returncode == 2  # nothing to do: a usage error
        ctx = resources(client).evidence.parts.context
        assert ctx is not None
        async with ctx.pool.acquire() as conn:
            active = await run_store.active_run(conn, ctx.info.collection_id, agent)
        assert active is not None and active.run_id == run_id
        # the work went through the service's queue: one plan and one stage job per file
        kinds = [
            j.kind for j in await jobs_of(client).service.list_jobs(limit=1000) if j.kind.startswith("v2-")
        ]
        assert sorted(kinds) == ["v2-backfill", "v2-index-file", "v2-index-file"]
