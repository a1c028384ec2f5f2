"""An upload that stops before its commit loses none of the vectors it embedded (embedding checkpoints).

The embedding provider is the fake OpenAI server on a real socket; the upload runs as a job of the
real queue on the real PostgreSQL, and its first attempt is stopped by the job deadline while a
request hangs. The retry must send the provider only what the first attempt had not embedded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.config import Settings
from app.ingest.pipeline import SourceFile
from app.jobs.uploads import Queued
from app.services import build_services
from app.store import checkpoints
from tests.fixtures.fake_providers import FakeProvider, Reply
from tests.fixtures.service import new_id

# 40 short paragraphs: about 20 chunks at CHUNK_SIZE 200, three requests of 8 texts
PARAGRAPHS = [
    f"Paragraph {n}: the pump P{n} runs at {n * 10} litres per minute in stage {n % 7}." for n in range(40)
]


def sent_texts(provider: FakeProvider, *, skip: int | None = None) -> list[str]:
    """Every text the provider received in a request it answered (request `skip` left out)."""
    return [
        text
        for n, request in enumerate(provider.requests)
        if n != skip and request.path.endswith("/embeddings")
        for text in provider.texts_of(request)
    ]


async def test_a_job_stopped_by_its_deadline_resumes_where_its_embedding_stopped(
    settings_factory: Callable[..., Settings], fake_provider: FakeProvider, tmp_path: Path
) -> None:
    settings = settings_factory(
        embeddings_provider="openai",
        embeddings_model="embed-small",
        openai_api_key="sk-embed",
        openai_base_url=fake_provider.url + "/v1",
        embedding_max_retries=0,
        embedding_batch_size=8,
        embedding_concurrency=1,
        chunk_size=200,
        chunk_overlap=0,
        # the first attempt's third request hangs past the deadline (generous: a busy machine must
        # not reach it otherwise); the retry follows at once
        indexer_job_timeout_ms=15_000,
        indexer_retry_base_ms=100,
        db_check_interval_s=3600,
    )
    text = "\n\n".join(PARAGRAPHS).encode()
    path = tmp_path / "pumps.txt"
    path.write_bytes(text)
    source = SourceFile(path, "pumps.txt", "text/plain", len(text), hashlib.sha256(text).hexdigest())
    fake_provider.script(Reply(), Reply(), Reply(delay=60.0))
    async with contextlib.AsyncExitStack() as stack:
        services = await build_services(settings, stack)
        owner = new_id("user")
        queued = await services.jobs.uploads.accept(
            source, file_id=new_id(), owner=owner, uploader=owner, background=True
        )
        assert isinstance(queued, Queued)
        row: Any = None
        ceiling = time.monotonic() + 300  # generous: the machine may be busy
        while row is None or row.status not in ("done", "failed"):
            assert time.monotonic() < ceiling, f"the upload's job never finished: {row}"
            await asyncio.sleep(0.1)
            row = await services.jobs.service.get(queued.job_id)
        assert row.status == "done", row
        assert row.attempts >= 2, "the first attempt was meant to stop at its deadline"
        chunks = row.result["chunks"]
        assert chunks > 2 * 8  # more than the two batches the first attempt had kept
        # the hung request (the third) never answered: everything else was embedded exactly once
        answered = sent_texts(fake_provider, skip=2)
        assert len(answered) == len(set(answered)) == chunks
        # the commit took the checkpoints it used with it
        async with services.pool.acquire() as conn:
            left = await checkpoints.load(
                conn,
                services.info.collection_id,
                services.ingest.model_id,
                [hashlib.sha256(t.encode()).hexdigest() for t in answered],
            )
        assert left == {}
