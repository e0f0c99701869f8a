-- Cartridges sent out of the library (`reel cartridge export`, src/catalogue/vault.rs): where they
-- went, the state each had before (restored when it comes back), who sent it and when, and when
-- it left the storage slots (moved to an import/export element, or found gone from the
-- library; 0 while it is still inside). A cartridge in this table is `exported`. Keep in step
-- with the other backend's 0008_cartridge_vault.sql.
CREATE TABLE cartridge_vault (
    barcode         TEXT    NOT NULL PRIMARY KEY REFERENCES cartridges (barcode),
    location        TEXT    NOT NULL,
    state_before    TEXT    NOT NULL,
    reason_before   TEXT    NOT NULL,
    by_before       TEXT    NOT NULL,
    unix_before     INTEGER NOT NULL,
    exported_by     TEXT    NOT NULL,
    exported_unix   INTEGER NOT NULL,
    left_unix       INTEGER NOT NULL DEFAULT 0
) STRICT;
