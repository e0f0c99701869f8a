-- Why a cartridge is in its state, who put it there and when (an operator's `reel cartridge
-- state`, or reel itself: `reel` as who), and when it was last mounted and last written, for
-- `reel cartridge ls|show`. 0 is "never" (or "before this column existed"). Keep in step with
-- the other backend's 0006_cartridge_notes.sql.
ALTER TABLE cartridges ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE cartridges ADD COLUMN state_by TEXT NOT NULL DEFAULT '';
ALTER TABLE cartridges ADD COLUMN state_unix INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cartridges ADD COLUMN last_mounted_unix INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cartridges ADD COLUMN last_written_unix INTEGER NOT NULL DEFAULT 0;
