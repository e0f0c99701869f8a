-- Deleting objects, legal holds and retention (src/catalogue/deletion.rs, hold.rs, retention.rs).
-- A delete is immediate in the catalogue and logical on tape: each deletion (one `reel delete`
-- job) gets a row here, and the objects it deleted point at it. An object with a deletion is
-- gone from look-ups and recalls; it is in the recycle log, and `reel undelete` brings it back
-- while its deletion is younger than the quarantine ([lifecycle] quarantine_days); after that
-- its copies are dead space. Keep in step with the other backend's 0013_lifecycle.sql.
CREATE TABLE deletions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The delete job that made it (one deletion per job, so a job run again resumes it).
    job_id       TEXT    NOT NULL UNIQUE,
    deleted_unix INTEGER NOT NULL,
    -- When its quarantine ends ([lifecycle] quarantine_days when it was made): until then
    -- `reel undelete` brings its objects back; after, their copies are dead space for good.
    purge_after_unix INTEGER NOT NULL,
    deleted_by   TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    -- What was asked: `prefix a/b/` or `3 keys`.
    scope        TEXT    NOT NULL
) STRICT;

ALTER TABLE objects ADD COLUMN deletion_id INTEGER REFERENCES deletions (id);
CREATE INDEX objects_deleted ON objects (deletion_id) WHERE deletion_id IS NOT NULL;

-- A legal hold on one key or on every key under a prefix: while it is not released, nothing it
-- covers is deleted or expires. Who placed and released it, when and why, are kept.
CREATE TABLE legal_holds (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    key            TEXT,
    prefix         TEXT,
    placed_unix    INTEGER NOT NULL,
    placed_by      TEXT    NOT NULL,
    reason         TEXT    NOT NULL,
    released_unix  INTEGER,
    released_by    TEXT,
    release_reason TEXT,
    CHECK ((key IS NULL) <> (prefix IS NULL))
) STRICT;
CREATE INDEX legal_holds_active ON legal_holds (id) WHERE released_unix IS NULL;

-- The retention of an archived object generation (src/catalogue/retention.rs): its storage class
-- had `[lifecycle.retention.CLASS]` when its archive was planned, so it cannot be deleted before
-- `created_unix + retain_days` days, and, if the class says `expire`, a worker deletes it after.
-- Kept per generation with the days fixed then: a later change of the configuration shortens
-- nothing already archived.
CREATE TABLE object_retention (
    key           TEXT    NOT NULL,
    generation    INTEGER NOT NULL CHECK (generation >= 1),
    storage_class TEXT    NOT NULL,
    retain_days   INTEGER NOT NULL CHECK (retain_days > 0),
    PRIMARY KEY (key, generation)
) STRICT, WITHOUT ROWID;
CREATE INDEX object_retention_by_class ON object_retention (storage_class);
