-- Our own catalogue of uploaded files: who owns each (the namespace), who uploaded it, and where
-- its original lives, so deletes can be scoped to the uploader and the index can be rebuilt from
-- originals. Additive: rag_api never reads it.
CREATE TABLE IF NOT EXISTS ragoverlay_files (
    collection_id uuid NOT NULL,
    file_id text NOT NULL,
    owner text NOT NULL,
    uploader text NOT NULL,
    filename text NOT NULL,
    content_type text,
    size_bytes bigint,
    sha256 text,
    blob_key text,
    status text NOT NULL DEFAULT 'ready',
    chunk_count integer NOT NULL DEFAULT 0,
    embedding_model text,
    embedding_dim integer,
    storage_metadata jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection_id, file_id, owner)
);

CREATE INDEX IF NOT EXISTS ragoverlay_files_uploader_idx
    ON ragoverlay_files (collection_id, uploader, file_id);
CREATE INDEX IF NOT EXISTS ragoverlay_files_sha256_idx ON ragoverlay_files (sha256);
