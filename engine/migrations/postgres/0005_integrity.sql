-- What reel's checks caught (src/integrity.rs): a record damaged on the way to or from a drive
-- (LBP), content whose framing or SHA-256 was wrong, a medium error. Kept by cartridge so an
-- operator sees which cartridges and drives keep failing; never updated, only appended. No
-- reference to cartridges: a catch on a cartridge being taken in may come first.
CREATE TABLE integrity_catches (
    id            BIGSERIAL PRIMARY KEY,
    barcode       TEXT    NOT NULL,
    drive         BIGINT  NOT NULL CHECK (drive >= 0),
    kind          TEXT    NOT NULL
                  CHECK (kind IN ('lbp_on_write', 'lbp_on_read', 'content', 'medium_error')),
    first_block   BIGINT  NOT NULL CHECK (first_block >= 0),
    last_block    BIGINT  NOT NULL CHECK (last_block >= first_block),
    container_id  BIGINT,
    detail        TEXT    NOT NULL,
    at_ms         BIGINT  NOT NULL
);

CREATE INDEX integrity_catches_by_cartridge ON integrity_catches (barcode, id);
