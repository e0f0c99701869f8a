-- One row that GET /healthz rewrites to prove the store takes a write (a full disk, a held
-- write lock or a read-only file shows there, not in the next job).
CREATE TABLE IF NOT EXISTS reel_health (
    id INTEGER PRIMARY KEY,
    probed_ms BIGINT NOT NULL
);
