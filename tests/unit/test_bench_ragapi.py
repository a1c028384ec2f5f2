"""`scripts/bench tenants --rag-api`: who goes first, the ratios, the foreign-CPU arithmetic, rag_api's
settings, the matching of its id-less answers and the rendered tables (nothing started, no socket)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from benchmarks import ragapi_report as rr
from benchmarks.ragapi_measure import resolve
from benchmarks.ragapi_side import PIN_COMMIT, ragapi_environment
from benchmarks.tenants import parse
from benchmarks.tenants_corpus import Truth
from benchmarks.workload import Reply


def test_the_side_going_first_rotates_request_by_request() -> None:
    labels = ["rag_api", "this"]
    assert [rr.side_order(i, labels) for i in range(3)] == [
        ["rag_api", "this"],
        ["this", "rag_api"],
        ["rag_api", "this"],
    ]
    three = ["rag_api", "this", "previous"]
    firsts = [rr.side_order(i, three)[0] for i in range(6)]
    assert firsts == three + three  # each side first equally often
    assert all(sorted(rr.side_order(i, three)) == sorted(three) for i in range(6))


def test_ratio_refuses_missing_and_non_positive_denominators() -> None:
    assert rr.ratio(50.0, 10.0) == 5.0
    assert rr.ratio(None, 10.0) is None
    assert rr.ratio(50.0, None) is None
    assert rr.ratio(50.0, 0.0) is None


def test_busy_seconds_counts_work_not_idle_or_iowait() -> None:
    # user 100, nice 10, system 50, idle 1000, iowait 40, irq 5, softirq 5, steal 30, guest 20, guest_nice 0
    stat = "cpu  100 10 50 1000 40 5 5 30 20 0\ncpu0 50 5 25 500 20 2 3 15 10 0\nintr 1 2 3\n"
    # (100 + 10 + 50 + 5 + 5 + 30) = 200 ticks at 100 ticks/s = 2.0 s; guest is inside user already
    assert rr.busy_seconds(stat, 100) == 2.0
    with pytest.raises(ValueError):
        rr.busy_seconds("intr 1\n", 100)


def test_foreign_cpu_is_the_machines_work_minus_the_runs_own() -> None:
    before = rr.CpuSample(busy_s=1000.0, own_s=400.0, wall_s=10.0)
    after = rr.CpuSample(busy_s=1030.0, own_s=418.0, wall_s=20.0)
    # busy 30 s, own 18 s -> foreign 12 s over 10 s of wall = 1.2 cores
    got = rr.foreign_cpu(before, after)
    assert got == {"wall_s": 10.0, "busy_s": 30.0, "own_s": 18.0, "foreign_s": 12.0, "foreign_cores": 1.2}
    # own read a moment later than busy can exceed it: never a negative foreign share
    assert rr.foreign_cpu(before, rr.CpuSample(1010.0, 412.0, 20.0))["foreign_s"] == 0.0


def test_ragapi_gets_our_database_secret_and_stub() -> None:
    env = ragapi_environment(
        "postgresql://bench%40user:p%3Ass@127.0.0.1:55432/ragoverlay",
        "s3cret",
        "http://127.0.0.1:9/v1",
        "tc",
        8001,
    )
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        "bench@user",
        "p:ss",
        "ragoverlay",
    )
    assert (env["DB_HOST"], env["DB_PORT"], env["COLLECTION_NAME"]) == ("127.0.0.1", "55432", "tc")
    assert env["JWT_SECRET"] == "s3cret" and env["EMBEDDINGS_PROVIDER"] == "openai"
    assert env["RAG_OPENAI_BASEURL"] == "http://127.0.0.1:9/v1"
    assert env["RAG_CHECK_EMBEDDING_CTX_LENGTH"] == "false"  # else a tiktoken download from the internet
    assert len(PIN_COMMIT) == 40


def test_the_option_reaches_the_tenant_options() -> None:
    opts = parse(["--rag-api", "--rag-api-git", "/tmp/rag_api.git", "--queries", "120"])
    assert opts.rag_api and str(opts.rag_api_git) == "/tmp/rag_api.git" and opts.spec.queries == 120
    assert not parse([]).rag_api


def test_beside_rag_api_the_questions_fit_its_query_cache() -> None:
    # rag_api caches 128 question embeddings: more distinct questions would time its embedding calls
    assert parse(["--rag-api"]).spec.queries == 120
    assert parse([]).spec.queries == 300  # alone, the corpus's default
    assert parse(["--rag-api", "--queries", "64"]).spec.queries == 64
    with pytest.raises(SystemExit):
        parse(["--rag-api", "--queries", "300"])


def _truth() -> Truth:
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype=np.float32)
    return Truth(["r0", "r1", "r2", "r3"], ["f1", "f1", "f2", "f2"], ["u", "u", "u", "v"], vectors)


def test_ragapis_answers_are_matched_to_rows_by_file_and_distance() -> None:
    truth, q = _truth(), np.array([1.0, 0.0, 0.0])
    # distances to q: r0 0, r1 1, r2 1, r3 1 - 1/sqrt(2) = 0.29289
    docs = [
        [{"page_content": "a", "metadata": {"file_id": "f1"}}, 0.0],
        [{"page_content": "b", "metadata": {"file_id": "f2"}}, 0.2928932],
        [{"page_content": "c", "metadata": {"file_id": "f2"}}, 0.5],  # no row of f2 is 0.5 away
    ]
    got = resolve(truth, q, Reply(200, 1.0, {}, json.dumps(docs).encode()))
    assert got == [("r0", 0.0), ("r3", 0.2928932), ("unmatched:f2", 0.5)]
    assert resolve(truth, q, Reply(404, 1.0, {}, b"{}")) == []


def _side(p50: float, p95: float, recall: float = 1.0, foreign: int = 0) -> dict[str, Any]:
    rec = {"queries": 4, "mean": recall, "min": recall, "foreign_rows": foreign, "short_answers": 0}
    return {"client_ms": {"p50": p50, "p95": p95}, "recall": rec}


def _result() -> dict[str, Any]:
    machine = {"cpu": {"foreign_cores": 0.4}, "loadavg": [1.5, 1.2, 1.0]}
    tp_side = {"req_per_s": 40.0, "errors": 0, **_side(150.0, 300.0)}
    ours_tp = {"req_per_s": 400.0, "errors": 0, **_side(15.0, 30.0)}
    fan = {
        "wall_ms": {"p50": 1500.0, "p95": 1700.0},
        "cpu_ms": {"p50": 2000.0},
        "recall": _side(0, 0)["recall"],
    }
    return {
        "started_utc": "2026-12-07T16:00:00+00:00",
        "loadavg_at_start": [1.0, 1.0, 1.0],
        "loadavg_at_end": [2.0, 1.5, 1.2],
        "rag_api": {
            "install": {"tag": "v0.9.0", "commit": PIN_COMMIT, "requirements": "requirements.lite.txt"},
            "this_commit": "abcdef0123456789",
            "cpu": {"foreign_cores": 0.5, "foreign_s": 30.0},
            "latency": [
                {
                    "title": "whole KB",
                    "sides": {"rag_api": _side(60.0, 70.0), "this": _side(12.0, 14.0)},
                    **machine,
                }
            ],
            "throughput": [
                {"concurrency": 8, "sides": {"rag_api": tp_side, "this": ours_tp}, **machine},
            ],
            "fanout": {
                "files": 373,
                "sides": {
                    "rag_api": fan,
                    "this": {**fan, "wall_ms": {"p50": 10.0, "p95": 12.0}, "cpu_ms": {"p50": 5.0}},
                },
                **machine,
            },
        },
    }


def test_the_tables_show_each_side_the_ratios_recall_and_the_machine() -> None:
    text = rr.render(_result())
    # 60 / 12 = 5.0; 400 / 40 = 10.0; 1500 / 10 = 150.0; CPU 2000 / 5 = 400.0
    assert "| whole KB | 60.0 / 70.0 | 12.0 / 14.0 | 5.0× |" in text
    assert "| requests per second | 40.0 | 400.0 | 10.0× |" in text
    assert "| wall p50 / p95 ms | 1,500.0 / 1,700.0 | 10.0 / 12.0 | 150.0× |" in text
    assert "| 2,000.0 | 5.0 | 400.0× |" in text
    assert text.count("load 1.50/1.20/1.00, foreign CPU 0.4 cores") == 3
    assert "foreign CPU over the whole comparison 0.5 cores (30.0 s)" in text
    assert "v0.9.0 (4985b37b8b" in text and "(abcdef0123" in text


def test_a_foreign_row_on_either_side_fails_the_run() -> None:
    result = _result()
    assert rr.checks_passed(result["rag_api"])
    result["rag_api"]["latency"][0]["sides"]["rag_api"] = _side(60.0, 70.0, foreign=1)
    assert not rr.checks_passed(result["rag_api"])


def test_the_previous_release_gets_its_own_columns_and_ratios() -> None:
    result = _result()
    cmp = result["rag_api"]
    cmp["previous_commit"] = "c6700826204a" + "0" * 28
    cmp["latency"][0]["sides"]["previous"] = _side(20.0, 25.0)
    cmp["throughput"][0]["sides"]["previous"] = {"req_per_s": 200.0, "errors": 0, **_side(30.0, 60.0)}
    fan = cmp["fanout"]["sides"]["rag_api"]
    cmp["fanout"]["sides"]["previous"] = {
        **fan,
        "wall_ms": {"p50": 15.0, "p95": 20.0},
        "cpu_ms": {"p50": 8.0},
    }
    text = rr.render(result)
    # 60 / 12 = 5.0 and 60 / 20 = 3.0; 400 / 40 = 10.0 and 200 / 40 = 5.0; 1500 / 10 and 1500 / 15 = 100.0
    assert "| whole KB | 60.0 / 70.0 | 12.0 / 14.0 | 20.0 / 25.0 | 5.0× | 3.0× |" in text
    assert "| requests per second | 40.0 | 400.0 | 200.0 | 10.0× | 5.0× |" in text
    assert "| 10.0 / 12.0 | 15.0 / 20.0 | 150.0× | 100.0× |" in text
    assert "and the previous release (c670082620)" in text
    # every table row has as many cells as its header
    tables = [t for t in text.split("\n\n") if t.startswith("|")]
    assert len(tables) == 3
    for table in tables:
        widths = {line.count("|") for line in table.splitlines()}
        assert len(widths) == 1, table
