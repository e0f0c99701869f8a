-- API tokens of `reel serve` (docs/OPERATIONS.md, "Running reel serve safely"). A token is an
-- id and a secret; only the SHA-256 of the secret is kept. `scopes` is a comma-separated set
-- of read, submit, operate, admin; `roots` a JSON array of the absolute directories its
-- archive sources and recall destinations must lie in; `key_prefixes` a JSON array of the
-- prefixes of the object keys its jobs may write and read; `max_priority` the highest priority
-- its jobs may ask for. Keep in step with ../sqlite/0007_tokens.sql.
CREATE TABLE IF NOT EXISTS reel_tokens (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    roots         TEXT NOT NULL,
    key_prefixes  TEXT NOT NULL,
    max_priority  BIGINT NOT NULL,
    created_ms    BIGINT NOT NULL,
    revoked_ms    BIGINT
);
-- Which token submitted a job (NULL: the `reel` command, run by whoever holds the data dir).
ALTER TABLE reel_jobs ADD COLUMN IF NOT EXISTS token_id TEXT;
CREATE INDEX IF NOT EXISTS reel_jobs_token ON reel_jobs (token_id, created_ms);
