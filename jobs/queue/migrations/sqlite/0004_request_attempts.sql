-- Tape requests keep their own attempts. A request whose batch failed in a way that may pass
-- later (a drive or medium fault, a source that could not be read this time) waits out a
-- backoff in state 'waiting' before it is queued again, and fails for good after the worker's
-- max_attempts; nothing is retried at once or forever. 'waiting' is not 'queued', so the
-- queue summary (reel_tape_queues, kept by the triggers of 0002) does not count it and no drive
-- mounts for work that cannot be claimed yet. Keep in step with ../postgres/0004_request_attempts.sql.
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt (copy, drop, rename)
-- and its indexes and the queue-summary triggers of 0002 are created again on it. Dropping the
-- old table drops its triggers; the rows move with their ids, so the summary table stays right.
CREATE TABLE reel_tape_requests_0004 (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT NOT NULL REFERENCES reel_jobs(id) ON DELETE CASCADE,
    mode          TEXT NOT NULL CHECK (mode IN ('read','write')),
    barcode       TEXT,
    pool          TEXT,
    object_key    TEXT NOT NULL,
    bytes         INTEGER NOT NULL,
    files         INTEGER NOT NULL DEFAULT 1,
    priority      INTEGER NOT NULL DEFAULT 0,
    detail        TEXT,
    state         TEXT NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued','claimed','waiting','done','failed')),
    claimed_by    TEXT,
    claim_epoch   INTEGER,
    error         TEXT,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    not_before_ms INTEGER NOT NULL DEFAULT 0,
    CHECK ((mode = 'read' AND barcode IS NOT NULL) OR (mode = 'write' AND pool IS NOT NULL))
);
INSERT INTO reel_tape_requests_0004 (id, job_id, mode, barcode, pool, object_key, bytes, files,
    priority, detail, state, claimed_by, claim_epoch, error, created_ms, updated_ms)
SELECT id, job_id, mode, barcode, pool, object_key, bytes, files, priority, detail, state,
    claimed_by, claim_epoch, error, created_ms, updated_ms
FROM reel_tape_requests;
DROP TABLE reel_tape_requests;
ALTER TABLE reel_tape_requests_0004 RENAME TO reel_tape_requests;

CREATE INDEX IF NOT EXISTS reel_tape_requests_read ON reel_tape_requests (barcode, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS reel_tape_requests_write ON reel_tape_requests (pool, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS reel_tape_requests_job ON reel_tape_requests (job_id);
CREATE INDEX IF NOT EXISTS reel_tape_requests_read_age ON reel_tape_requests (barcode, created_ms)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_read_priority ON reel_tape_requests (barcode, priority)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_age ON reel_tape_requests (pool, created_ms)
    WHERE state = 'queued' AND mode = 'write';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_priority ON reel_tape_requests (pool, priority)
    WHERE state = 'queued' AND mode = 'write';
CREATE INDEX IF NOT EXISTS reel_tape_requests_waiting ON reel_tape_requests (not_before_ms)
    WHERE state = 'waiting';
CREATE TRIGGER IF NOT EXISTS reel_tape_queues_insert AFTER INSERT ON reel_tape_requests
WHEN NEW.state = 'queued'
BEGIN
    INSERT INTO reel_tape_queues (mode, target, pool, bytes, files)
    VALUES (NEW.mode, CASE WHEN NEW.mode = 'read' THEN NEW.barcode ELSE NEW.pool END,
            COALESCE(NEW.pool, ''), NEW.bytes, NEW.files)
    ON CONFLICT (mode, target, pool)
    DO UPDATE SET bytes = bytes + excluded.bytes, files = files + excluded.files;
END;

CREATE TRIGGER IF NOT EXISTS reel_tape_queues_update
AFTER UPDATE OF state, mode, barcode, pool, bytes, files ON reel_tape_requests
WHEN OLD.state = 'queued' OR NEW.state = 'queued'
BEGIN
    UPDATE reel_tape_queues SET bytes = bytes - OLD.bytes, files = files - OLD.files
    WHERE OLD.state = 'queued' AND mode = OLD.mode
      AND target = CASE WHEN OLD.mode = 'read' THEN OLD.barcode ELSE OLD.pool END
      AND pool = COALESCE(OLD.pool, '');
    INSERT INTO reel_tape_queues (mode, target, pool, bytes, files)
    SELECT NEW.mode, CASE WHEN NEW.mode = 'read' THEN NEW.barcode ELSE NEW.pool END,
           COALESCE(NEW.pool, ''), NEW.bytes, NEW.files
    WHERE NEW.state = 'queued'
    ON CONFLICT (mode, target, pool)
    DO UPDATE SET bytes = bytes + excluded.bytes, files = files + excluded.files;
END;

CREATE TRIGGER IF NOT EXISTS reel_tape_queues_delete AFTER DELETE ON reel_tape_requests
WHEN OLD.state = 'queued'
BEGIN
    UPDATE reel_tape_queues SET bytes = bytes - OLD.bytes, files = files - OLD.files
    WHERE mode = OLD.mode
      AND target = CASE WHEN OLD.mode = 'read' THEN OLD.barcode ELSE OLD.pool END
      AND pool = COALESCE(OLD.pool, '');
END;
