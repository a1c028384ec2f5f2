-- rag_api's own tables, exactly as langchain_community's PGVector (used by rag_api v0.9) creates
-- them, so a fresh database is one rag_api can take over, and an existing one is left untouched.
-- `embedding` has no dimension and `cmetadata` is jsonb (rag_api sets use_jsonb=True; older
-- deployments have json, which every statement of ours also reads). The `vector` extension comes
-- from 0000.

CREATE TABLE IF NOT EXISTS langchain_pg_collection (
    uuid uuid PRIMARY KEY,
    name varchar,
    cmetadata json
);

CREATE TABLE IF NOT EXISTS langchain_pg_embedding (
    uuid uuid PRIMARY KEY,
    collection_id uuid REFERENCES langchain_pg_collection (uuid) ON DELETE CASCADE,
    embedding vector,
    document varchar,
    cmetadata jsonb,
    custom_id varchar
);
