-- The lease table the catalogue fences writers by (src/catalogue/writer_lease.rs): a container
-- closes, and becomes durable or verified, only while its writer's row here names it at its
-- epoch, unexpired. The jobs layer owns the rows (it takes and renews leases) and creates the
-- same table in its own migration 0001; either may run first, hence IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS reel_leases (
    resource      TEXT PRIMARY KEY,
    holder        TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    expires_ms    INTEGER NOT NULL DEFAULT 0,
    heartbeat_ms  INTEGER NOT NULL DEFAULT 0
);
