"""Every SQL statement of the V1 store, as named constants.

Values are always bound as `$n`, never formatted in. Reads and deletes call the SQL functions of
`app/store/sql/` with named arguments; their caller's scope is always the constructor call
`SCOPE_SQL` bound to $1..$6 (`app/store/scope.py`), and their own arguments follow from $7.

Conventions on rag_api's `langchain_pg_embedding`: `custom_id` is the file id (rag_api writes
`ids=[file_id] * n`), `cmetadata->>'user_id'` the owner.
"""

from __future__ import annotations

from app.store.scope import SCOPE_SQL

# --- collection ------------------------------------------------------------------------------
SELECT_COLLECTION = "SELECT uuid FROM langchain_pg_collection WHERE name = $1 ORDER BY uuid LIMIT 1"
INSERT_COLLECTION = "INSERT INTO langchain_pg_collection (uuid, name, cmetadata) VALUES ($1, $2, NULL)"
LOCK_COLLECTION_CREATE = "SELECT pg_advisory_xact_lock(hashtext('ragoverlay-collection:' || $1))"
CMETADATA_TYPE = """
    SELECT data_type FROM information_schema.columns
    WHERE table_name = 'langchain_pg_embedding' AND column_name = 'cmetadata'
      AND table_schema = current_schema()
"""
VECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"

# --- reads and deletes: the SQL functions of app/store/sql/, inside the caller's scope ----------
DOCUMENTS = f"""
    SELECT d.custom_id, d.document, d.cmetadata
    FROM ragoverlay_documents(p_scope => {SCOPE_SQL}, p_limit => $7) AS d
"""
FILE_IDS = f"""
    SELECT i.file_id FROM ragoverlay_file_ids(p_scope => {SCOPE_SQL}, p_limit => $7) AS i
"""
# The catalogued files the scope can see, one row per file id (paged by file id), with whether an
# active V2 run of the file's namespace has it staged. The scope check is the one of every read.
FILE_LISTING = f"""
    WITH s AS (SELECT {SCOPE_SQL} AS scope)
    SELECT DISTINCT ON (f.file_id) f.file_id, f.owner, f.filename, f.content_type, f.size_bytes,
           f.chunk_count, f.status,
           EXISTS (SELECT 1 FROM ragoverlay_v2_run_files rf
                   JOIN ragoverlay_v2_runs r ON r.run_id = rf.run_id
                   WHERE r.collection_id = f.collection_id AND r.namespace = f.owner
                     AND r.status = 'active' AND rf.file_id = f.file_id AND rf.state = 'staged')
             AS v2_indexed
    FROM s, ragoverlay_files f
    WHERE f.collection_id = $1 AND f.owner = ANY ((s.scope).reach)
      AND ragoverlay_in_scope(s.scope, f.collection_id, f.file_id, f.owner)
      AND ($7::text IS NULL OR f.file_id > $7)
    ORDER BY f.file_id, f.owner
    LIMIT $8
"""
DELETE_FILES = f"""
    SELECT d.file_id, d.blob_key FROM ragoverlay_delete_files(p_scope => {SCOPE_SQL}) AS d
"""
# A search channel's function returns these columns (its own arguments are named by the planner).
SEARCH_COLUMNS = "h.uuid, h.custom_id, h.document, h.cmetadata, h.distance, h.path"

# V1's exact search in the service's memory (app/store/sql/22_memory_search.sql): the visible files
# with their revisions, then the vectors of those the service does not hold at that revision
# (as three arrays in one row: 1,000 records cost more to send and decode than their values)
VISIBLE_VECTOR_FILES = f"""
    SELECT array_agg(v.owner) AS owners, array_agg(v.file_id) AS file_ids, array_agg(v.revision) AS revisions
    FROM ragoverlay_visible_vector_files(p_scope => {SCOPE_SQL}) AS v
"""
SCOPE_VECTORS = f"""
    SELECT v.owner, v.file_id, v.revision, v.ids, v.vectors
    FROM ragoverlay_scope_vectors(p_scope => {SCOPE_SQL}, p_dims => $7) AS v
"""
RANK_CANDIDATES_FUNCTION = "ragoverlay_rank_candidates"
MEMORY_ANSWER_FUNCTION = "ragoverlay_memory_answer"

# --- ingest ----------------------------------------------------------------------------------
# Vectors of the current version of a file, reusable only when the same model made them.
EXISTING_VECTORS = """
    SELECT e.cmetadata ->> 'digest' AS digest, e.embedding
    FROM langchain_pg_embedding e
    JOIN ragoverlay_files f
      ON f.collection_id = e.collection_id AND f.file_id = e.custom_id
     AND f.owner = (e.cmetadata ->> 'user_id')
    WHERE e.collection_id = $1 AND e.custom_id = $2 AND (e.cmetadata ->> 'user_id') = $3
      AND f.embedding_model = $4
"""

# --- writes ----------------------------------------------------------------------------------
# Serialises concurrent replacements of the same (collection, file, owner).
LOCK_FILE = "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2 || chr(31) || $3, 0))"
DELETE_FILE_CHUNKS_OF_OWNER = """
    DELETE FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND e.custom_id = $2 AND (e.cmetadata ->> 'user_id') = $3
"""
EMBEDDING_COPY_COLUMNS = ("uuid", "collection_id", "embedding", "document", "cmetadata", "custom_id")

UPSERT_FILE = """
    INSERT INTO ragoverlay_files (
        collection_id, file_id, owner, uploader, filename, content_type, size_bytes, sha256,
        blob_key, status, chunk_count, embedding_model, embedding_dim, storage_metadata,
        ocr_pages, empty_pages
    ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'ready', $10, $11, $12, $13::jsonb, $14, $15)
    ON CONFLICT (collection_id, file_id, owner) DO UPDATE SET
        uploader = EXCLUDED.uploader,
        filename = EXCLUDED.filename,
        content_type = EXCLUDED.content_type,
        size_bytes = EXCLUDED.size_bytes,
        sha256 = EXCLUDED.sha256,
        blob_key = EXCLUDED.blob_key,
        status = 'ready',
        chunk_count = EXCLUDED.chunk_count,
        embedding_model = EXCLUDED.embedding_model,
        embedding_dim = EXCLUDED.embedding_dim,
        storage_metadata = EXCLUDED.storage_metadata,
        ocr_pages = EXCLUDED.ocr_pages,
        empty_pages = EXCLUDED.empty_pages,
        updated_at = now()
"""
PREVIOUS_BLOB_KEY = """
    SELECT f.blob_key FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = $2 AND f.owner = $3
"""

# --- deletes ---------------------------------------------------------------------------------
BLOB_STILL_REFERENCED = "SELECT EXISTS (SELECT 1 FROM ragoverlay_files WHERE blob_key = $1)"

HEALTH = "SELECT 1"
