-- When reel last read data from a cartridge (a recall or a verify that read at least one
-- object or container), for `reel cartridge ls|show`: a cartridge nobody has read in years is
-- one to verify. 0 is "never" (or "before this column existed"). Keep in step with the other
-- backend's 0010_cartridge_last_read.sql.
ALTER TABLE cartridges ADD COLUMN last_read_unix INTEGER NOT NULL DEFAULT 0;
