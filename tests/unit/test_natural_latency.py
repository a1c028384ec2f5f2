"""The natural run's latency summary: Server-Timing parsing, percentiles per corpus, the 3x target."""

from __future__ import annotations

from benchmarks.quality.natural.latency import latency_table, server_timing, summarise_latency


def test_server_timing_reads_durations_and_skips_the_rest() -> None:
    header = "analysis;dur=0.4, embed;dur=12.5, channels;desc=x;dur=30, broken;dur=abc, nodur"
    assert server_timing(header) == {"analysis": 0.4, "embed": 12.5, "channels": 30.0}
    assert server_timing("") == {}


def _row(corpus: str, route: str, ms: float, channels: float | None = None) -> dict[str, object]:
    stages = {} if channels is None else {"channels": channels}
    return {"qid": "q", "corpus": corpus, "route": route, "ms": ms, "stages": stages}


def test_ratios_per_corpus_and_the_target() -> None:
    rows = [
        *(_row("a", "/query_multiple", ms) for ms in (10, 20, 30)),
        *(_row("a", "/query_v2", ms, ms / 2) for ms in (40, 50, 60)),
        *(_row("b", "/query_multiple", ms) for ms in (10, 10)),
        *(_row("b", "/query_v2", ms) for ms in (20, 20)),
    ]
    summary = summarise_latency({"requests": rows, "load": [1.0, 2.0]})
    a, b, everything = (summary["groups"][g] for g in ("a", "b", "all"))
    assert (a["v1_p50"], a["v2_p50"], a["ratio_p50"]) == (20, 50, 2.5)
    assert a["v2_stages_p50"] == {"channels": 25.0}
    assert (b["ratio_p50"], b["v2_stages_p50"]) == (2.0, {})
    # over all five V1 and five V2 requests: p50 is the third of each sorted list
    assert (everything["n"], everything["v1_p50"], everything["v2_p50"]) == (5, 10, 40)
    assert summary["target"]["met"] is False and summary["target"]["value"] == 4.0
    assert list(summary["groups"]) == ["a", "b", "all"]
    lines = latency_table(summary)
    assert lines[-1].startswith("/query_v2 p50 <= 3x V1: 4.00x NOT MET")


def test_nothing_timed_is_not_measured() -> None:
    summary = summarise_latency({"requests": []})
    assert summary["target"]["met"] is None
    assert latency_table(summary)[-1].startswith("/query_v2 p50 <= 3x V1: – not measured")
