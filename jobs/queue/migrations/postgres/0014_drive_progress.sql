-- What each drive's running batch has done so far, for `reel drive show` and
-- `GET /v1/drives/{drive}`: the jobs it serves (a JSON array of at most 20 ids, and how many in
-- all), its files and bytes done of its total, the tape block near which it is (NULL: not known
-- yet), when it started and when this was written. Written by the worker holding the drive
-- about once a second while a batch runs, deleted when the batch settles; a row counts only
-- while its writer still holds the drive lease at the epoch it wrote (as on reel_drives).
-- Keep in step with the other backend's 0014_drive_progress.sql.
CREATE TABLE IF NOT EXISTS reel_drive_progress (
    drive       TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    jobs        TEXT NOT NULL,
    job_count   BIGINT NOT NULL,
    files       BIGINT NOT NULL,
    files_done  BIGINT NOT NULL,
    bytes       BIGINT NOT NULL,
    bytes_done  BIGINT NOT NULL,
    block       BIGINT,
    started_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
