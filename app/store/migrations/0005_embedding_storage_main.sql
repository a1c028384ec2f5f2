-- Keep vectors inline in the heap row (the document text is moved out of line instead), so an
-- exact scan reads each vector from the row it already has, not from TOAST. Only the storage
-- strategy of new rows changes: the column, its type and every existing row stay as they are,
-- and rag_api reads and writes the table exactly as before (undo: SET STORAGE EXTERNAL).
-- Needs table ownership; without it the service works, only slower, so a refusal is not fatal.
DO $$
BEGIN
    ALTER TABLE langchain_pg_embedding ALTER COLUMN embedding SET STORAGE MAIN;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'ragoverlay: not the owner of langchain_pg_embedding; vector storage left as is';
END;
$$;
