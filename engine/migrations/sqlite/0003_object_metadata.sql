-- What a filesystem gave each object besides its bytes (on-tape format version 2): its kind
-- (0 nothing recorded, 1 regular file, 2 symbolic link, whose bytes are the link's target),
-- permission bits, numeric owner and group, and modification time in nanoseconds since the
-- epoch. Objects catalogued before this migration record nothing (kind 0, NULLs); so do
-- objects rebuilt from version 1 tapes.
ALTER TABLE objects ADD COLUMN kind INTEGER NOT NULL DEFAULT 0 CHECK (kind IN (0, 1, 2));
ALTER TABLE objects ADD COLUMN mode INTEGER CHECK (mode BETWEEN 0 AND 4095);
ALTER TABLE objects ADD COLUMN uid INTEGER CHECK (uid BETWEEN 0 AND 4294967295);
ALTER TABLE objects ADD COLUMN gid INTEGER CHECK (gid BETWEEN 0 AND 4294967295);
ALTER TABLE objects ADD COLUMN mtime_ns INTEGER;
-- Bit 0: a regular file with holes (recall writes runs of zeros as holes again).
ALTER TABLE objects ADD COLUMN flags INTEGER CHECK (flags BETWEEN 0 AND 1);
