-- Deleting objects and legal holds (src/catalogue/deletion.rs, src/catalogue/hold.rs).
-- A delete is immediate in the catalogue and logical on tape: each deletion (one `reel delete`
-- job) gets a row here, and the objects it deleted point at it. An object with a deletion is
-- gone from look-ups and recalls; it is in the recycle log, and `reel undelete` brings it back
-- while its deletion is younger than the quarantine ([lifecycle] quarantine_days); after that
-- its copies are dead space. Keep in step with the other backend's 0013_deletion_and_holds.sql.
CREATE TABLE deletions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The delete job that made it (one deletion per job, so a job run again resumes it).
    job_id       TEXT    NOT NULL UNIQUE,
    deleted_unix INTEGER NOT NULL,
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
