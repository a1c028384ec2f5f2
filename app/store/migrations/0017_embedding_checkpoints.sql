-- Vectors an upload has embedded but not yet committed: its checkpoints.
--
-- Why: embedding is the expensive part of an upload (a 1,000-page manual takes minutes), and a run
-- that stops before its commit (a job deadline, a crash, a restart, a kill -9) used to throw all of
-- it away: the next attempt embedded every chunk again from the first. Each batch of vectors is now
-- written here as soon as the embedder returns it, in its own short transaction, keyed by the model
-- identity and the sha256 of the exact text embedded; the next attempt of the same upload (or of
-- its evidence staging) reads them back and embeds only what is missing. The commit that stores an
-- upload's chunks deletes the checkpoints it used in the same transaction; rows left by uploads
-- that never commit are pruned after a week (app/store/checkpoints.py).
-- Undo: DROP TABLE ragoverlay_embedding_checkpoints (nothing else refers to it).

CREATE TABLE IF NOT EXISTS ragoverlay_embedding_checkpoints (
    collection_id uuid NOT NULL,
    model text COLLATE "C" NOT NULL,
    digest text COLLATE "C" NOT NULL,
    embedding vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection_id, model, digest)
);
CREATE INDEX IF NOT EXISTS ragoverlay_embedding_checkpoints_age_idx
    ON ragoverlay_embedding_checkpoints (created_at);
