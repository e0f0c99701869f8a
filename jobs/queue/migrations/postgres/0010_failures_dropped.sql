-- An operator who has read a job's failed requests and will not retry them drops them from the
-- list of failures to review (`reel jobs failed drop`): the requests and their reasons stay
-- with the job, which `reel jobs show` still lists; the job leaves `reel jobs failed`. A retry
-- clears the mark. Keep in step with the other backend's 0010_failures_dropped.sql.
ALTER TABLE reel_jobs ADD COLUMN failures_dropped_ms BIGINT;
