"""Every SQL statement of the V1 store, as named constants.

Values are always bound as `$n`. The only text ever composed is from the constants below, chosen by
settings (never by request data): the owner predicate with or without legacy unowned rows.

Conventions on rag_api's `langchain_pg_embedding`:
- `custom_id` is the file id (rag_api writes `ids=[file_id] * n`), `cmetadata->>'user_id'` the owner;
- both are read through the expression index `ragoverlay_emb_owner_file_idx`;
- `vector_dims(embedding) = $dim` keeps rows of another embedding model out of a search (a
  dimension mismatch would otherwise be a query error).
"""

from __future__ import annotations

# --- the authorisation predicate, part of every read and delete -------------------------------
# `${n}` is the text[] of namespaces the caller may touch.
_OWNER_PREDICATE = "(e.cmetadata ->> 'user_id') = ANY(${n}::text[])"
# LEGACY_UNOWNED_READABLE=true: rows written before owners existed are readable by everyone.
_OWNER_PREDICATE_WITH_LEGACY = (
    "((e.cmetadata ->> 'user_id') = ANY(${n}::text[]) OR (e.cmetadata ->> 'user_id') IS NULL)"
)


def with_owner_predicate(template: str, param: int, *, legacy_unowned: bool) -> str:
    """Fill a template's `{owner_predicate}` with the owner check bound to parameter `param`."""
    predicate = _OWNER_PREDICATE_WITH_LEGACY if legacy_unowned else _OWNER_PREDICATE
    return template.format(owner_predicate=predicate.replace("{n}", str(param)))


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

# --- search ----------------------------------------------------------------------------------
# One round trip: ragoverlay_search_v2 (migration 0007) estimates the visible rows, picks the exact
# scan (on the compact vector copy when it is ready) or the HNSW index, and returns top-k without
# vectors.
SEARCH_FUNCTION = """
    SELECT uuid, custom_id, document, cmetadata, distance, path, visible_estimate
    FROM ragoverlay_search_v2($1, $2, $3::text[], $4::text[], $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                              $15)
"""

# Catalogue statistics the search path choice uses (refreshed in the background, not per request).
CATALOGUE_STATS = """
    SELECT count(*) AS files, coalesce(sum(chunk_count), 0) AS chunks,
           count(DISTINCT embedding_dim) AS dim_kinds, bool_or(embedding_dim IS NULL) AS unknown_dims,
           min(embedding_dim) AS dims
    FROM ragoverlay_files WHERE collection_id = $1
"""

# Per-file chunk counts for the visible-row estimate (when the catalogue is small enough).
CATALOGUE_FILE_CHUNKS = """
    SELECT file_id, owner, chunk_count FROM ragoverlay_files WHERE collection_id = $1
"""

# Exact top-k over exactly the caller's rows (reference implementation, used by tests).
SEARCH_TEMPLATE = """
    SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text AS cmetadata,
           (e.embedding <=> $1) AS distance
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $2
      AND e.custom_id = ANY($3::text[])
      AND {owner_predicate}
      AND vector_dims(e.embedding) = $5
    ORDER BY distance
    LIMIT $6
"""

# --- reads -----------------------------------------------------------------------------------
# Chunk order: our rows carry time-ordered (v7) uuids issued in chunk order; rag_api's rows carry
# random v4 uuids and fall back to physical order, which is insertion order for a fresh file.
DOCUMENTS_TEMPLATE = """
    SELECT e.custom_id, e.document, e.cmetadata::text AS cmetadata
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $1
      AND e.custom_id = ANY($2::text[])
      AND {owner_predicate}
    ORDER BY e.custom_id,
             (CASE WHEN substr(e.uuid::text, 15, 1) = '7' THEN e.uuid END) NULLS LAST,
             e.ctid
    LIMIT $4
"""

IDS_TEMPLATE = """
    SELECT DISTINCT e.custom_id
    FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND {owner_predicate} AND e.custom_id IS NOT NULL
    ORDER BY e.custom_id
    LIMIT $3
"""

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
        blob_key, status, chunk_count, embedding_model, embedding_dim, storage_metadata
    ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'ready', $10, $11, $12, $13::jsonb)
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
        updated_at = now()
"""
PREVIOUS_BLOB_KEY = """
    SELECT f.blob_key FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = $2 AND f.owner = $3
"""

GET_FILE = """
    SELECT f.file_id, f.owner, f.uploader, f.filename, f.content_type, f.size_bytes, f.sha256,
           f.blob_key, f.status, f.chunk_count, f.embedding_model, f.embedding_dim,
           f.created_at, f.updated_at
    FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = $2 AND f.owner = ANY($3::text[])
    ORDER BY f.updated_at DESC
    LIMIT 1
"""

# --- deletes ---------------------------------------------------------------------------------
# DELETE_SCOPE=owner: rows the caller's namespaces own, or files the caller uploaded (LibreChat
# deletes knowledge-base files with the uploader's token and no entity_id).
DELETE_CHUNKS_OWNER_SCOPE_TEMPLATE = """
    DELETE FROM langchain_pg_embedding e
    WHERE e.collection_id = $1
      AND e.custom_id = ANY($2::text[])
      AND ({owner_predicate}
           OR EXISTS (SELECT 1 FROM ragoverlay_files f
                      WHERE f.collection_id = e.collection_id AND f.file_id = e.custom_id
                        AND f.owner = (e.cmetadata ->> 'user_id') AND f.uploader = $4))
    RETURNING e.custom_id
"""
# DELETE_SCOPE=caller: rag_api's behaviour, any valid token deletes any file id.
DELETE_CHUNKS_ANY = """
    DELETE FROM langchain_pg_embedding e
    WHERE e.collection_id = $1 AND e.custom_id = ANY($2::text[])
    RETURNING e.custom_id
"""
DELETE_FILES_OWNER_SCOPE = """
    DELETE FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = ANY($2::text[])
      AND (f.owner = ANY($3::text[]) OR f.uploader = $4)
    RETURNING f.file_id, f.blob_key
"""
DELETE_FILES_ANY = """
    DELETE FROM ragoverlay_files f
    WHERE f.collection_id = $1 AND f.file_id = ANY($2::text[])
    RETURNING f.file_id, f.blob_key
"""
BLOB_STILL_REFERENCED = "SELECT EXISTS (SELECT 1 FROM ragoverlay_files WHERE blob_key = $1)"

HEALTH = "SELECT 1"
