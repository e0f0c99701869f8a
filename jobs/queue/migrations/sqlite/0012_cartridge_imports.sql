-- An operator's request to take cartridges in from the library's import/export elements
-- (`reel cartridge import`, src/cartridge_import.rs), and what the worker that did it found.
-- barcodes: space-separated, '' for everything in the mail slots; library: '' for any. A
-- worker takes a row (taken_by, taken_ms) and finishes it (done_ms > 0, result); a row taken
-- by a worker that died is taken again after a minute. Keep in step with the other backend's
-- 0012_cartridge_imports.sql.
CREATE TABLE IF NOT EXISTS reel_cartridge_imports (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    library       TEXT NOT NULL DEFAULT '',
    barcodes      TEXT NOT NULL DEFAULT '',
    requested_ms  INTEGER NOT NULL,
    requested_by  TEXT NOT NULL,
    taken_by      TEXT NOT NULL DEFAULT '',
    taken_ms      INTEGER NOT NULL DEFAULT 0,
    done_ms       INTEGER NOT NULL DEFAULT 0,
    result        TEXT NOT NULL DEFAULT ''
);
