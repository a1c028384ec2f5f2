"""The backfill as plain functions (what the job queue will run): resumable after a crash, repeated site
menus found across a namespace, and an embedding provider outage that stores chunks without vectors
for the re-embed sweep. The provider is the fake OpenAI-compatible server on a real socket."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.config import Settings
from app.ingest.v2 import runs
from app.store import v2_index as store
from app.store.scope import Scope
from tests.contract.helpers import agent_id, upload
from tests.fixtures.fake_providers import FakeProvider, RecordedRequest, Reply
from tests.fixtures.service import auth, env_without_ragoverlay, new_id, resources, running_app

pytestmark = pytest.mark.slow

MENU = "Products · Services · About us · Contact · Careers"


def page(n: int) -> bytes:
    """A site page: a menu that is not marked up as navigation (only repetition gives it away)."""
    return (
        f"<html><head><title>Page {n}</title></head><body><p>{MENU}</p><h1>Topic {n}</h1>"
        f"<p>Unit K {20 + n} runs at {n}.5 kW and weighs {n + 3} kg; see section {n} of the manual.</p>"
        "</body></html>"
    ).encode()


async def test_a_crashed_backfill_resumes_and_repeated_menus_reach_no_chunk(
    settings_factory: Callable[..., Settings],
) -> None:
    agent = agent_id()
    async with running_app(settings_factory()) as client:
        ctx = resources(client).v2
        assert ctx is not None
        files = [new_id("page") for _ in range(6)]
        for n, file_id in enumerate(files):
            r = await upload(client, file_id, f"page{n}.html", page(n), auth("site-owner"), entity_id=agent)
            assert r.status_code == 200
        run = await runs.start_run(ctx, namespace=agent, origin="backfill", options={"activate": True})
        first = asyncio.create_task(runs.resume_backfill(ctx, run.run_id))
        deadline = time.monotonic() + 120
        while True:  # the "crash": stop the backfill once the first file is staged
            status = await runs.run_status(ctx, run.run_id)
            if status.counts["staged"] >= 1 or first.done():
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        interrupted = await runs.run_status(ctx, run.run_id)
        assert interrupted.run.status == "running" and interrupted.counts["staged"] < len(files)
        progress = await runs.resume_backfill(ctx, run.run_id)
        assert progress.run.status == "active" and progress.staged == len(files) and progress.failed == 0
        async with ctx.pool.acquire() as conn:
            chunks = await store.run_chunks(
                conn, Scope.of(ctx.info.collection_id, [agent]), run.run_id, limit=999
            )
            removed = await conn.fetch(
                "SELECT metadata->'stats'->'boilerplate_by_kind' AS kinds FROM ragoverlay_v2_documents "
                "WHERE owner = $1",
                agent,
            )
        assert {c.file_id for c in chunks} == set(files)
        assert not any("Careers" in c.content or "Careers" in c.embed_text for c in chunks)
        assert all('"repeated": 1' in r["kinds"] for r in removed)
        assert any("K 25 runs at 5.5 kW" in c.content for c in chunks)
        # a resumed run that is already active does nothing more
        again = await runs.resume_backfill(ctx, run.run_id)
        assert again.run.status == "active" and again.staged == len(files)


async def test_a_provider_outage_stores_chunks_without_vectors_for_the_sweep(
    settings_factory: Callable[..., Settings], fake_provider: FakeProvider
) -> None:
    settings = settings_factory(
        embeddings_provider="openai",
        openai_api_key="sk-test",
        openai_base_url=fake_provider.url + "/v1/",
        embedding_max_retries=0,
        v2_http_window_chars=300,
    )
    agent = agent_id()
    async with running_app(settings) as client:
        ctx = resources(client).v2
        assert ctx is not None
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
        progress = await runs.backfill_namespace(ctx, agent)
        fake_provider.handler = None
        assert progress.run.status == "active" and progress.staged == 1
        (outcome,) = progress.files
        assert outcome.vectors_missing == outcome.chunks > 1 and outcome.embedded == 0
        async with ctx.pool.acquire() as conn:
            document = await conn.fetchrow(
                "SELECT vectors_missing, embedding_error FROM ragoverlay_v2_documents WHERE document_id = $1",
                outcome.document_id,
            )
            assert document["vectors_missing"] == outcome.chunks and document["embedding_error"]
            missing = await store.chunks_missing_vectors(conn, ctx.info.collection_id)
            assert len(missing) == outcome.chunks
            # the lexical channel still finds the chunk: its terms are indexed without a vector
            found = await conn.fetchval(
                "SELECT count(*) FROM ragoverlay_v2_chunks c WHERE c.document_id = $1 "
                "AND c.search_vector @@ ragoverlay_v2_any_terms(ARRAY['v', '17'])",
                outcome.document_id,
            )
            assert found >= 1
            # chunks for an HTTP provider are measured in characters against RAG_V2_HTTP_WINDOW_CHARS
            lengths = await conn.fetch(
                "SELECT length(embed_text) AS n, tokens FROM ragoverlay_v2_chunks WHERE document_id = $1",
                outcome.document_id,
            )
            assert all(r["n"] == r["tokens"] <= 300 for r in lengths)
        # the provider is back: the sweep embeds what is missing
        assert await runs.reembed_missing(ctx) == outcome.chunks
        async with ctx.pool.acquire() as conn:
            assert await store.chunks_missing_vectors(conn, ctx.info.collection_id) == []
            assert (
                await conn.fetchval(
                    "SELECT vectors_missing FROM ragoverlay_v2_documents WHERE document_id = $1",
                    outcome.document_id,
                )
                == 0
            )


async def test_scripts_v2_backfill_builds_an_active_run(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory()
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
        }
        script = Path(__file__).resolve().parents[2] / "scripts" / "v2-backfill"

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(script), *args], env=env, capture_output=True, text=True, timeout=300, check=False
            )

        done = await asyncio.to_thread(run, agent, "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert summary["status"] == "active" and summary["staged"] == summary["expected"] == 2
        status = await asyncio.to_thread(run, "--status", str(summary["run_id"]))
        assert status.returncode == 0 and json.loads(status.stdout)["counts"]["staged"] == 2
        assert (await asyncio.to_thread(run)).returncode == 2  # nothing to do: a usage error
        # the running service sees the run the command activated
        r = await client.get("/v2/status", headers=auth("owner"))
        assert r.status_code == 403
        ctx = resources(client).v2
        assert ctx is not None
        async with ctx.pool.acquire() as conn:
            active = await store.active_run(conn, ctx.info.collection_id, agent)
        assert active is not None and active.run_id == summary["run_id"]
