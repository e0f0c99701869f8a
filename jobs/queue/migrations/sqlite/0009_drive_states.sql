-- Drives an operator (or a worker, after repeated failures) took out of service, so every host
-- sees it: a drive with a row whose state is 'down' gets no new mount and gives back what it
-- holds. A drive without a row is up. `by_whom` is who set it (an OS user, an API token, or
-- the worker that took it down itself); `automatic` is 1 for the latter. Keep in step with the
-- other backend's 0009_drive_states.sql.
CREATE TABLE IF NOT EXISTS reel_drive_states (
    drive      TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    by_whom    TEXT NOT NULL,
    automatic  BIGINT NOT NULL DEFAULT 0,
    since_ms   BIGINT NOT NULL
);
