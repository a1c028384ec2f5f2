-- ragoverlay: no-transaction
-- Lookup of a caller's chunks by owner and file id without parsing JSON per row. Built
-- CONCURRENTLY so that switching a busy rag_api deployment over never blocks its writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ragoverlay_emb_owner_file_idx
    ON langchain_pg_embedding (collection_id, (cmetadata ->> 'user_id'), custom_id);

CREATE INDEX CONCURRENTLY IF NOT EXISTS ragoverlay_emb_file_idx
    ON langchain_pg_embedding (collection_id, custom_id);
