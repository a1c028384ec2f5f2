"""`scripts/bench v2-query`: its options, the rag_api rows made of the V2 chunks, and the markdown
with V1 beside V2 (no service, no database)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np

from benchmarks.v2_channels import document_chunks
from benchmarks.v2_query import parse, rag_api_rows
from benchmarks.v2_query_report import markdown, summary


def _row(p50: float, p95: float, **extra: Any) -> dict[str, Any]:
    return {"client_ms": {"p50": p50, "p95": p95, "max": p95}, "server_p50_ms": {}, **extra}


def _round(wait: float, run: float, longer: int) -> dict[str, Any]:
    return {
        "requests": 60,
        "client_ms": {"p50": wait + run, "p95": 2 * (wait + run), "max": 3 * run},
        "pool_wait_ms": {"p50": wait, "p95": wait, "max": 2 * wait},
        "run_ms": {"p50": run, "p95": run, "max": run},
        "requests_waiting_longer_than_they_ran": longer,
    }


def test_options_take_k_and_each_service_s_settings() -> None:
    options = parse(["--files", "1000,100", "--k", "5", "--env", "DB_POOL_MAX_SIZE=20", "--base-env", "A=1"])
    assert options.sizes == [100, 1000] and options.k == 5
    assert options.env == {"DB_POOL_MAX_SIZE": "20"} and options.base_env == {"A": "1"}
    assert parse([]).k == 8  # V2's default evidence count, asked of both routes


def test_the_v1_rows_are_the_same_chunks_as_rag_api_stores_them() -> None:
    words = ["alpha", "beta", "gamma"] * 50
    rows = document_chunks(np.random.default_rng(1), words, 0, chunks=4, terms=5, dims=3)
    v1 = rag_api_rows("agent_x", 7, "file-7", rows)
    assert [r.uuid for r in v1] == [uuid.UUID(r.chunk.id) for r in rows]
    assert [r.document for r in v1] == [r.chunk.content for r in rows]
    assert all(np.array_equal(a.vector, np.asarray(b.embedding)) for a, b in zip(v1, rows, strict=True))
    meta = [json.loads(r.cmetadata) for r in v1]
    assert {m["file_id"] for m in meta} == {"file-7"} and {r.custom_id for r in v1} == {"file-7"}
    assert {m["user_id"] for m in meta} == {"agent_x"}  # the Agent's namespace, read through entity_id
    assert [m["page"] for m in meta] == [(r.chunk.place.page or 1) - 1 for r in rows]  # rag_api: 0-based


def test_the_markdown_puts_v1_beside_v2_for_each_service() -> None:
    figures = {
        "k": 8,
        "base": {
            "settings": {"DB_POOL_MAX_SIZE": "10"},
            "v1_sequential_1000_files": _row(4.0, 6.0, paths={"db.desc=index": 30}),
            "v2_sequential_1000_files": _row(28.0, 40.0),
            "concurrent_mixed_20_at_1000_files": {"v1": _round(9.0, 40.0, 5), "v2": _round(8.0, 170.0, 2)},
        },
        "this": {
            "v1_sequential_1000_files": _row(3.0, 5.0),
            "v2_sequential_1000_files": _row(27.0, 31.0),
            "v2_sequential_1000_files_one_not_indexed": _row(50.0, 60.0),
            # an older service without the `pool` stage on V1
            "concurrent_v1_20_at_1000_files": {
                "v1": {"requests": 60, "client_ms": _row(70.0, 90.0)["client_ms"]}
            },
        },
    }
    text = markdown(figures)
    assert "| base | 1,000 files | 4.0 / 6.0 | 28.0 / 40.0 | 7.0x | index 30 |" in text
    assert "| this | 1,000 files | 3.0 / 5.0 | 27.0 / 31.0 | 9.0x | - |" in text
    assert "| this | 1,000 files, one not indexed | - | 50.0 / 60.0 | - | - |" in text
    mixed_v1 = "| base | 20 (mixed), 1,000 files | V1 `/query_multiple` | 49.0 / 98.0 | 9.0 / 18.0 | 40.0 |"
    assert mixed_v1 + " 5 of 60 |" in text
    older_v1 = "| this | 20 (v1), 1,000 files | V1 `/query_multiple` | 70.0 / 90.0 |"
    assert older_v1 + " not reported | - | - |" in text
    assert "base: DB_POOL_MAX_SIZE=10" in text
    assert text.index("| base | 1,000 files |") < text.index("| this | 1,000 files |")


def test_summary_takes_the_nearest_rank_95th_percentile() -> None:
    assert summary([float(x) for x in range(1, 61)]) == {"p50": 30.5, "p95": 57.0, "max": 60.0}
    assert summary([5.0, 1.0]) == {"p50": 3.0, "p95": 5.0, "max": 5.0}
