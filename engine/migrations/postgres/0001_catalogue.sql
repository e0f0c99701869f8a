-- reel catalogue, version 1 (PostgreSQL). Keep in step with ../sqlite/0001_catalogue.sql: same
-- tables, columns, constraints and indexes; only the types differ. Unsigned figures are BIGINT
-- checked non-negative. Object keys use COLLATE "C" so they order by their UTF-8 bytes, as on
-- SQLite, and so the (key, generation) index serves prefix range scans. Times are seconds since
-- the Unix epoch.

-- A pool is a set of cartridges that receive the same copy of a storage class.
CREATE TABLE pools (
    name          TEXT   NOT NULL PRIMARY KEY,
    created_unix  BIGINT NOT NULL
);

-- A storage class says how many copies an object gets (one per pool) and where each goes.
CREATE TABLE storage_classes (
    name          TEXT   NOT NULL PRIMARY KEY,
    created_unix  BIGINT NOT NULL
);

CREATE TABLE storage_class_pools (
    storage_class TEXT    NOT NULL REFERENCES storage_classes (name) ON DELETE CASCADE,
    copy_index    INTEGER NOT NULL CHECK (copy_index >= 0),
    pool          TEXT    NOT NULL REFERENCES pools (name),
    PRIMARY KEY (storage_class, copy_index),
    UNIQUE (storage_class, pool)
);

CREATE TABLE cartridges (
    barcode        TEXT    NOT NULL PRIMARY KEY,
    pool           TEXT    REFERENCES pools (name),
    state          TEXT    NOT NULL DEFAULT 'new'
                   CHECK (state IN ('new', 'active', 'disabled', 'full', 'broken', 'repacking', 'exported')),
    worm           BOOLEAN NOT NULL,
    capacity_bytes BIGINT  NOT NULL CHECK (capacity_bytes >= 0),
    used_bytes     BIGINT  NOT NULL DEFAULT 0 CHECK (used_bytes >= 0),
    -- Block number of end of data (the next block written goes there).
    eod_block      BIGINT  NOT NULL DEFAULT 0 CHECK (eod_block >= 0),
    -- Tape file number the next container gets.
    next_file      BIGINT  NOT NULL DEFAULT 0 CHECK (next_file >= 0),
    calibrated     BOOLEAN NOT NULL DEFAULT FALSE,
    mount_count    BIGINT  NOT NULL DEFAULT 0 CHECK (mount_count >= 0),
    label_epoch    BIGINT  NOT NULL DEFAULT 0 CHECK (label_epoch >= 0),
    cartridge_uuid UUID    UNIQUE,
    created_unix   BIGINT  NOT NULL,
    updated_unix   BIGINT  NOT NULL
);

-- Choosing a cartridge to write: by pool and state, fullest first.
CREATE INDEX cartridges_by_pool_state ON cartridges (pool, state, used_bytes);

-- One container is one tape file: header record, data records, footer, filemark.
CREATE TABLE containers (
    id             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid           UUID    NOT NULL UNIQUE,
    barcode        TEXT    NOT NULL REFERENCES cartridges (barcode),
    file_number    BIGINT  NOT NULL CHECK (file_number >= 0),
    first_block    BIGINT  NOT NULL CHECK (first_block >= 0),
    -- NULL until the container is closed (footer and filemark issued).
    last_block     BIGINT  CHECK (last_block IS NULL OR last_block >= first_block),
    bytes          BIGINT  NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    record_size    INTEGER NOT NULL CHECK (record_size > 0),
    sha256         BYTEA   CHECK (sha256 IS NULL OR octet_length(sha256) = 32),
    state          TEXT    NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'durable', 'verified', 'dead')),
    created_unix   BIGINT  NOT NULL,
    closed_unix    BIGINT,
    updated_unix   BIGINT  NOT NULL
);

-- Per-cartridge queries (containers_on, recovery, the append-only guard).
CREATE INDEX containers_by_cartridge ON containers (barcode, file_number);
-- A tape file holds at most one live container; a dead one may share its file number with the
-- container written again at end of data after a crash.
CREATE UNIQUE INDEX containers_live_file ON containers (barcode, file_number) WHERE state <> 'dead';
-- Start-up recovery looks for pending containers.
CREATE INDEX containers_pending ON containers (barcode) WHERE state = 'pending';

-- One generation of one key. It is visible (archived) only through a copy in a durable or
-- verified container.
CREATE TABLE objects (
    id             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key            TEXT    COLLATE "C" NOT NULL
                   CHECK (octet_length(key) BETWEEN 1 AND 4096),
    generation     BIGINT  NOT NULL CHECK (generation >= 1),
    size           BIGINT  NOT NULL CHECK (size >= 0),
    sha256         BYTEA   NOT NULL CHECK (octet_length(sha256) = 32),
    created_unix   BIGINT  NOT NULL,
    -- Key look-ups, latest generation, prefix listings (keys compare by their UTF-8 bytes).
    UNIQUE (key, generation)
);

-- Where one copy of an object is: a byte range of a container's data stream.
CREATE TABLE copies (
    object_id      BIGINT  NOT NULL REFERENCES objects (id),
    container_id   BIGINT  NOT NULL REFERENCES containers (id),
    byte_offset    BIGINT  NOT NULL CHECK (byte_offset >= 0),
    byte_length    BIGINT  NOT NULL CHECK (byte_length >= 0),
    PRIMARY KEY (object_id, container_id)
);

-- Per-container queries (verify, repack, dump).
CREATE INDEX copies_by_container ON copies (container_id, byte_offset);
