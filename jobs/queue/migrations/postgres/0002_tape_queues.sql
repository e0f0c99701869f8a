-- Queued work per mount target, kept by triggers, so that the scheduler's queue summary reads
-- one row per cartridge (reads) or pool (writes) instead of aggregating every queued request:
-- with 1 000 000 requests queued that aggregate took hundreds of milliseconds on every drive
-- step. Keep in step with ../sqlite/0002_tape_queues.sql.
--
-- A row holds the bytes and files of the queued requests of one target and one request pool
-- (`pool` is '' where the request has none); the summary takes MAX(pool) over a target's rows,
-- as the aggregate did. Rows whose files fall to 0 stay, and are skipped. The oldest request and
-- the highest priority of a target are looked up at read time through the partial indexes
-- below (an index probe each), because neither can be kept up by subtraction.
CREATE TABLE IF NOT EXISTS reel_tape_queues (
    mode    TEXT   NOT NULL CHECK (mode IN ('read','write')),
    -- The barcode (reads) or the pool (writes).
    target  TEXT   NOT NULL,
    pool    TEXT   NOT NULL,
    bytes   BIGINT NOT NULL DEFAULT 0,
    files   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (mode, target, pool)
);

INSERT INTO reel_tape_queues (mode, target, pool, bytes, files)
SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END, COALESCE(pool, ''),
       SUM(bytes), SUM(files)
FROM reel_tape_requests WHERE state = 'queued'
GROUP BY 1, 2, 3
ON CONFLICT (mode, target, pool) DO NOTHING;

-- Oldest queued request and highest priority of a target, one probe each. (The priority index
-- for reads is not reel_tape_requests_read: given the choice, PostgreSQL took the smaller age
-- index and sorted a cartridge's whole queue for its top priority, 0.75 ms a cartridge.)
CREATE INDEX IF NOT EXISTS reel_tape_requests_read_age ON reel_tape_requests (barcode, created_ms)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_read_priority ON reel_tape_requests (barcode, priority)
    WHERE state = 'queued' AND mode = 'read';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_age ON reel_tape_requests (pool, created_ms)
    WHERE state = 'queued' AND mode = 'write';
CREATE INDEX IF NOT EXISTS reel_tape_requests_write_priority ON reel_tape_requests (pool, priority)
    WHERE state = 'queued' AND mode = 'write';

-- Statement-level triggers with transition tables: one upsert per target a statement touches,
-- not one per row (a row trigger would update the same summary row once per request, and
-- repeated updates of one row in one transaction slow down with every version). The upserts
-- run in target order, so transactions that touch several targets lock them in the same order.
CREATE OR REPLACE FUNCTION reel_tape_queues_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO reel_tape_queues AS q (mode, target, pool, bytes, files)
        SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END, COALESCE(pool, ''),
               SUM(bytes), SUM(files)
        FROM reel_new_rows WHERE state = 'queued'
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (mode, target, pool)
        DO UPDATE SET bytes = q.bytes + EXCLUDED.bytes, files = q.files + EXCLUDED.files;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO reel_tape_queues AS q (mode, target, pool, bytes, files)
        SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END, COALESCE(pool, ''),
               -SUM(bytes), -SUM(files)
        FROM reel_old_rows WHERE state = 'queued'
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (mode, target, pool)
        DO UPDATE SET bytes = q.bytes + EXCLUDED.bytes, files = q.files + EXCLUDED.files;
    ELSE
        INSERT INTO reel_tape_queues AS q (mode, target, pool, bytes, files)
        SELECT mode, target, pool, SUM(bytes), SUM(files)
        FROM (
            SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END AS target,
                   COALESCE(pool, '') AS pool, -bytes AS bytes, -files AS files
            FROM reel_old_rows WHERE state = 'queued'
            UNION ALL
            SELECT mode, CASE WHEN mode = 'read' THEN barcode ELSE pool END,
                   COALESCE(pool, ''), bytes, files
            FROM reel_new_rows WHERE state = 'queued'
        ) d
        GROUP BY 1, 2, 3
        HAVING SUM(bytes) <> 0 OR SUM(files) <> 0
        ORDER BY 1, 2, 3
        ON CONFLICT (mode, target, pool)
        DO UPDATE SET bytes = q.bytes + EXCLUDED.bytes, files = q.files + EXCLUDED.files;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS reel_tape_queues_insert ON reel_tape_requests;
CREATE TRIGGER reel_tape_queues_insert AFTER INSERT ON reel_tape_requests
    REFERENCING NEW TABLE AS reel_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION reel_tape_queues_apply();
DROP TRIGGER IF EXISTS reel_tape_queues_update ON reel_tape_requests;
CREATE TRIGGER reel_tape_queues_update AFTER UPDATE ON reel_tape_requests
    REFERENCING OLD TABLE AS reel_old_rows NEW TABLE AS reel_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION reel_tape_queues_apply();
DROP TRIGGER IF EXISTS reel_tape_queues_delete ON reel_tape_requests;
CREATE TRIGGER reel_tape_queues_delete AFTER DELETE ON reel_tape_requests
    REFERENCING OLD TABLE AS reel_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION reel_tape_queues_apply();
