-- Queued work per mount target, kept by triggers, so that the scheduler's queue summary reads
-- one row per cartridge (reads) or pool (writes) instead of aggregating every queued request.
-- Keep in step with ../postgres/0002_tape_queues.sql (there the triggers are per statement;
-- SQLite has only row triggers, which update rows in place).
CREATE TABLE IF NOT EXISTS reel_tape_queues (
    mode    TEXT    NOT NULL CHECK (mode IN ('read','write')),
    target  TEXT    NOT NULL,
    pool    TEXT    NOT NULL,
    bytes   INTEGER NOT NULL DEFAULT 0,
    files   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (mode, target, pool)
);

INSERT INTO reel_tape_queues (mode, target, pool, bytes, files)
SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END, COALESCE(pool, ''),
       SUM(bytes), SUM(files)
FROM reel_tape_requests WHERE state = 'queued'
GROUP BY 1, 2, 3;

CREATE INDEX IF NOT EXISTS reel_tape_requests_read_age ON reel_tape_requests (barcode, created_ms)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_read_priority ON reel_tape_requests (barcode, priority)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_age ON reel_tape_requests (pool, created_ms)
    WHERE state = 'queued' AND mode = 'write';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_priority ON reel_tape_requests (pool, priority)
    WHERE state = 'queued' AND mode = 'write';

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
