-- The library's elements (drives, slots, import/export slots, picker) as a worker last read
-- them from its changer, for the dashboard and GET /v1/library: reel serve does not open the
-- device plugin. Each worker replaces its library's rows when they change. `library` is the
-- library's id (the prefix of its drive names); `kind` is drive, slot,
-- import_export or picker; `barcode` is NULL for an empty element; `flags` the plugin's
-- REEL_ELEMENT_* flags. Keep in step with the other backend's 0008_library.sql.
CREATE TABLE IF NOT EXISTS reel_library_elements (
    library  TEXT NOT NULL,
    kind     TEXT NOT NULL,
    idx      BIGINT NOT NULL,
    address  BIGINT NOT NULL,
    barcode  TEXT,
    flags    BIGINT NOT NULL,
    seen_by  TEXT NOT NULL,
    seen_ms  BIGINT NOT NULL,
    PRIMARY KEY (library, kind, idx)
);
