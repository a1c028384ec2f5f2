-- The pages of an upload that OCR read, and those that show a picture but gave no text: its health.
--
-- Why: `/embed` answers both lists to the uploader, but nothing kept them, so an operator could not
-- see later which files of a knowledge base were scans (their text is OCR's reading) or had pages
-- nobody can search (the operator console's file health). Each upload writes them with its
-- catalogue row; NULL: not recorded (uploaded before this column, or by rag_api), `{}`: none.
-- Additive, on our own table: rag_api never reads it.
-- Undo: ALTER TABLE ragoverlay_files DROP COLUMN ocr_pages, DROP COLUMN empty_pages.

ALTER TABLE ragoverlay_files ADD COLUMN IF NOT EXISTS ocr_pages integer[];
ALTER TABLE ragoverlay_files ADD COLUMN IF NOT EXISTS empty_pages integer[];
