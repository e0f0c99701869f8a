-- What drives reported each time a cartridge left them (src/health.rs): the TapeAlert flags set
-- at the unmount (flag n in bit n - 1), and what the drive's statistics counted while the
-- cartridge was loaded (NULL: the drive does not count it). Kept per cartridge and per drive,
-- appended, never updated, for `reel cartridge show` and `reel drive show` (a drive is its
-- library's name, as in drive names, and its index). No reference to
-- cartridges: a cartridge being taken in may be unmounted before it is catalogued.
CREATE TABLE cartridge_health (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    barcode        TEXT    NOT NULL,
    library        TEXT    NOT NULL,
    drive          INTEGER NOT NULL CHECK (drive >= 0),
    drive_serial   TEXT    NOT NULL,
    at_unix        INTEGER NOT NULL,
    tape_alerts    INTEGER NOT NULL,
    bytes_written  INTEGER,
    bytes_read     INTEGER,
    repositions    INTEGER,
    backhitches    INTEGER
) STRICT;

CREATE INDEX cartridge_health_by_cartridge ON cartridge_health (barcode, id);
CREATE INDEX cartridge_health_by_drive ON cartridge_health (library, drive, id);
