-- An operator's request to clean a drive with a cleaning cartridge (`reel drive clean`), and
-- what the worker holding the drive did about it. One row per drive: the last request.
-- done_ms < requested_ms: not done yet. Keep in step with the other backend's 0013_drive_cleans.sql.
CREATE TABLE IF NOT EXISTS reel_drive_cleans (
    drive         TEXT PRIMARY KEY,
    requested_ms  BIGINT NOT NULL,
    requested_by  TEXT NOT NULL,
    done_ms       BIGINT NOT NULL DEFAULT 0,
    result        TEXT NOT NULL DEFAULT ''
);
