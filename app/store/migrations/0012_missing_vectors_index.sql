-- ragoverlay: no-transaction
-- Chunks stored without a vector, found by the self-healing sweep (app/jobs/sweep.py) without a
-- scan: normally empty, so it costs nothing. rag_api itself never writes such rows; another writer
-- of the table might. Built CONCURRENTLY so that a busy table's writes never wait for it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ragoverlay_emb_missing_vector_idx
    ON langchain_pg_embedding (collection_id, uuid) WHERE embedding IS NULL;
