-- The version of the file an evidence document was made from: the sha256 of the stored original as
-- the file catalogue (ragoverlay_files) named it when the document was staged.
--
-- Why: a run points at one document per file; when the file is uploaded again its V1 chunks change at
-- once, and a run whose document was made from the replaced version must never be answered from as
-- if it were current. `/query_v2` reads a document only while its version is the catalogue's
-- (`ragoverlay_v2_visible_documents`), counts the file as missing (`degraded`) otherwise, and a
-- staging never links a document of a version the catalogue no longer holds. NULL: made without a
-- catalogue version (a rag_api file known only from its V1 chunks); such a document is current only
-- while the catalogue names no version for the file either.
-- Undo: ALTER TABLE ragoverlay_v2_documents DROP COLUMN version_sha256.

ALTER TABLE ragoverlay_v2_documents ADD COLUMN IF NOT EXISTS version_sha256 text;

-- documents made from the original: the bytes parsed are the version
UPDATE ragoverlay_v2_documents SET version_sha256 = checksum
WHERE version_sha256 IS NULL AND source = 'original';

-- the others (a derivative, V1 chunks): the version their file has now, taken as the one they show
UPDATE ragoverlay_v2_documents d SET version_sha256 = f.sha256
FROM ragoverlay_files f
WHERE d.version_sha256 IS NULL AND d.source <> 'original'
  AND f.collection_id = d.collection_id AND f.file_id = d.file_id AND f.owner = d.owner;
