-- reel catalogue, version 2 (PostgreSQL only): copies' references are checked once per
-- statement instead of once per row.
--
-- Closing a container inserts its copies 10 000 rows a statement. The two foreign keys of
-- `copies` checked each row on its own (a lookup and a FOR KEY SHARE lock of the referenced
-- object and container): about 70 % of the copies insert's time, the largest cost of a bulk
-- archive left on the server. A statement-level trigger checks all the statement's rows
-- against `objects` and `containers` with two anti-joins instead (docs/DECISIONS.md 19).
--
-- A foreign key also keeps a referenced row from being deleted while a copy points at it, and
-- its row locks close the race between such a delete and a concurrent insert. The catalogue
-- never deletes or renumbers objects or containers (a container that is no longer wanted is
-- marked dead; objects are history), so instead of re-creating that locking, deleting them,
-- truncating them and changing their ids are refused outright. SQLite keeps its foreign keys:
-- its checks cost little, and it has one writer at a time.

ALTER TABLE copies DROP CONSTRAINT IF EXISTS copies_object_id_fkey;
ALTER TABLE copies DROP CONSTRAINT IF EXISTS copies_container_id_fkey;

-- Every copy a statement added or changed points at an object and a container that exist.
CREATE OR REPLACE FUNCTION reel_copies_references_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing TEXT;
BEGIN
    SELECT m.what INTO missing FROM (
        SELECT 'object ' || n.object_id AS what FROM reel_new_copies n
        WHERE NOT EXISTS (SELECT 1 FROM objects o WHERE o.id = n.object_id)
        UNION ALL
        SELECT 'container ' || n.container_id
        FROM (SELECT DISTINCT container_id FROM reel_new_copies) n
        WHERE NOT EXISTS (SELECT 1 FROM containers k WHERE k.id = n.container_id)
    ) m LIMIT 1;
    IF FOUND THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('copies: %s does not exist', missing),
            HINT = 'a copy must point at a catalogued object and container';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER reel_copies_references_insert AFTER INSERT ON copies
    REFERENCING NEW TABLE AS reel_new_copies
    FOR EACH STATEMENT EXECUTE FUNCTION reel_copies_references_check();
CREATE TRIGGER reel_copies_references_update AFTER UPDATE ON copies
    REFERENCING NEW TABLE AS reel_new_copies
    FOR EACH STATEMENT EXECUTE FUNCTION reel_copies_references_check();

-- Objects and containers are never deleted, truncated or renumbered.
CREATE OR REPLACE FUNCTION reel_catalogue_rows_are_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE restrict_violation USING
        MESSAGE = format('%s: rows are never %s (copies point at them)', TG_TABLE_NAME,
                         CASE TG_OP WHEN 'UPDATE' THEN 'renumbered' WHEN 'TRUNCATE' THEN 'truncated'
                                    ELSE 'deleted' END),
        HINT = 'mark a container dead instead; objects are kept as history';
END
$$;

CREATE TRIGGER reel_objects_permanent BEFORE DELETE OR TRUNCATE ON objects
    FOR EACH STATEMENT EXECUTE FUNCTION reel_catalogue_rows_are_permanent();
CREATE TRIGGER reel_objects_ids_permanent BEFORE UPDATE OF id ON objects
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION reel_catalogue_rows_are_permanent();
CREATE TRIGGER reel_containers_permanent BEFORE DELETE OR TRUNCATE ON containers
    FOR EACH STATEMENT EXECUTE FUNCTION reel_catalogue_rows_are_permanent();
CREATE TRIGGER reel_containers_ids_permanent BEFORE UPDATE OF id ON containers
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION reel_catalogue_rows_are_permanent();
