-- The extensions ragoverlay needs in its database: `vector` (pgvector: every search) and `pg_trgm`
-- and `unaccent` (the lexical retrieval of V2). Numbered 0000 so that it runs first on a fresh
-- database and, once, on a database migrated before this file existed.
--
-- pgvector is not a trusted extension: unless the service's role is a superuser, a superuser must
-- create it once (the embedded database does). pg_trgm and unaccent are trusted (PostgreSQL 13+):
-- any role with CREATE on the database may create them. When the role may not, or the server does
-- not have the extension installed, the start-up stops here with a message that names the
-- extension and the statement to run.
DO $$
DECLARE
    ext text;
BEGIN
    FOREACH ext IN ARRAY ARRAY['vector', 'pg_trgm', 'unaccent'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_extension WHERE extname = ext);
        BEGIN
            EXECUTE format('CREATE EXTENSION IF NOT EXISTS %I', ext);
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'ragoverlay needs the PostgreSQL extension "%" in database "%", and role "%" may not create it',
                    ext, current_database(), current_user
                    USING HINT = format('Ask a superuser to run, in database %I: CREATE EXTENSION IF NOT EXISTS %I;',
                                        current_database(), ext);
            WHEN feature_not_supported OR undefined_file THEN
                RAISE EXCEPTION 'ragoverlay needs the PostgreSQL extension "%", which this server does not have installed', ext
                    USING HINT = CASE WHEN ext = 'vector'
                                      THEN 'Install pgvector 0.8 or newer on the server (https://github.com/pgvector/pgvector), then restart ragoverlay.'
                                      ELSE 'Install the PostgreSQL contrib package on the server, then restart ragoverlay.' END;
        END;
    END LOOP;
END;
$$;
