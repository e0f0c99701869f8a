-- What a filesystem gave each object besides its bytes (on-tape format version 2): its kind
-- (0 nothing recorded, 1 regular file, 2 symbolic link, whose bytes are the link's target),
-- permission bits, numeric owner and group, and modification time in nanoseconds since the
-- epoch. Objects catalogued before this migration record nothing (kind 0, NULLs); so do
-- objects rebuilt from version 1 tapes.
ALTER TABLE objects
    ADD COLUMN kind BIGINT NOT NULL DEFAULT 0 CHECK (kind IN (0, 1, 2)),
    ADD COLUMN mode BIGINT CHECK (mode BETWEEN 0 AND 4095),
    ADD COLUMN uid BIGINT CHECK (uid BETWEEN 0 AND 4294967295),
    ADD COLUMN gid BIGINT CHECK (gid BETWEEN 0 AND 4294967295),
    ADD COLUMN mtime_ns BIGINT,
    -- Bit 0: a regular file with holes (recall writes runs of zeros as holes again).
    ADD COLUMN flags BIGINT CHECK (flags BETWEEN 0 AND 1);
