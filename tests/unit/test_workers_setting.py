"""RAG_WORKERS (or WEB_CONCURRENCY): a number, or `auto` = the usable cores that the memory holds."""

from __future__ import annotations

import pytest

from app.config import load_settings
from app.config_sections import McpSettings
from app.errors import ConfigError
from app.runtime import workers
from app.runtime.workers import MAX_AUTO_WORKERS, POOL_FLOOR, WORKER_MEMORY_MB, worker_count, worker_settings


def test_the_setting_reads_either_name_and_refuses_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().workers == 1  # today's single process unless asked
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert load_settings().workers == 3
    monkeypatch.setenv("RAG_WORKERS", "AUTO")
    assert load_settings().workers == "auto"  # RAG_WORKERS wins over WEB_CONCURRENCY
    for bad in ("0", "65", "many"):
        monkeypatch.setenv("RAG_WORKERS", bad)
        with pytest.raises(ConfigError, match="RAG_WORKERS"):
            load_settings()


def test_auto_is_the_usable_cores_capped_by_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    monkeypatch.setattr(workers, "memory_limit_mb", lambda: 64 * 1024)
    assert worker_count("auto") == 4
    monkeypatch.setattr(workers, "usable_cores", lambda: 64)
    assert worker_count("auto") == MAX_AUTO_WORKERS  # the embedded PostgreSQL's 100 connections
    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    # half the memory for the workers: 2 GiB holds 1024 / WORKER_MEMORY_MB of them
    monkeypatch.setattr(workers, "memory_limit_mb", lambda: 2048)
    assert worker_count("auto") == max(1, 1024 // WORKER_MEMORY_MB)
    monkeypatch.setattr(workers, "memory_limit_mb", lambda: 256)
    assert worker_count("auto") == 1  # never none
    # a full vector cache counts too: 8 GiB halved holds 4 workers of 450 + 512 MiB
    monkeypatch.setattr(workers, "usable_cores", lambda: 64)
    monkeypatch.setattr(workers, "memory_limit_mb", lambda: 8192)
    assert worker_count("auto", cache_mb=512) == 4
    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    monkeypatch.setattr(workers, "memory_limit_mb", lambda: None)
    assert worker_count("auto") == 4
    assert worker_count(3) == 3


def test_the_pool_ceiling_is_shared_out_among_the_workers() -> None:
    # 30 connections (the default) over 2 workers: 15 each, as many in all as one process had
    two = worker_settings(load_settings(workers=2))
    assert (two.db_pool_max_size, two.db_pool_min_size) == (15, 1)
    # never below POOL_FLOOR, never above what was asked for
    assert worker_settings(load_settings(workers=6)).db_pool_max_size == POOL_FLOOR
    assert worker_settings(load_settings(workers=4, db_pool_max_size=5)).db_pool_max_size == 5
    assert worker_settings(load_settings(workers=1)).db_pool_max_size == 30


def test_a_worker_of_several_serves_mcp_without_sessions_unless_told_otherwise() -> None:
    assert worker_settings(load_settings(workers=2)).mcp_stateless is True
    assert worker_settings(load_settings(workers=2, mcp_stateless=False)).mcp_stateless is False
    assert worker_settings(load_settings(workers=1)).mcp_stateless is False
    # one process: "auto" keeps sessions; an operator's MCP_STATELESS=true (replicas) drops them
    assert McpSettings.from_settings(load_settings()).stateless is False
    assert McpSettings.from_settings(load_settings(mcp_stateless=True)).stateless is True
