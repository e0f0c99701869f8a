-- A labelled cartridge back from a vault whose label reel has not read since (unix seconds
-- since when; 0: nothing to check). No write goes to it before its label is read and found to
-- be the one the catalogue recorded: the import's label-check job or, if a write comes first,
-- the write itself reads it. Keep in step with the other backend's 0012_label_unchecked.sql.
ALTER TABLE cartridges ADD COLUMN label_unchecked_unix INTEGER NOT NULL DEFAULT 0;
