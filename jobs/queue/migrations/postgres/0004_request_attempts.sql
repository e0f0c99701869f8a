-- Tape requests keep their own attempts. A request whose batch failed in a way that may pass
-- later (a drive or medium fault, a source that could not be read this time) waits out a
-- backoff in state 'waiting' before it is queued again, and fails for good after the worker's
-- max_attempts; nothing is retried at once or forever. 'waiting' is not 'queued', so the
-- queue summary (reel_tape_queues, kept by the triggers of 0002) does not count it and no drive
-- mounts for work that cannot be claimed yet. Keep in step with ../sqlite/0004_request_attempts.sql.
ALTER TABLE reel_tape_requests ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reel_tape_requests ADD COLUMN IF NOT EXISTS not_before_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reel_tape_requests DROP CONSTRAINT IF EXISTS reel_tape_requests_state_check;
ALTER TABLE reel_tape_requests ADD CONSTRAINT reel_tape_requests_state_check
    CHECK (state IN ('queued','claimed','waiting','done','failed'));
CREATE INDEX IF NOT EXISTS reel_tape_requests_waiting ON reel_tape_requests (not_before_ms)
    WHERE state = 'waiting';
