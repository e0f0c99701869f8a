-- The drive's error counters over each load (ABI 1.3, SCSI log pages 02h and 03h): write and
-- read errors it corrected and errors it could not, as the difference between the load and
-- the unload. NULL: the drive does not count it (every reading before this column existed,
-- and drives whose plugin has no such counter). Keep in step with the other backend's
-- 0011_health_error_counters.sql.
ALTER TABLE cartridge_health ADD COLUMN write_errors_corrected BIGINT;
ALTER TABLE cartridge_health ADD COLUMN write_errors_uncorrected BIGINT;
ALTER TABLE cartridge_health ADD COLUMN read_errors_corrected BIGINT;
ALTER TABLE cartridge_health ADD COLUMN read_errors_uncorrected BIGINT;
