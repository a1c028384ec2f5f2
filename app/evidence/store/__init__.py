"""V2 index storage: runs, their files, documents, chunks, entities and term counts (migration 0010).

Every function takes a connection, so callers choose the transaction. Reads and deletes of file
rows take the caller's `Scope` and run inside it in SQL (`app/evidence/store/sql/50_v2_index.sql`), exactly as
V1's do; the run bookkeeping (runs, their file lists) is admin data and takes ids.

A run's content is exactly its staged `ragoverlay_v2_run_files` rows, each pointing at a document.
A document (one parsed version of one file of one owner) is shared by every run that links it, so
re-indexing unchanged files costs no embedding call.

- `runs.py`: runs and their expected files (create, stage, activate, fail), and the run errors;
- `documents.py`: stored documents with their chunks, entities, term counts and postings;
- `vectors.py`: vector reuse, the chunks stored without a vector, and the HNSW index family;
- `reads.py`: reads and deletes in the caller's scope, the catalogue row of an original;
- `channels.py`: the retrieval channels one by one; `retrieve.py`: /query_v2's one statement over
  all of them, and its per-channel fallback; `gaps.py`: stored files a run lacks;
- `calls.py`: SQL function calls with named arguments, and inserts, built from typed records.
"""
