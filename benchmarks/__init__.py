"""The search benchmark behind `scripts/bench` (not part of the test suite).

It builds a rag_api-format corpus in a fresh embedded PostgreSQL, starts the service against it in
several configurations, and measures latency, recall@k, throughput, LibreChat's per-file fan-out
and the service's memory. Modules, in the order a run uses them: `corpus` (deterministic text and
vectors), `database` (load, statistics, index state, plan capture), `service` (the subprocess),
`workload` (HTTP measurements), `recall` and `stats` (pure arithmetic), `report` (table and JSON).
"""
