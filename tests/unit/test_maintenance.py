"""Named maintenance tasks and their registry, against a stand-in for the database side (pure)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from app.config import load_settings
from app.config_sections import VectorIndexSettings
from app.maintenance import namespace_task, tasks
from app.maintenance.namespace_task import NAMESPACE_INDEXES, NEXT_BUILD_SECONDS
from app.maintenance.registry import MaintenanceRegistry, MaintenanceTask, Pass, Report
from app.maintenance.tasks import (
    CATALOGUE,
    CHECKPOINTS,
    HNSW_PREFIX,
    PENDING_REFRESH_SECONDS,
    VECTOR_COPY,
    Maintenance,
)
from app.search.state import SearchState
from app.store.build_lock import TURN_SECONDS
from app.store.catalogue import CatalogueFile, CatalogueSnapshot
from app.store.db import StoreInfo
from app.store.namespace_index import NamespaceSize, namespace_index_name
from app.store.vector_index import BuildOutcome, IndexSpec
from tests.fixtures.patience import ceiling


class FakeStore:
    """MaintenanceStore's interface, in memory, recording what was asked of it."""

    def __init__(self) -> None:
        self.info = StoreInfo(uuid.uuid4(), "c", "jsonb")
        self.calls: list[str] = []
        self.state = "backfilling"
        self.index = "missing"
        self.build_results: list[BuildOutcome] = ["valid"]
        self.namespace_outcome: BuildOutcome = "valid"
        self.fail_catalogue_backfill = False
        self.repairs: tuple[int, int] | None = (0, 0)

    async def backfill_catalogue(self) -> int:
        self.calls.append("backfill_catalogue")
        if self.fail_catalogue_backfill:
            raise asyncpg.PostgresError("no such table")
        return 2

    async def prune_checkpoints(self) -> int:
        self.calls.append("prune_checkpoints")
        return 3

    async def read_catalogue(self) -> CatalogueSnapshot:
        self.calls.append("read_catalogue")
        return CatalogueSnapshot(1, 3, 384, [CatalogueFile("f", "me", "me", 3)], 3.0)

    async def copy_state(self) -> str:
        self.calls.append("copy_state")
        return self.state

    async def backfill_copy(self) -> int | None:
        self.calls.append("backfill_copy")
        self.state = "ready"
        return 10

    async def reconcile_copy(self) -> tuple[int, int] | None:
        self.calls.append("reconcile_copy")
        return self.repairs

    async def index_state(self, spec: IndexSpec) -> str:
        self.calls.append(f"index_state {spec.dims}")
        return self.index

    async def build_index(self, spec: IndexSpec, **kwargs: Any) -> BuildOutcome:
        self.calls.append(f"build_index {spec.dims}")
        return self.build_results.pop(0)

    async def ensure_walk(self, spec: IndexSpec) -> bool:
        self.calls.append(f"ensure_walk {spec.dims}")
        return True

    # namespace indexes: `sizes` as the catalogue would count them, `namespaces` name -> valid
    sizes: list[NamespaceSize] = []  # noqa: RUF012 - replaced per test, never mutated
    namespaces: dict[str, bool] = {}  # noqa: RUF012

    async def namespace_sizes(self, min_rows: int) -> list[NamespaceSize]:
        self.calls.append("namespace_sizes")
        return [s for s in self.sizes if s.rows >= min_rows]

    async def namespace_indexes(self) -> dict[str, bool]:
        self.calls.append("namespace_indexes")
        return dict(self.namespaces)

    async def build_namespace_index(self, size: NamespaceSize, **kwargs: Any) -> BuildOutcome:
        self.calls.append(f"build_namespace_index {size.owner}")
        if self.namespace_outcome == "valid":
            self.namespaces = {
                **self.namespaces,
                namespace_index_name(self.info.collection_id, size.owner, size.dims): True,
            }
        return self.namespace_outcome

    async def drop_namespace_index(self, name: str) -> bool:
        self.calls.append("drop_namespace_index")
        if self.namespace_outcome == "table-busy":
            return False
        self.namespaces = {n: v for n, v in self.namespaces.items() if n != name}
        return True

    async def ensure_namespace_walk(self, dims: int) -> bool:
        self.calls.append(f"ensure_namespace_walk {dims}")
        return True


def maintenance(store: FakeStore, **settings: Any) -> Maintenance:
    indexes = VectorIndexSettings.from_settings(load_settings(_env_file=None, **settings))
    # tasks registered, not looping: each test runs the passes itself
    return Maintenance(indexes, store, SearchState(), MaintenanceRegistry(run_loops=False))  # type: ignore[arg-type]


async def test_every_task_has_a_name_and_a_status_in_one_place() -> None:
    store = FakeStore()
    m = maintenance(store)
    m.start(384)
    assert m.registry.names() == [CATALOGUE, VECTOR_COPY, NAMESPACE_INDEXES, CHECKPOINTS, f"{HNSW_PREFIX}384"]
    assert [s.state for s in m.registry.statuses()] == ["waiting"] * 5
    m.want_index(384)  # the same dimension again: no second task
    assert len(m.registry.names()) == 5
    # the checkpoint prune: one statement, its count in the status
    pruned = await m.registry.run_once(CHECKPOINTS)
    assert store.calls == ["prune_checkpoints"] and pruned.progress == "3 old checkpoints removed"
    store.calls.clear()

    first = await m.registry.run_once(CATALOGUE)
    assert first.progress == "1 files, 3 chunks"
    assert store.calls == ["backfill_catalogue", "read_catalogue"]
    status = m.registry.status(CATALOGUE)
    assert (status.state, status.runs, status.last_error) == ("idle", 1, None)
    assert status.last_run is not None and status.last_duration_s is not None
    assert m.state.catalogue_ready.is_set() and m.state.stats.estimate(["f"], ["me"]) == 3
    await m.registry.run_once(CATALOGUE)  # the backfill runs once per process
    assert store.calls.count("backfill_catalogue") == 1 and store.calls.count("read_catalogue") == 2


async def test_vector_copy_backfills_then_reconciles() -> None:
    store = FakeStore()
    m = maintenance(store)
    m.start(None)
    result = await m.registry.run_once(VECTOR_COPY)
    assert (result.progress, result.done) == ("ready", False)
    assert store.calls == ["copy_state", "backfill_copy", "copy_state", "reconcile_copy"]
    assert m.state.use_copy and m.state.copy_ready.is_set()
    store.repairs = (3, 1)
    assert "repaired 3 added, 1 removed" in (await m.registry.run_once(VECTOR_COPY)).progress
    store.state = "disabled"
    result = await m.registry.run_once(VECTOR_COPY)
    assert result.done and not m.state.use_copy
    assert m.registry.status(VECTOR_COPY).state == "done"


async def test_hnsw_task_waits_for_the_copy_and_makes_the_index_usable() -> None:
    store = FakeStore()
    m = maintenance(store)
    m.start(384)
    name = f"{HNSW_PREFIX}384"
    waiting = asyncio.create_task(m.registry.run_once(name))
    await asyncio.sleep(0.01)
    assert not waiting.done() and m.registry.status(name).progress == "waiting for the vector copy"
    m.state.set_copy_state("ready")
    store.build_results = ["busy"]  # another replica holds the build lock
    result = await waiting
    assert (result.done, result.again_in) == (False, 30.0)
    assert m.state.walk(384) is None
    store.index = "valid"  # built by the other replica: create the walk, done
    result = await m.registry.run_once(name)
    assert result.done and m.state.walk(384) == "ragoverlay_vec_walk_384"
    assert store.calls[-2:] == ["index_state 384", "ensure_walk 384"]


async def test_an_index_pass_gives_its_slot_back_when_the_copy_is_not_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(namespace_task, "COPY_WAIT_SECONDS", 0.01)
    store = FakeStore()
    m = maintenance(store)
    m.start(384)
    result = await m.registry.run_once(f"{HNSW_PREFIX}384")
    assert (result.done, result.again_in, result.progress) == (False, 30.0, "waiting for the vector copy")
    assert "build_index 384" not in store.calls
    store.state = "ready"  # another replica filled it: the database says so, the pass goes on
    result = await m.registry.run_once(f"{HNSW_PREFIX}384")
    assert result.done and m.state.copy_ready.is_set() and "build_index 384" in store.calls


async def test_with_the_queue_new_tasks_are_handed_over_instead_of_looping() -> None:
    added: list[str] = []
    registry = MaintenanceRegistry(run_loops=False, on_add=lambda task: added.append(task.name))
    m = Maintenance(VectorIndexSettings(), FakeStore(), SearchState(), registry)  # type: ignore[arg-type]
    m.start(384)
    m.want_index(768)
    assert added == [
        CATALOGUE,
        VECTOR_COPY,
        NAMESPACE_INDEXES,
        CHECKPOINTS,
        f"{HNSW_PREFIX}384",
        f"{HNSW_PREFIX}768",
    ]
    assert registry.task(VECTOR_COPY).retry_interval == 30.0
    await registry.close()


async def test_refresh_reads_what_another_replica_did() -> None:
    store = FakeStore()
    m = maintenance(store)
    m.start(384)
    store.state, store.index = "ready", "valid"
    await m.refresh()
    assert m.state.use_copy and m.state.walk(384) == "ragoverlay_vec_walk_384"
    assert m.state.catalogue_ready.is_set()
    assert store.calls == [
        "read_catalogue",
        "copy_state",
        "index_state 384",
        "ensure_walk 384",
        "namespace_sizes",
        "namespace_indexes",
    ]
    await m.registry.run_once(CATALOGUE)  # statistics fresh from this process's own pass:
    store.calls.clear()
    await m.refresh()  # not read again, and a known walk is not checked again
    assert store.calls == ["copy_state", "namespace_sizes", "namespace_indexes"]


async def test_no_index_tasks_with_vector_index_none_or_too_many_dimensions() -> None:
    m = maintenance(FakeStore(), vector_index="none")
    m.start(384)
    assert m.registry.names() == [CATALOGUE, VECTOR_COPY, CHECKPOINTS]  # no namespace indexes either
    m = maintenance(FakeStore())
    m.want_index(5000)
    result = await m.registry.run_once(f"{HNSW_PREFIX}5000")
    assert result.done and "more than pgvector can index" in result.progress


async def test_a_failed_pass_is_recorded_and_the_loop_goes_on() -> None:
    calls: list[int] = []

    async def flaky(report: Report) -> Pass:
        calls.append(1)
        report(f"pass {len(calls)}")
        if len(calls) == 1:
            raise OSError("database unreachable")
        if len(calls) == 3:
            return Pass("finished", done=True)
        return Pass()

    registry = MaintenanceRegistry()
    registry.add(MaintenanceTask("flaky", flaky, interval=0.01, retry_interval=0.01))
    for _ in range(200):
        if registry.status("flaky").state == "done":
            break
        await asyncio.sleep(0.01)
    status = registry.status("flaky")
    assert (status.state, status.runs, status.failures, status.progress) == ("done", 3, 1, "finished")
    assert status.last_error == "OSError: database unreachable"
    await asyncio.sleep(0.05)
    assert len(calls) == 3  # done: no further pass
    await registry.close()


async def test_the_catalogue_backfill_failing_still_refreshes_statistics() -> None:
    store = FakeStore()
    store.fail_catalogue_backfill = True
    m = maintenance(store)
    m.start(None)
    result = await m.registry.run_once(CATALOGUE)
    assert "backfill failed" in result.progress and m.state.catalogue_ready.is_set()


async def test_close_stops_every_loop() -> None:
    started = asyncio.Event()

    async def forever(report: Report) -> Pass:
        started.set()
        await asyncio.sleep(3600)
        return Pass()

    registry = MaintenanceRegistry()
    registry.add(MaintenanceTask("forever", forever, interval=1.0))
    await asyncio.wait_for(started.wait(), ceiling(5))
    await asyncio.wait_for(registry.close(), ceiling(5))  # not the pass's hour
    assert registry.status("forever").state == "running"  # the status of the pass that was cut short
    with pytest.raises(KeyError):
        registry.status("nope")


def test_a_task_another_replica_created_is_built_from_its_name() -> None:
    m = maintenance(FakeStore())
    registry = m.registry
    assert registry.resolve(f"{HNSW_PREFIX}384") and registry.task(f"{HNSW_PREFIX}384").interval > 0
    # names no resolver knows (another release's task, a malformed dimension) are not made up
    for name in ("made-up", f"{HNSW_PREFIX}x", f"{HNSW_PREFIX}-3", f"{HNSW_PREFIX}0", f"{HNSW_PREFIX}٣"):
        assert not registry.resolve(name) and name not in registry
    built: list[str] = []

    def other_family(name: str) -> bool:
        if not name.startswith("other-"):
            return False
        built.append(name)
        registry.add(MaintenanceTask(name, _pass, 1.0))
        return True

    registry.add_resolver(other_family)
    assert registry.resolve("other-1") and built == ["other-1"]
    assert registry.resolve("other-1") and built == ["other-1"]  # known now: not built twice
    off = maintenance(FakeStore(), vector_index="none")
    assert not off.registry.resolve(f"{HNSW_PREFIX}384")  # this replica builds no index: not its task


async def _pass(report: Report) -> Pass:
    return Pass()


async def test_namespace_indexes_are_built_one_per_pass_largest_first_and_published() -> None:
    store = FakeStore()
    store.state = "ready"
    store.sizes = [
        NamespaceSize("kb-a", 384, 80_000),
        NamespaceSize("kb-b", 384, 120_000),
        NamespaceSize("s", 384, 900),
    ]
    m = maintenance(store, hnsw_namespace_min_rows=50_000)
    m.start(None)
    first = await m.registry.run_once(NAMESPACE_INDEXES)
    assert "build_namespace_index kb-b" in store.calls and "build_namespace_index kb-a" not in store.calls
    assert first.again_in == NEXT_BUILD_SECONDS  # one more to build: at once
    assert set(m.state.knowledge().namespaces) == {("kb-b", 384)}
    second = await m.registry.run_once(NAMESPACE_INDEXES)
    assert second.again_in is None
    assert set(m.state.knowledge().namespaces) == {("kb-a", 384), ("kb-b", 384)}
    # kb-a shrinks below half the threshold: dropped, and the planner no longer walks it
    store.sizes = [NamespaceSize("kb-a", 384, 5_000), NamespaceSize("kb-b", 384, 120_000)]
    await m.registry.run_once(NAMESPACE_INDEXES)
    assert "drop_namespace_index" in store.calls
    assert set(m.state.knowledge().namespaces) == {("kb-b", 384)}


async def test_an_index_build_whose_table_is_busy_waits_its_turn_without_failing() -> None:
    store = FakeStore()
    store.state = "ready"
    m = maintenance(store)
    m.start(384)
    name = f"{HNSW_PREFIX}384"
    store.build_results = ["table-busy", "valid"]  # another index of ragoverlay_vectors is being built
    result = await m.registry.run_once(name)
    assert (result.done, result.again_in) == (False, TURN_SECONDS)
    status = m.registry.status(name)
    assert status.state == "idle" and status.failures == 0 and status.last_error is None
    assert status.progress == (
        "ragoverlay_vec_hnsw_384: waiting for another index build on ragoverlay_vectors to end"
    )
    assert m.state.walk(384) is None
    result = await m.registry.run_once(name)  # its turn
    assert result.done and m.state.walk(384) == "ragoverlay_vec_walk_384"


async def test_namespace_indexes_wait_for_their_dimensions_global_index() -> None:
    store = FakeStore()
    store.state = "ready"
    store.sizes = [NamespaceSize("kb-a", 384, 80_000), NamespaceSize("kb-b", 768, 90_000)]
    m = maintenance(store, hnsw_namespace_min_rows=50_000)
    m.start(384)  # the global index of 384 dimensions is wanted and not built yet
    first = await m.registry.run_once(NAMESPACE_INDEXES)
    # 768 has no global index wanted here: its namespace goes on; 384's waits
    assert "build_namespace_index kb-b" in store.calls and "build_namespace_index kb-a" not in store.calls
    second = await m.registry.run_once(NAMESPACE_INDEXES)
    assert "build_namespace_index kb-a" not in store.calls
    assert second.again_in == TURN_SECONDS
    assert second.progress.endswith("waiting for the global index of 384 dimensions, built first")
    assert first.again_in == NEXT_BUILD_SECONDS
    assert (await m.registry.run_once(f"{HNSW_PREFIX}384")).done  # the global index is valid
    await m.registry.run_once(NAMESPACE_INDEXES)
    assert "build_namespace_index kb-a" in store.calls
    assert set(m.state.knowledge().namespaces) == {("kb-a", 384), ("kb-b", 768)}


async def test_a_namespace_pass_that_finds_the_table_busy_comes_back_later() -> None:
    store = FakeStore()
    store.state = "ready"
    kept = namespace_index_name(store.info.collection_id, "kb-old", 384)
    store.namespaces = {kept: True}
    store.sizes = [NamespaceSize("kb-a", 384, 80_000)]  # kb-old is gone: its index is to drop
    store.namespace_outcome = "table-busy"
    m = maintenance(store, hnsw_namespace_min_rows=50_000)
    m.start(None)
    result = await m.registry.run_once(NAMESPACE_INDEXES)
    assert result.again_in == TURN_SECONDS
    assert result.progress == (
        "0 namespace indexes valid, 1 to build, 0 dropped; "
        "waiting for another index build on ragoverlay_vectors to end"
    )
    assert m.registry.status(NAMESPACE_INDEXES).failures == 0 and store.namespaces == {kept: True}
    store.namespace_outcome = "valid"
    result = await m.registry.run_once(NAMESPACE_INDEXES)
    assert result.progress == "1 namespace indexes valid, 0 to build, 1 dropped"


async def test_a_process_looks_again_within_seconds_while_the_copy_is_not_usable_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another replica may ready the copy: this one looks again after 5, 10 ... s, and after its
    interval once the copy is usable; a copy that stops being usable starts over at 5 s."""
    store = FakeStore()  # the copy is 'backfilling'
    m = maintenance(store)
    pauses: list[float] = []
    seen_four = asyncio.Event()
    forever: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            store.state = "ready"  # another replica's pass readied it
        elif len(pauses) == 3:
            store.state = "backfilling"  # a repair: not usable again
        elif len(pauses) == 4:
            seen_four.set()
            await forever  # until close() cancels the loop

    monkeypatch.setattr(tasks.asyncio, "sleep", sleep)
    m.start_refresh(60.0)
    await asyncio.wait_for(seen_four.wait(), ceiling(10))
    await m.close()
    assert pauses == [PENDING_REFRESH_SECONDS, 2 * PENDING_REFRESH_SECONDS, 60.0, PENDING_REFRESH_SECONDS]
