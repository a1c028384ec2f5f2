"""Evidence search (`/query_v2`): its index, its query path, its store, jobs and administration.

Inner packages by concern, each a node of its own in the import graph (scripts/lib/archcheck.py):
`query/` answers a question (analysis, channels, fusion, reranking, refusal, evidence), `index/`
builds index runs from stored originals (profile, structure-aware chunking, staging, backfill),
`store/` holds its SQL (records, the channel statements, `sql/*.sql`), and `settings.py` every
tuning knob (`RAG_V2__<SECTION>__<FIELD>`). The modules beside them put those on the job queue
(`kinds.py`, `jobs.py`), the maintenance schedule (`maintenance.py`), the admin routes (`admin.py`)
and the command line (`cli.py`, `scripts/v2-backfill`).

This file imports nothing: `app.config` reads `app.evidence.settings`, which must not pull the rest in.
"""
