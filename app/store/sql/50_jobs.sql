-- The job queue's state changes (table: migration 0011; caller: app/store/jobs.py).
--
-- A running job is held twice: its row says 'running' with the worker's name and attempt, and
-- the worker's lease connection holds the session advisory lock (1785686643, ragoverlay_job_lock_id
-- (id)). The lock is what makes a job run at most once at a time across processes: a claim takes it
-- before the row changes, and a reclaim takes it before it touches a running row, so a job whose
-- worker is alive (its session holds the lock) is never taken from it. A worker that dies loses
-- its session, and with it every lock it held.
-- Every change a worker makes to a row names the worker and the attempt: a run that lost its job
-- (reclaimed after its lease broke) can no longer write to it.

-- 1785686643 = 'jobs' in ASCII: the first key of every job lock (two-key form, no other user).
DROP FUNCTION IF EXISTS ragoverlay_job_lock_id;
CREATE FUNCTION ragoverlay_job_lock_id(p_id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (p_id % 2147483647)::integer $$;

-- Whether this session holds job p_id's lock.
DROP FUNCTION IF EXISTS ragoverlay_job_lock_held;
CREATE FUNCTION ragoverlay_job_lock_held(p_id bigint) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
          AND l.classid = 1785686643 AND l.objid = ragoverlay_job_lock_id(p_id)::oid AND l.objsubid = 2
    )
$$;

-- Add a job, or join the waiting one with the same dedupe key.
-- p_mode: 'keep' (a waiting duplicate is returned as it is), 'replace' (its payload becomes this
-- one: the newer upload wins), 'periodic' (a duplicate that waits or runs is returned: one row per
-- schedule). Returns the job's id and whether a row was added.
DROP FUNCTION IF EXISTS ragoverlay_job_enqueue;
CREATE FUNCTION ragoverlay_job_enqueue(
    p_queue text, p_kind text, p_payload jsonb, p_dedupe_key text, p_mode text, p_priority integer,
    p_max_attempts integer, p_delay_s double precision, p_period_s double precision,
    p_retry_s double precision, p_created_by text
)
RETURNS TABLE (job_id bigint, created boolean)
LANGUAGE plpgsql
VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_created boolean;
BEGIN
    IF p_mode NOT IN ('keep', 'replace', 'periodic') THEN
        RAISE EXCEPTION 'ragoverlay_job_enqueue: unknown mode %', p_mode;
    END IF;
    IF p_mode = 'periodic' AND p_dedupe_key IS NOT NULL THEN
        SELECT j.id INTO v_id FROM ragoverlay_jobs j
        WHERE j.queue = p_queue AND j.dedupe_key = p_dedupe_key AND j.status IN ('queued', 'running')
        ORDER BY j.id LIMIT 1;
        IF FOUND THEN
            -- a release with another interval: its schedule applies from now on (a waiting pass
            -- comes no later than the new period from now)
            UPDATE ragoverlay_jobs AS j
            SET period_s = p_period_s, retry_s = p_retry_s,
                run_after = least(j.run_after, now() + make_interval(secs => greatest(p_period_s, 0)))
            WHERE j.id = v_id AND j.status = 'queued'
              AND (j.period_s IS DISTINCT FROM p_period_s OR j.retry_s IS DISTINCT FROM p_retry_s);
            job_id := v_id;
            created := false;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    INSERT INTO ragoverlay_jobs AS j (
        queue, kind, payload, dedupe_key, priority, max_attempts, period_s, retry_s, run_after, created_by
    )
    VALUES (
        p_queue, p_kind, p_payload, p_dedupe_key, p_priority, p_max_attempts, p_period_s, p_retry_s,
        now() + make_interval(secs => greatest(p_delay_s, 0)), p_created_by
    )
    ON CONFLICT (queue, dedupe_key) WHERE status = 'queued' AND dedupe_key IS NOT NULL DO UPDATE
        SET payload = CASE WHEN p_mode = 'replace' THEN excluded.payload ELSE j.payload END,
            created_by = CASE WHEN p_mode = 'replace' THEN excluded.created_by ELSE j.created_by END
    RETURNING j.id, (j.xmax = 0) INTO v_id, v_created;
    -- wakes every worker of the queue at commit (they also poll, so a lost notice only delays)
    PERFORM pg_notify('ragoverlay_jobs', p_queue);
    job_id := v_id;
    created := v_created;
    RETURN NEXT;
END;
$$;

-- Claim up to p_limit due jobs of the kinds this worker runs: lock, mark running, count the
-- attempt. A job whose dedupe key is running elsewhere waits (the same work never runs twice at
-- once, even as two jobs).
DROP FUNCTION IF EXISTS ragoverlay_job_claim;
CREATE FUNCTION ragoverlay_job_claim(p_queue text, p_kinds text[], p_worker text, p_limit integer)
RETURNS SETOF ragoverlay_jobs
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    r ragoverlay_jobs;
    n integer := 0;
BEGIN
    IF p_limit < 1 THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT * FROM ragoverlay_jobs j
        WHERE j.queue = p_queue AND j.status = 'queued' AND j.run_after <= now() AND j.kind = ANY (p_kinds)
        ORDER BY j.priority DESC, j.run_after, j.id
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN n >= p_limit;
        CONTINUE WHEN r.dedupe_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM ragoverlay_jobs o
            WHERE o.queue = p_queue AND o.dedupe_key = r.dedupe_key AND o.status = 'running'
        );
        -- taken only when free: a stray lock (a claim whose transaction failed) never blocks us
        CONTINUE WHEN NOT pg_try_advisory_lock(1785686643, ragoverlay_job_lock_id(r.id));
        UPDATE ragoverlay_jobs j
        SET status = 'running', attempts = j.attempts + 1, worker = p_worker, started_at = now(),
            heartbeat_at = now(), progress_done = NULL, progress_total = NULL, progress_note = NULL
        WHERE j.id = r.id
        RETURNING * INTO r;
        n := n + 1;
        RETURN NEXT r;
    END LOOP;
END;
$$;

-- End a run of job p_id by worker p_worker (its attempt p_attempt), and release its lock.
-- p_outcome: 'done'; 'retry' (back to the queue after p_delay_s); 'failed' (parked); 'again' (a
-- periodic job's next pass after p_delay_s, whether this one failed or not); 'released' (the
-- worker stops, or the handler cannot run the job here or now: back to the queue after p_delay_s,
-- the attempt not counted). p_done, p_total, p_note: the run's last progress (NULL: unchanged).
-- Returns the job's new status, or NULL when the run no longer owned the job.
DROP FUNCTION IF EXISTS ragoverlay_job_finish;
CREATE FUNCTION ragoverlay_job_finish(
    p_id bigint, p_worker text, p_attempt integer, p_outcome text, p_delay_s double precision,
    p_error text, p_result jsonb, p_done bigint, p_total bigint, p_note text
)
RETURNS text
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    r ragoverlay_jobs;
    v_status text;
    v_failed integer := CASE WHEN p_error IS NULL THEN 0 ELSE 1 END;
BEGIN
    SELECT * INTO r FROM ragoverlay_jobs j
    WHERE j.id = p_id AND j.worker = p_worker AND j.attempts = p_attempt AND j.status = 'running'
    FOR UPDATE;
    IF FOUND THEN
        UPDATE ragoverlay_jobs
        SET progress_done = coalesce(p_done, progress_done), progress_total = coalesce(p_total, progress_total),
            progress_note = coalesce(p_note, progress_note)
        WHERE id = p_id;
        IF p_outcome = 'done' THEN
            UPDATE ragoverlay_jobs SET status = 'done', finished_at = now(), result = p_result,
                last_error = NULL, runs = runs + 1
            WHERE id = p_id;
            v_status := 'done';
        ELSIF p_outcome = 'failed' THEN
            UPDATE ragoverlay_jobs SET status = 'failed', finished_at = now(), last_error = p_error,
                failures = failures + 1, runs = runs + 1
            WHERE id = p_id;
            v_status := 'failed';
        ELSIF p_outcome = 'retry' THEN
            UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, last_error = p_error,
                failures = failures + 1, runs = runs + 1,
                run_after = now() + make_interval(secs => greatest(p_delay_s, 0))
            WHERE id = p_id;
            v_status := 'queued';
        ELSIF p_outcome = 'again' THEN
            IF EXISTS (SELECT 1 FROM ragoverlay_jobs o
                       WHERE o.queue = r.queue AND o.dedupe_key = r.dedupe_key AND o.status = 'queued') THEN
                -- another replica scheduled the next pass meanwhile: that row carries the schedule
                UPDATE ragoverlay_jobs SET status = 'done', finished_at = now(), result = p_result,
                    last_error = p_error, runs = runs + 1, failures = failures + v_failed
                WHERE id = p_id;
                v_status := 'done';
            ELSE
                UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, attempts = 0,
                    finished_at = now(), result = p_result, last_error = p_error, runs = runs + 1,
                    failures = failures + v_failed,
                    run_after = now() + make_interval(secs => greatest(p_delay_s, 0))
                WHERE id = p_id;
                v_status := 'queued';
            END IF;
        ELSIF p_outcome = 'released' THEN
            UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, attempts = greatest(attempts - 1, 0),
                run_after = now() + make_interval(secs => greatest(p_delay_s, 0)),
                last_error = coalesce(p_error, last_error)
            WHERE id = p_id;
            v_status := 'queued';
        ELSE
            RAISE EXCEPTION 'ragoverlay_job_finish: unknown outcome %', p_outcome;
        END IF;
    END IF;
    IF ragoverlay_job_lock_held(p_id) THEN
        PERFORM pg_advisory_unlock(1785686643, ragoverlay_job_lock_id(p_id));
    END IF;
    RETURN v_status;
END;
$$;

-- Heartbeat and progress of a worker's running jobs; returns the ids still its own (a job missing
-- from the answer was taken from it: its run must stop).
DROP FUNCTION IF EXISTS ragoverlay_job_heartbeat;
CREATE FUNCTION ragoverlay_job_heartbeat(
    p_worker text, p_ids bigint[], p_attempts integer[], p_done bigint[], p_total bigint[], p_note text[]
)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
AS $$
    UPDATE ragoverlay_jobs j
    SET heartbeat_at = now(),
        progress_done = coalesce(u.done, j.progress_done),
        progress_total = coalesce(u.total, j.progress_total),
        progress_note = coalesce(u.note, j.progress_note)
    FROM unnest(p_ids, p_attempts, p_done, p_total, p_note) AS u(id, attempt, done, total, note)
    WHERE j.id = u.id AND j.attempts = u.attempt AND j.worker = p_worker AND j.status = 'running'
    RETURNING j.id
$$;

-- Take back running jobs whose worker is gone: those silent for p_stale_s seconds (p_worker
-- NULL), or those of worker p_worker (a worker whose lease broke, once reconnected). A job whose
-- lock is still held is left alone: its worker lives. The abandoned run counts as an attempt: the
-- job runs again at once (it has waited long enough) or, out of attempts, is parked as failed; a
-- periodic job always gets its next pass.
DROP FUNCTION IF EXISTS ragoverlay_job_reclaim;
CREATE FUNCTION ragoverlay_job_reclaim(p_queue text, p_stale_s double precision, p_worker text)
RETURNS TABLE (job_id bigint, kind text, status text, attempts integer)
LANGUAGE plpgsql
VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    r ragoverlay_jobs;
    v_status text;
    v_error text;
BEGIN
    FOR r IN
        SELECT * FROM ragoverlay_jobs j
        WHERE j.queue = p_queue AND j.status = 'running'
          AND CASE WHEN p_worker IS NULL
                   THEN j.heartbeat_at < now() - make_interval(secs => p_stale_s)
                   ELSE j.worker = p_worker END
        ORDER BY j.id
        FOR UPDATE SKIP LOCKED
    LOOP
        CONTINUE WHEN NOT pg_try_advisory_lock(1785686643, ragoverlay_job_lock_id(r.id));
        v_error := format('abandoned: worker %s stopped during attempt %s of %s', r.worker, r.attempts,
                          r.max_attempts);
        IF r.period_s IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM ragoverlay_jobs o
                       WHERE o.queue = r.queue AND o.dedupe_key = r.dedupe_key AND o.status = 'queued') THEN
                v_status := 'done';
                UPDATE ragoverlay_jobs SET status = 'done', finished_at = now(), last_error = v_error,
                    failures = failures + 1
                WHERE id = r.id;
            ELSE
                v_status := 'queued';
                UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, attempts = 0,
                    last_error = v_error, failures = failures + 1,
                    run_after = now() + make_interval(secs => coalesce(r.retry_s, 0))
                WHERE id = r.id;
            END IF;
        ELSIF r.attempts >= r.max_attempts THEN
            v_status := 'failed';
            UPDATE ragoverlay_jobs SET status = 'failed', finished_at = now(), last_error = v_error,
                failures = failures + 1, runs = runs + 1
            WHERE id = r.id;
        ELSE
            v_status := 'queued';
            UPDATE ragoverlay_jobs SET status = 'queued', worker = NULL, last_error = v_error,
                failures = failures + 1, runs = runs + 1, run_after = now()
            WHERE id = r.id;
        END IF;
        PERFORM pg_advisory_unlock(1785686643, ragoverlay_job_lock_id(r.id));
        IF v_status = 'queued' THEN
            PERFORM pg_notify('ragoverlay_jobs', p_queue);
        END IF;
        job_id := r.id;
        kind := r.kind;
        status := v_status;
        attempts := r.attempts;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Send a parked (failed) job back to the queue by hand: all its attempts anew.
-- Returns 'queued', 'missing', 'duplicate' (the same work already waits) or the job's status.
DROP FUNCTION IF EXISTS ragoverlay_job_retry;
CREATE FUNCTION ragoverlay_job_retry(p_queue text, p_id bigint)
RETURNS text
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_status text;
BEGIN
    SELECT j.status INTO v_status FROM ragoverlay_jobs j WHERE j.id = p_id AND j.queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_status <> 'failed' THEN
        RETURN v_status;
    END IF;
    BEGIN
        UPDATE ragoverlay_jobs SET status = 'queued', attempts = 0, run_after = now(), worker = NULL,
            finished_at = NULL
        WHERE id = p_id;
    EXCEPTION WHEN unique_violation THEN
        RETURN 'duplicate';
    END;
    PERFORM pg_notify('ragoverlay_jobs', p_queue);
    RETURN 'queued';
END;
$$;
