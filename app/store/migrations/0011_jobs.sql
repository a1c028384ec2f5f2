-- The durable job queue (app/jobs/, functions in app/store/sql/50_jobs.sql). One row per job; a
-- periodic job (maintenance, the vector sweep) keeps one row that goes back to 'queued' after
-- each pass. Every replica serving the same collection shares the rows of its queue (the
-- collection name), and claims them with FOR UPDATE SKIP LOCKED.
--
-- status: 'queued' (waiting for run_after), 'running' (a worker holds the job's advisory lock on
-- its lease connection), 'done', 'failed' (parked: retried only by hand).
-- attempts: runs started; a run abandoned by a worker that died counts as one.
-- Undo: DROP TABLE ragoverlay_jobs (nothing else refers to it).
CREATE TABLE IF NOT EXISTS ragoverlay_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key text,
    priority integer NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    period_s double precision CHECK (period_s > 0),      -- periodic: seconds between passes
    retry_s double precision CHECK (retry_s > 0),        -- periodic: seconds after a failed pass
    run_after timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text,                                     -- the caller who asked for it (NULL: the service)
    started_at timestamptz,
    heartbeat_at timestamptz,
    finished_at timestamptz,
    worker text,
    progress_done bigint,
    progress_total bigint,
    progress_note text,
    last_error text,
    result jsonb,
    runs integer NOT NULL DEFAULT 0,                     -- passes finished (periodic jobs)
    failures integer NOT NULL DEFAULT 0                  -- failed runs, over the job's life
);

-- At most one waiting job per piece of work: a second request for it joins (or replaces) the first.
CREATE UNIQUE INDEX IF NOT EXISTS ragoverlay_jobs_waiting_key
    ON ragoverlay_jobs (queue, dedupe_key) WHERE status = 'queued' AND dedupe_key IS NOT NULL;
-- The claim: due jobs of a queue, best first.
CREATE INDEX IF NOT EXISTS ragoverlay_jobs_due_idx
    ON ragoverlay_jobs (queue, priority DESC, run_after, id) WHERE status = 'queued';
-- Running jobs: the reclaim sweep, the same-key check of the claim, the status page.
CREATE INDEX IF NOT EXISTS ragoverlay_jobs_running_idx
    ON ragoverlay_jobs (queue, dedupe_key, heartbeat_at) WHERE status = 'running';
-- Listing by status (newest first) and pruning of finished jobs.
CREATE INDEX IF NOT EXISTS ragoverlay_jobs_status_idx ON ragoverlay_jobs (queue, status, id);
