-- reel's own job tables (SQLite). Times are unix milliseconds (INTEGER).
CREATE TABLE IF NOT EXISTS reel_jobs (
    id               TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    spec             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued','running','done','failed','cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    not_before       INTEGER NOT NULL,
    worker           TEXT,
    apalis_task_id   TEXT,
    objects_done     INTEGER NOT NULL DEFAULT 0,
    objects_total    INTEGER NOT NULL DEFAULT 0,
    bytes_done       INTEGER NOT NULL DEFAULT 0,
    bytes_total      INTEGER NOT NULL DEFAULT 0,
    checkpoint       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error            TEXT,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL,
    finished_ms      INTEGER
);
CREATE INDEX IF NOT EXISTS reel_jobs_state ON reel_jobs (state, updated_ms);

CREATE TABLE IF NOT EXISTS reel_tape_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT NOT NULL REFERENCES reel_jobs(id) ON DELETE CASCADE,
    mode         TEXT NOT NULL CHECK (mode IN ('read','write')),
    barcode      TEXT,
    pool         TEXT,
    object_key   TEXT NOT NULL,
    bytes        INTEGER NOT NULL,
    files        INTEGER NOT NULL DEFAULT 1,
    priority     INTEGER NOT NULL DEFAULT 0,
    detail       TEXT,
    state        TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued','claimed','done','failed')),
    claimed_by   TEXT,
    claim_epoch  INTEGER,
    error        TEXT,
    created_ms   INTEGER NOT NULL,
    updated_ms   INTEGER NOT NULL,
    CHECK ((mode = 'read' AND barcode IS NOT NULL) OR (mode = 'write' AND pool IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS reel_tape_requests_read ON reel_tape_requests (barcode, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS reel_tape_requests_write ON reel_tape_requests (pool, state, priority DESC, id);
CREATE INDEX IF NOT EXISTS reel_tape_requests_job ON reel_tape_requests (job_id);

CREATE TABLE IF NOT EXISTS reel_leases (
    resource      TEXT PRIMARY KEY,
    holder        TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    expires_ms    INTEGER NOT NULL DEFAULT 0,
    heartbeat_ms  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS reel_workers (
    name          TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    started_ms    INTEGER NOT NULL,
    heartbeat_ms  INTEGER NOT NULL,
    stopped_ms    INTEGER
);
