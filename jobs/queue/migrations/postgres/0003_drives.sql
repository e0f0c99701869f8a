-- What every leased drive holds or is about to mount, so that each drive's mount decision sees
-- the drives of every host: per-group drive caps hold across drives and hosts, a cartridge is
-- mounted in one drive at a time, and a pool's extra drives count against its thresholds.
-- A row is trusted only while its writer still holds the drive lease at the epoch it wrote
-- (joined with reel_leases), so a crashed host's rows drop out when its lease lapses.
CREATE TABLE IF NOT EXISTS reel_drives (
    drive       TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    mode        TEXT,
    target      TEXT,
    barcode     TEXT,
    pool        TEXT,
    grp         TEXT,
    since_ms    BIGINT NOT NULL DEFAULT 0,
    updated_ms  BIGINT NOT NULL DEFAULT 0
);
