"""The job queue's pure parts: retry policy, kinds and payloads, error views, the sweep's loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from app.config import load_settings
from app.config_sections import JobSettings
from app.evidence.index.context import V2Context
from app.evidence.jobs import V2Jobs
from app.evidence.kinds import V2Backfill, V2IndexFile, register_v2
from app.jobs.kinds import IndexUpload
from app.jobs.policy import (
    RetryPolicy,
    after_failure,
    heartbeat_interval_s,
    stale_timeout_warning,
    sweep_interval_s,
)
from app.jobs.registry import JobRegistry, PermanentJobError, Progress
from app.jobs.schemas import public_error
from app.jobs.setup import retry_policy
from app.jobs.sweep import sweep_missing_vectors, usable
from app.jobs.uploads import upload_key, wants_job
from app.store.missing_vectors import MissingChunk, MissingCount


def test_the_issues_defaults() -> None:
    s = load_settings(_env_file=None)
    assert (s.indexer_concurrency, s.indexer_retry_max, s.indexer_retry_base_ms, s.indexer_retry_max_ms) == (
        4,
        3,
        5000,
        300_000,
    )
    assert (s.indexer_job_timeout_ms, s.indexer_stale_timeout_s, s.embed_async_over_bytes) == (
        600_000,
        1800,
        0,
    )
    assert stale_timeout_warning(s.indexer_stale_timeout_s) is None


def test_backoff_is_base_times_two_to_the_attempt_minus_one_capped() -> None:
    policy = retry_policy(JobSettings.from_settings(load_settings(_env_file=None)))
    assert policy.max_attempts == 4
    assert [policy.delay_s(a) for a in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert policy.delay_s(10_000) == 300  # no overflow however many attempts


def test_a_failed_attempt_retries_until_the_attempts_are_spent_or_parks_when_permanent() -> None:
    policy = RetryPolicy(retry_max=3, base_ms=5000, max_ms=300_000)
    assert [
        after_failure(policy, attempt=a, max_attempts=4, permanent=False).outcome for a in (1, 2, 3, 4)
    ] == [
        "retry",
        "retry",
        "retry",
        "failed",
    ]
    assert after_failure(policy, attempt=2, max_attempts=4, permanent=False).delay_s == 10
    assert after_failure(policy, attempt=1, max_attempts=4, permanent=True).outcome == "failed"


def test_a_stale_timeout_a_cut_off_worker_could_outlive_is_warned_about() -> None:
    # A worker cut off from the database notices at its next heartbeat (every stale/4 s, at most
    # 30 s) plus the lease's 30 s statement timeout: 40 s -> 10 + 30, not above; 41 -> 10.25 + 30.
    warning = stale_timeout_warning(40)
    assert warning is not None and "INDEXER_STALE_TIMEOUT (40 s) is not above the 40 s" in warning
    assert stale_timeout_warning(41) is None
    # below the job timeout is fine now: the deadline is pushed out while a run progresses, so it
    # bounds no run's age, and the stale timeout need not exceed it
    assert stale_timeout_warning(300) is None
    assert (
        heartbeat_interval_s(1800) == 30 and heartbeat_interval_s(1) == 0.5 and heartbeat_interval_s(8) == 2
    )
    assert sweep_interval_s(1800) == 60 and sweep_interval_s(2) == 1


async def _noop(payload: dict[str, Any], progress: Progress) -> None:
    return None


def test_a_payload_that_does_not_fit_its_kind_is_a_permanent_failure() -> None:
    registry = JobRegistry()
    kind = registry.register("v2-index-file", _noop, payload=V2IndexFile)
    assert kind.parse({"file_id": "f", "owner": "agent_x"}) == {
        "file_id": "f",
        "owner": "agent_x",
        "run_id": None,
        "survey": False,
        "after_survey": False,
    }
    with pytest.raises(PermanentJobError, match="does not fit kind v2-index-file"):
        kind.parse({"file_id": "f"})
    with pytest.raises(PermanentJobError):
        kind.parse({"file_id": "f", "owner": "o", "surprise": 1})
    with pytest.raises(ValueError, match="registered already"):
        registry.register("v2-index-file", _noop)
    with pytest.raises(PermanentJobError):
        registry.register("upload", _noop, payload=IndexUpload).parse({"file_id": "f", "sha256": "nope"})


async def test_the_v2_functions_plug_in_as_kinds() -> None:
    registry = JobRegistry()
    got: list[object] = []

    async def index_file(payload: V2IndexFile, progress: Progress) -> dict[str, Any]:
        got.append(payload)
        return {"chunks": 3}

    async def backfill(payload: V2Backfill, progress: Progress) -> None:
        got.append(payload)

    register_v2(registry, index_file=index_file, backfill=backfill)
    assert registry.names() == ["v2-index-file", "v2-backfill"]
    spec = registry.get("v2-backfill")
    assert spec is not None
    await spec.handler(spec.parse({"namespace": "agent_1"}), lambda done, total=None, note=None: None)
    spec = registry.get("v2-index-file")
    assert spec is not None
    result = await spec.handler(
        spec.parse({"file_id": "f", "owner": "u"}), lambda done, total=None, note=None: None
    )
    assert result == {"chunks": 3}
    assert got == [V2Backfill(namespace="agent_1"), V2IndexFile(file_id="f", owner="u")]


def test_callers_see_only_the_services_own_error_sentences() -> None:
    assert public_error(None) is None
    assert (
        public_error("deadline: the job made no progress for ...")
        == "deadline: the job made no progress for ..."
    )
    assert public_error("NoExtractableText: The file has no extractable text") is not None
    leaky = public_error("UndefinedTableError: relation secret_table does not exist")
    assert leaky is not None and "secret_table" not in leaky and "admin" in leaky


def test_uploads_become_jobs_only_when_asked_or_over_the_set_size() -> None:
    default = load_settings(_env_file=None)
    assert not wants_job(default, asked=False, size=10**9)  # LibreChat's /embed stays synchronous
    assert wants_job(default, asked=True, size=1)
    sized = load_settings(_env_file=None, embed_async_over_bytes=1000)
    assert wants_job(sized, asked=False, size=1001) and not wants_job(sized, asked=False, size=1000)
    assert upload_key("agent_a", "f") != upload_key("agent_a\x1ff", "")


def test_a_vector_joins_a_document_only_with_its_dimension_and_model() -> None:
    v = np.zeros(4, dtype=np.float32)
    assert usable(None, None, v, "local:m") and usable(4, "local:m", v, "local:m")
    assert not usable(8, None, v, "local:m") and not usable(4, "openai:x", v, "local:m")


class ListStore:
    """MissingVectorStore in memory."""

    def __init__(self, name: str, chunks: list[MissingChunk]) -> None:
        self.name = name
        self.chunks = {c.key: c for c in chunks}
        self.vectors: dict[str, np.ndarray] = {}

    async def count_missing(self) -> MissingCount:
        left = [c for k, c in self.chunks.items() if k not in self.vectors]
        return MissingCount(len({c.key[0] for c in left}), len(left))

    async def list_missing(self, *, after: str | None, limit: int) -> list[MissingChunk]:
        keys = sorted(k for k in self.chunks if k not in self.vectors and (after is None or k > after))
        return [self.chunks[k] for k in keys[:limit]]

    async def set_vectors(self, vectors: Sequence[tuple[str, np.ndarray]]) -> int:
        self.vectors.update(vectors)
        return len(vectors)


class Embedder:
    provider = "fake"
    model = "m"
    dimensions = 4

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return np.ones((len(texts), 4), dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


async def test_the_sweep_embeds_in_batches_and_skips_what_cannot_join_its_document() -> None:
    chunks = [MissingChunk(f"a{i:03d}", f"text {i}") for i in range(10)]
    chunks += [MissingChunk("b000", "   "), MissingChunk("b001", "other dims", dims=8)]
    chunks += [MissingChunk("b002", "other model", dims=4, model="openai:big")]
    store = ListStore("v2", chunks)
    embedder = Embedder()
    seen: list[tuple[int, int | None]] = []
    report = await sweep_missing_vectors(
        [store], embedder, model="fake:m", batch=4, progress=lambda d, t=None, n=None: seen.append((d, t))
    )
    assert report.stored == 10 and set(store.vectors) == {f"a{i:03d}" for i in range(10)}
    assert report.stores[0].skipped == 3 and report.stores[0].missing_before == 13
    assert embedder.batches == [4, 4, 3, 1]  # the blank text is never sent
    assert seen[0] == (0, 13) and seen[-1] == (13, 13)
    again = await sweep_missing_vectors([store], embedder, model="fake:m", max_chunks=2)
    assert again.stored == 0 and again.stores[0].skipped == 2  # bounded per pass


class FailingQueue:
    """A job service whose database is away."""

    def __init__(self) -> None:
        self.calls = 0

    async def enqueue(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise OSError("connection refused")


async def test_queueing_the_v2_staging_of_an_upload_never_fails_the_upload() -> None:
    settings = load_settings(_env_file=None, v2_namespace_ids=["agent_on"])
    ctx = V2Context(settings, None, None, None, None)  # type: ignore[arg-type]
    queue = FailingQueue()
    jobs = V2Jobs(ctx, queue)  # type: ignore[arg-type]
    await jobs.note_upload("f1", "agent_off")  # not an enabled namespace: nothing is queued
    assert queue.calls == 0
    await jobs.note_upload("f1", "agent_on")  # the queue fails: logged, not raised
    assert queue.calls == 1
