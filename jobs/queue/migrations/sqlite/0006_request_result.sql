-- A tape request may carry a result of its own: what a cartridge task (verify a container,
-- label a cartridge, rebuild a cartridge's catalogue entries) found, as JSON, so that the
-- job's result can be built from its requests once the last one ends. Recall and archive
-- requests leave it NULL. Keep in step with ../postgres/0006_request_result.sql.
ALTER TABLE reel_tape_requests ADD COLUMN result TEXT;
