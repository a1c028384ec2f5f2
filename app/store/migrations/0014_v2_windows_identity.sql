-- V2 recorded the local model's vector identity without V1's "+windows" revision mark (the two
-- sides computed the identity apart; app/clients/embeddings/identity.py is now the one definition).
-- Every V2 vector was made by the windowed local embedder (V2 came after the windows change), so
-- rows under the unmarked name hold the very vectors the marked identity names: renamed, their runs
-- stay searchable and their vectors reusable. V1's files keep their names: their unmarked vectors
-- do predate the windows and must be recomputed on re-upload.
UPDATE ragoverlay_v2_runs SET embedding_model = embedding_model || '+windows'
WHERE embedding_model LIKE 'local:%' AND embedding_model NOT LIKE '%+windows';

UPDATE ragoverlay_v2_documents SET embedding_model = embedding_model || '+windows'
WHERE embedding_model LIKE 'local:%' AND embedding_model NOT LIKE '%+windows';
