-- Cleaning cartridges and cleanings (src/catalogue/cleaning.rs). A cleaning cartridge is never
-- a data cartridge: it has no row in cartridges. uses counts the cleanings reel did with it;
-- expired_unix > 0 once a drive reported it used up (TapeAlert 22 or 23), after which reel
-- does not load it again. cleanings is the log, per drive (its library's name and index, as
-- in drive names). Keep in step with the other backend's 0009_cleaning.sql.
CREATE TABLE cleaning_cartridges (
    barcode         TEXT   NOT NULL PRIMARY KEY,
    uses            INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0),
    last_used_unix  INTEGER NOT NULL DEFAULT 0,
    expired_unix    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE cleanings (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    library   TEXT   NOT NULL,
    drive     INTEGER NOT NULL CHECK (drive >= 0),
    barcode   TEXT   NOT NULL,
    at_unix   INTEGER NOT NULL,
    outcome   TEXT   NOT NULL
) STRICT;

CREATE INDEX cleanings_by_drive ON cleanings (library, drive, id);
